// ParallelPool: a fixed team of threads that runs the chunks of one kernel
// at a time, the calling thread among them. CpuDevice drives every kernel's
// threads through it (OpenBLAS then runs single-threaded inside a chunk),
// so the process has one pool of compute threads, not OpenBLAS's and its
// own yielding against each other on the same cores.
//
// A helper waits for work spinning for at most kSpin (a kernel follows
// another within microseconds in a training step), then sleeps on a
// condition variable: no thread spins while the process is idle or busy
// elsewhere (a pipeline's other workers on the same cores). The caller
// waits for the helpers' check-in after its own chunks, spinning 20 us,
// then yielding its core; with more compute threads than cores (several
// workers of several threads on one host) that wait follows the
// scheduler: give each worker --threads so that they add up to the cores.
//
// Thread-safety: Run() is called by one thread at a time (the device's
// owner); a Run() from inside a chunk runs inline.
#ifndef AQUEDUCT_COMMON_DEVICE_PARALLEL_POOL_H_
#define AQUEDUCT_COMMON_DEVICE_PARALLEL_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace aqueduct {

class ParallelPool {
 public:
  // `threads` >= 1 compute threads in all: threads - 1 helpers and the
  // caller of Run().
  explicit ParallelPool(int threads);
  ~ParallelPool();
  ParallelPool(const ParallelPool&) = delete;
  ParallelPool& operator=(const ParallelPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // fn(c) for every c in [0, chunks), each exactly once, on any of the
  // threads; returns when all have returned. Inline when there is one
  // chunk or one thread, or when called from a chunk.
  void Run(int64_t chunks, absl::FunctionRef<void(int64_t)> fn);

  // fn(begin, end) over [0, n) in about equal ranges, one per thread, each
  // at least `grain` long (a multiple of `align` but for the last).
  void For(int64_t n, int64_t grain, int64_t align,
           absl::FunctionRef<void(int64_t, int64_t)> fn);

 private:
  void HelperLoop();
  // Runs chunks until none is left.
  void Drain();

  std::vector<std::thread> helpers_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // under mu_
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<int> busy_{0};  // helpers not done with this run
  std::atomic<int64_t> next_{0};
  int64_t chunks_ = 0;
  const absl::FunctionRef<void(int64_t)>* fn_ = nullptr;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_PARALLEL_POOL_H_
