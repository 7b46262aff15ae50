#include "common/executor.h"

#include "absl/strings/str_cat.h"

namespace aqueduct {

BoundedExecutor::BoundedExecutor(std::string name, int threads,
                                 size_t max_queued)
    : name_(std::move(name)), max_queued_(max_queued) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { Loop(); });
  }
}

BoundedExecutor::~BoundedExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status BoundedExecutor::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::UnavailableError(absl::StrCat(name_, " is shutting down"));
  }
  if (queue_.size() >= max_queued_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name_, " is busy: ", queue_.size(), " tasks are waiting already"));
  }
  queue_.push_back(std::move(task));
  return absl::OkStatus();
}

size_t BoundedExecutor::pending() const {
  absl::MutexLock lock(&mu_);
  return queue_.size() + running_;
}

void BoundedExecutor::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // Stopping, and nothing left to run.
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    task();
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

}  // namespace aqueduct
