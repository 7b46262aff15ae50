#include "worker/runtime/checkpoint_writer.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::filesystem::remove_all(path);
  return path;
}

SafetensorsFile Snapshot(float value) {
  SafetensorsFile file;
  HostTensor t;
  t.shape = Shape({2});
  t.data.resize(2 * sizeof(float));
  std::memcpy(t.data.data(), &value, sizeof(float));
  file.tensors["layers.1.weight"] = t;
  file.metadata["optimizer_steps"] = "4";
  return file;
}

struct Written {
  absl::Mutex mu;
  std::vector<CheckpointWritten> files ABSL_GUARDED_BY(mu);
};

// The test's temporary directory: the worker's --checkpoint_root.
PathRoots Roots() {
  const char* dir = std::getenv("TEST_TMPDIR");
  auto roots =
      PathRoots::Make("--checkpoint_root", {dir != nullptr ? dir : "/tmp"});
  EXPECT_TRUE(roots.ok()) << roots.status();
  return roots.ok() ? *roots : PathRoots();
}

CheckpointWriterOptions Options(const std::string& dir, Written* out) {
  CheckpointWriterOptions o;
  o.dir = dir;
  o.roots = Roots();
  o.job_id = "job-1";
  o.stage = 1;
  o.attempt = 2;
  o.layer_begin = 1;
  o.layer_end = 3;
  o.on_written = [out](const CheckpointWritten& w) {
    absl::MutexLock lock(&out->mu);
    out->files.push_back(w);
  };
  return o;
}

TEST(CheckpointWriterTest, WritesDurableFilesAndReportsThem) {
  const std::string dir = TempDir("writer");
  Written out;
  CheckpointWriter writer(Options(dir, &out));
  ASSERT_TRUE(writer.Enqueue(4, Snapshot(1.5f)).ok());
  ASSERT_TRUE(writer.Enqueue(8, Snapshot(2.5f)).ok());
  ASSERT_TRUE(writer.Drain(absl::Seconds(10)));
  EXPECT_EQ(writer.written(), 2);
  absl::MutexLock lock(&out.mu);
  ASSERT_EQ(out.files.size(), 2u);
  const CheckpointWritten& w = out.files[1];
  EXPECT_EQ(w.version(), 8);
  EXPECT_EQ(w.dir(), CheckpointVersionDir(dir, "job-1", 8));
  EXPECT_EQ(w.file().name(), "stage-1-a2.safetensors");
  EXPECT_EQ(w.file().layer_begin(), 1);
  EXPECT_EQ(w.file().layer_end(), 3);
  const std::string path = w.dir() + "/" + w.file().name();
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path)),
            w.file().bytes());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  EXPECT_EQ(Crc32(bytes), w.file().crc32());
}

TEST(CheckpointWriterTest, AFailedWriteIsNotReportedAndTrainingGoesOn) {
  // The checkpoint directory is a file: no version directory can be made.
  const std::string dir = TempDir("writer-blocked");
  std::ofstream(dir) << "not a directory";
  Written out;
  CheckpointWriter writer(Options(dir, &out));
  ASSERT_TRUE(writer.Enqueue(4, Snapshot(1.0f)).ok());
  ASSERT_TRUE(writer.Drain(absl::Seconds(10)));
  EXPECT_EQ(writer.failed(), 1);
  EXPECT_EQ(writer.written(), 0);
  absl::MutexLock lock(&out.mu);
  EXPECT_TRUE(out.files.empty());
}

TEST(CheckpointWriterTest, NothingIsWrittenOutsideTheRoot) {
  const std::string dir = TempDir("writer-outside");
  Written out;
  CheckpointWriterOptions o = Options(dir, &out);
  o.roots = PathRoots();  // No --checkpoint_root.
  o.job_id = "../../escape";
  CheckpointWriter writer(o);
  ASSERT_TRUE(writer.Enqueue(4, Snapshot(1.0f)).ok());
  ASSERT_TRUE(writer.Drain(absl::Seconds(10)));
  EXPECT_EQ(writer.failed(), 1);
  EXPECT_FALSE(std::filesystem::exists(dir));
  absl::MutexLock lock(&out.mu);
  EXPECT_TRUE(out.files.empty());
}

TEST(CheckpointWriterTest, AFullQueueDropsTheSnapshotAfterItsWait) {
  const std::string dir = TempDir("writer-slow");
  Written out;
  CheckpointWriterOptions o = Options(dir, &out);
  o.max_queued = 1;
  o.queue_wait = absl::Milliseconds(1);
  absl::Notification release;
  o.on_written = [&release](const CheckpointWritten&) {
    release.WaitForNotificationWithTimeout(absl::Seconds(10));
  };
  CheckpointWriter writer(o);
  ASSERT_TRUE(writer.Enqueue(1, Snapshot(1.0f)).ok());  // Being written.
  // The writer holds the first; the second waits in the queue...
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::Status second = writer.Enqueue(2, Snapshot(2.0f));
  while (!second.ok() && absl::Now() < deadline) {
    second = writer.Enqueue(2, Snapshot(2.0f));
  }
  ASSERT_TRUE(second.ok());
  // ...and a third finds no room.
  const absl::Status third = writer.Enqueue(3, Snapshot(3.0f));
  EXPECT_EQ(third.code(), absl::StatusCode::kDeadlineExceeded);
  release.Notify();
  EXPECT_TRUE(writer.Drain(absl::Seconds(10)));
}

}  // namespace
}  // namespace aqueduct
