// Issue 22, item 13: the coordinator's job logs and traces are its user's
// alone whatever the process's umask: their directories 0700 (also those
// older versions left 0755), their files 0600, also after a trace is
// compacted or a log rewritten (both go through a temporary file that
// replaces the old one), and log files older versions left 0644. So are
// the checkpoints' directories, files and manifests.
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/checkpoint.h"
#include "common/file_system.h"
#include "coordinator/job_logs.h"
#include "coordinator/trace_store.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// Mode bits of `path` in octal ("600"), or "missing".
std::string Mode(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "missing";
  return absl::StrFormat("%o", st.st_mode & 07777);
}

int64_t Size(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

class FileModesTest : public ::testing::Test {
 protected:
  // A umask that lets others read: what a daemon would get from a shell
  // if it did not set its own.
  void SetUp() override { old_umask_ = umask(022); }
  void TearDown() override { umask(old_umask_); }

  mode_t old_umask_ = 0;
};

v1::StageTrace Part(int events) {
  v1::StageTrace part;
  part.set_worker_id("w0");
  for (int i = 0; i < events; ++i) {
    v1::TraceEvent* e = part.add_events();
    e->set_name("F mb=1 v=1");
    e->set_track("compute");
    e->set_start_us(1000 + i);
    e->set_duration_us(10);
  }
  return part;
}

TEST_F(FileModesTest, TracesStayPrivateThroughACompaction) {
  const std::string dir = ::testing::TempDir() + "/traces";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);  // As an older version left it.
  TraceStoreOptions options;
  options.max_file_bytes = 2000;
  options.max_events_per_stage = 4;
  TraceStore store(options);
  ASSERT_TRUE(store.Open(dir).ok());
  EXPECT_EQ(Mode(dir), "700");
  const std::string file = dir + "/job-1.trace";
  int64_t appended = 0;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(store.Append("job-1", Part(5)).ok());
    appended += static_cast<int64_t>(TraceRecord(Part(5)).size());
  }
  // Compacted (it holds less than was appended), and still private.
  EXPECT_LT(Size(file), appended);
  EXPECT_EQ(Mode(file), "600");
  EXPECT_EQ(Mode(file + ".tmp"), "missing");  // Renamed into place.
}

v1::LogLine Line(const std::string& text) {
  v1::LogLine line;
  line.set_time_ms(1);
  line.set_level("info");
  line.set_worker("w0");
  line.set_text(text);
  return line;
}

TEST_F(FileModesTest, LogsStayPrivateThroughARewrite) {
  const std::string dir = ::testing::TempDir() + "/logs";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  // A log an older version wrote, readable by all.
  const std::string old_file = dir + "/job-0.log";
  std::FILE* f = std::fopen(old_file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  ASSERT_EQ(Mode(old_file), "644");

  JobLogOptions options;
  options.max_lines_per_job = 2;
  options.max_file_bytes = 600;
  JobLogStore store(options);
  ASSERT_TRUE(store.Open(dir).ok());
  EXPECT_EQ(Mode(dir), "700");
  EXPECT_EQ(Mode(old_file), "600");
  const std::string file = dir + "/job-1.log";
  for (int i = 0; i < 20; ++i) {
    store.Append("job-1", {Line(std::string(40, 'x'))});
    EXPECT_EQ(Mode(file), "600") << "after line " << i;
  }
  // Rewritten with the two lines kept (well under 20 lines' worth).
  EXPECT_LT(Size(file), 600);
  EXPECT_EQ(store.LastSeq("job-1"), 20);
}

TEST_F(FileModesTest, CheckpointsArePrivate) {
  const std::string root = ::testing::TempDir() + "/modes-ckpt";
  const std::string dir = root + "/job-1/v00000010";
  PathRoots roots = PathRoots::Anywhere();
  SafetensorsFile file;
  HostTensor t;
  t.shape = Shape({2});
  t.data.assign(2 * sizeof(float), 0);
  file.tensors["layers.0.weight"] = t;
  auto written =
      WriteCheckpointFile(roots, dir, StageFileName(0, 0), file, 0, 0, 1);
  ASSERT_TRUE(written.ok()) << written.status();
  v1::CheckpointManifest m;
  m.set_dir(dir);
  m.set_version(10);
  m.set_num_layers(1);
  *m.add_files() = *written;
  ASSERT_TRUE(CommitManifest(roots, m).ok());
  EXPECT_EQ(Mode(root), "700");
  EXPECT_EQ(Mode(root + "/job-1"), "700");
  EXPECT_EQ(Mode(dir), "700");
  EXPECT_EQ(Mode(dir + "/" + StageFileName(0, 0)), "600");
  EXPECT_EQ(Mode(dir + "/manifest.json"), "600");
}

}  // namespace
}  // namespace aqueduct
