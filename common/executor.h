// BoundedExecutor: a fixed pool of threads running queued tasks, with a
// bound on the queue so that no caller can make it grow without limit. It
// owns its threads: the destructor stops taking tasks, runs the ones
// queued and joins every thread (no detached threads).
//
// Thread-safe.
#ifndef AQUEDUCT_COMMON_EXECUTOR_H_
#define AQUEDUCT_COMMON_EXECUTOR_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace aqueduct {

class BoundedExecutor {
 public:
  // `threads` >= 1 workers; at most `max_queued` tasks waiting. `name`
  // appears in errors.
  BoundedExecutor(std::string name, int threads, size_t max_queued);
  ~BoundedExecutor();  // Runs what is queued, then joins.

  BoundedExecutor(const BoundedExecutor&) = delete;
  BoundedExecutor& operator=(const BoundedExecutor&) = delete;

  // Queues `task`. RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE
  // once shutting down; the task is then not run.
  absl::Status Submit(std::function<void()> task);

  // Tasks queued or running.
  size_t pending() const;

 private:
  void Loop();

  const std::string name_;
  const size_t max_queued_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_EXECUTOR_H_
