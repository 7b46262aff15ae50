#include "worker/runtime/checkpoint_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/logging.h"

namespace aqueduct {

CheckpointWriter::CheckpointWriter(CheckpointWriterOptions options)
    : options_(std::move(options)), thread_([this] { Loop(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::Status CheckpointWriter::Enqueue(int64_t version,
                                       SafetensorsFile snapshot) {
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(queue_.size()) < options_.max_queued;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&room), options_.queue_wait)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the checkpoint of version ", version, " was dropped: ", queue_.size(),
        " earlier ones were still being written after ",
        absl::FormatDuration(options_.queue_wait)));
  }
  queue_.push_back(Item{version, std::move(snapshot)});
  return absl::OkStatus();
}

bool CheckpointWriter::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() && !busy_;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

int64_t CheckpointWriter::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

int64_t CheckpointWriter::failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

void CheckpointWriter::Loop() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // Stopping, and everything is written.
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    Write(item);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

void CheckpointWriter::Write(const Item& item) {
  const std::string dir =
      CheckpointVersionDir(options_.dir, options_.job_id, item.version);
  absl::StatusOr<CheckpointFile> file = WriteCheckpointFile(
      options_.roots, dir, StageFileName(options_.stage, options_.attempt),
      item.snapshot, options_.stage, options_.layer_begin, options_.layer_end);
  if (!file.ok()) {
    AQ_LOG_WARN(
        "job {}: stage {}: the checkpoint of version {} was not "
        "written: {}",
        options_.job_id, options_.stage, item.version,
        file.status().ToString());
    absl::MutexLock lock(&mu_);
    ++failed_;
    return;
  }
  CheckpointWritten written;
  written.set_version(item.version);
  *written.mutable_file() = *std::move(file);
  written.set_dir(dir);
  if (options_.on_written) options_.on_written(written);
  absl::MutexLock lock(&mu_);
  ++written_;
}

}  // namespace aqueduct
