// Writes a stage's checkpoints off the stage loop's thread: the stage copies
// its training state to host memory at a checkpoint version (a quick copy on
// its own thread) and queues it here; a background thread writes the file
// durably (common/checkpoint.h WriteCheckpointFile: temporary file, fsync,
// rename, directory fsync) and hands its description to `on_written`,
// which the runtime reports to the coordinator, which commits the version
// once every stage's file is durable.
//
// A write that fails (a full disk, a directory that cannot be created) is
// logged and not reported: the coordinator never commits that version, and
// training goes on. When the disk is slower than the checkpoints come, a
// queue of `max_queued` snapshots fills and Enqueue waits for room.
//
// Thread-safety: thread-safe.
#ifndef AQUEDUCT_WORKER_RUNTIME_CHECKPOINT_WRITER_H_
#define AQUEDUCT_WORKER_RUNTIME_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_system.h"
#include "common/safetensors.h"
#include "proto/service_types.h"

namespace aqueduct {

struct CheckpointWriterOptions {
  // The checkpoint directory of the job spec; files go under
  // <dir>/<job_id>/v<version>/, which must lie under `roots` (the worker's
  // --checkpoint_root; a write outside fails, logged, and is not reported).
  std::string dir;
  PathRoots roots;
  std::string job_id;
  int stage = 0;
  int attempt = 0;
  // The stage's layers [layer_begin, layer_end).
  int layer_begin = 0;
  int layer_end = 0;
  // Snapshots waiting to be written at most; Enqueue waits for room up to
  // `queue_wait`.
  int max_queued = 2;
  absl::Duration queue_wait = absl::Seconds(60);
  // Called on the writer's thread for each file made durable.
  std::function<void(const CheckpointWritten&)> on_written;
};

class CheckpointWriter {
 public:
  explicit CheckpointWriter(CheckpointWriterOptions options);
  // Writes what is queued, then joins the thread.
  ~CheckpointWriter();

  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Queues the snapshot of version `version`. DEADLINE_EXCEEDED when the
  // queue stayed full for queue_wait (the snapshot is dropped).
  absl::Status Enqueue(int64_t version, SafetensorsFile snapshot);
  // Waits until every queued snapshot is written (or failed), up to
  // `timeout`; false if some are still queued.
  bool Drain(absl::Duration timeout);

  int64_t written() const;
  int64_t failed() const;

 private:
  struct Item {
    int64_t version = 0;
    SafetensorsFile snapshot;
  };
  void Loop();
  void Write(const Item& item);

  const CheckpointWriterOptions options_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // Writing an item taken.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_CHECKPOINT_WRITER_H_
