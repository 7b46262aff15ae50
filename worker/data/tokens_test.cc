#include "worker/data/tokens.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/dataset.h"
#include "worker/data/text.h"

namespace aqueduct {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// Token files lie under the test's temporary directory: the data root.
FileAccess Files() {
  const char* dir = std::getenv("TEST_TMPDIR");
  FileAccess files;
  files.data = *PathRoots::Make("--data_root", {dir ? dir : "/tmp"});
  return files;
}

std::vector<int32_t> Ramp(int n, int vocab) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = (i * 7) % vocab;
  return ids;
}

v1::TextData TokenSpec(const std::string& train, int64_t vocab,
                       const std::string& dtype = "uint16") {
  v1::TextData t;
  t.add_files(train);
  t.set_token_dtype(dtype);
  t.set_vocab_size(vocab);
  t.set_context(4);
  return t;
}

TEST(TokensTest, WrittenIdsMapBackInBothWidths) {
  for (int width : {2, 4}) {
    const std::string path = TempPath("ids" + std::to_string(width) + ".bin");
    std::vector<int32_t> ids = Ramp(100, 70000);
    if (width == 2) ids = Ramp(100, 65536);
    ASSERT_TRUE(WriteTokenFile(path, ids, width).ok());
    auto view = MapTokenFile(path, width, 70000, Files(), "f");
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_EQ(view->count, 100);
    for (int i = 0; i < 100; ++i) EXPECT_EQ((*view)[i], ids[i]) << i;
    EXPECT_EQ(view->Sub(10, 5)[0], ids[10]);
  }
}

TEST(TokensTest, BadFilesAreRefusedNamingWhatIsWrong) {
  const std::string odd = TempPath("odd.bin");
  std::ofstream(odd, std::ios::binary) << std::string(7, 'x');
  auto s = MapTokenFile(odd, 2, 1000, Files(), "data.text.files[0]");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("7 bytes, not a multiple of 2"),
            std::string::npos)
      << s.status();
  const std::string empty = TempPath("empty.bin");
  std::ofstream(empty, std::ios::binary).flush();
  EXPECT_NE(MapTokenFile(empty, 2, 1000, Files(), "f")
                .status()
                .message()
                .find("is empty"),
            std::string::npos);
  const std::string big = TempPath("big.bin");
  ASSERT_TRUE(WriteTokenFile(big, {1, 2, 900, 3}, 2).ok());
  s = MapTokenFile(big, 2, 512, Files(), "data.text.files[0]");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("token 2 is id 900, outside the "
                                      "vocabulary [0, 512)"),
            std::string::npos)
      << s.status();
  EXPECT_FALSE(MapTokenFile("/etc/hostname", 2, 512, Files(), "f").ok());
  EXPECT_FALSE(WriteTokenFile(TempPath("w.bin"), {70000}, 2).ok());
}

// Windows of a token file are the windows of the same ids as text: the
// same inputs and labels for the same indices.
TEST(TokensTest, MappedWindowsEqualHeldTokens) {
  const std::vector<int32_t> ids = Ramp(200, 50);
  const std::string path = TempPath("windows.bin");
  ASSERT_TRUE(WriteTokenFile(path, ids, 2).ok());
  v1::TextData spec = TokenSpec(path, 50);
  spec.set_val_fraction(0.1f);
  auto mapped = LoadTextData(spec, Files());
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  v1::TextData text;
  text.set_context(4);
  text.set_val_fraction(0.1f);
  auto held = SplitText(ids, 50, text, "ids");
  ASSERT_TRUE(held.ok()) << held.status();
  for (const auto& [a, b] : {std::pair(&mapped->train, &held->train),
                             std::pair(&*mapped->test, &*held->test)}) {
    ASSERT_EQ(a->size, b->size);
    ASSERT_EQ(a->num_tokens(), b->num_tokens());
    const std::vector<int64_t> rows = {0, 3, a->size - 1};
    std::vector<float> xa(12), xb(12);
    std::vector<int32_t> ya(12), yb(12);
    GatherBatch(*a, rows, xa.data(), ya.data());
    GatherBatch(*b, rows, xb.data(), yb.data());
    EXPECT_EQ(xa, xb);
    EXPECT_EQ(ya, yb);
  }
}

TEST(TokensTest, ValFileHoldsTheValidationWindows) {
  const std::string train = TempPath("t.bin"), val = TempPath("v.bin");
  ASSERT_TRUE(WriteTokenFile(train, Ramp(40, 30), 4).ok());
  ASSERT_TRUE(WriteTokenFile(val, Ramp(13, 30), 4).ok());
  v1::TextData spec = TokenSpec(train, 30, "uint32");
  spec.set_val_file(val);
  auto splits = LoadTextData(spec, Files());
  ASSERT_TRUE(splits.ok()) << splits.status();
  EXPECT_EQ(splits->train.size, 40 - 4);
  ASSERT_TRUE(splits->test.has_value());
  EXPECT_EQ(splits->test->size, (13 - 1) / 4);
  EXPECT_EQ(splits->train.num_classes, 30);
  ASSERT_TRUE(WriteTokenFile(val, Ramp(3, 30), 4).ok());
  auto short_val = LoadTextData(spec, Files());
  ASSERT_FALSE(short_val.ok());
  EXPECT_NE(short_val.status().message().find("holds 3 tokens"),
            std::string::npos)
      << short_val.status();
}

}  // namespace
}  // namespace aqueduct
