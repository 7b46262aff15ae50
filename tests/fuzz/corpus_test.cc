// Every file of every fuzz target's corpus (tests/fuzz/corpus/<target>/),
// run once through the target's entry in the normal build, so that the
// inputs that once crashed a parser stay fixed without a fuzzing run.
// Files named seed_* are valid inputs made by the real writers (examples,
// the frame encoder, a coordinator's journal, checkpoints, profiles): they
// must be accepted, which shows that each target reaches past its parser's
// first check. Any other file (a regression, or an input libFuzzer found)
// must only run without a crash or a broken invariant.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "tests/fuzz/entries.h"

namespace aqueduct {
namespace fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  absl::Status (*entry)(const uint8_t*, size_t);
};

// Names the target in test names and failures.
void PrintTo(const Target& target, std::ostream* os) { *os << target.name; }

const Target kTargets[] = {
    {"spec", SpecEntry},       {"frame", FrameEntry},
    {"journal", JournalEntry}, {"safetensors", SafetensorsEntry},
    {"profile", ProfileEntry},
};

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class CorpusTest : public testing::TestWithParam<Target> {
 protected:
  static void SetUpTestSuite() {
    logging::LoggingOptions options;
    options.level = "off";                     // The refusals are expected.
    google::protobuf::SetLogHandler(nullptr);  // So are non-UTF-8 strings.
    ASSERT_TRUE(logging::ConfigureLogging(options).ok());
  }
};

TEST_P(CorpusTest, SeedsAreAcceptedAndNothingCrashes) {
  const Target& target = GetParam();
  const fs::path dir = fs::path("tests/fuzz/corpus") / target.name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int seeds = 0, others = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const std::string bytes = ReadAll(entry.path());
    const absl::Status verdict = target.entry(
        reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (name.rfind("seed_", 0) == 0) {
      EXPECT_TRUE(verdict.ok()) << entry.path() << ": " << verdict;
      ++seeds;
    } else {
      ++others;
    }
  }
  EXPECT_GE(seeds, 2) << "the corpus of " << target.name
                      << " lost its valid seeds";
  RecordProperty("seeds", seeds);
  RecordProperty("others", others);
}

INSTANTIATE_TEST_SUITE_P(Targets, CorpusTest, testing::ValuesIn(kTargets),
                         [](const testing::TestParamInfo<Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace fuzz
}  // namespace aqueduct
