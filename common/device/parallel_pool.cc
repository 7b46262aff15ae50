#include "common/device/parallel_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace aqueduct {

namespace {

// How long an idle helper spins before it sleeps, and the caller before it
// yields its core while helpers finish.
constexpr std::chrono::microseconds kSpin{50};
constexpr std::chrono::microseconds kCallerSpin{20};

// Set while a thread runs a chunk: a Run() from there runs inline.
thread_local bool in_chunk = false;

inline void Pause() {
#if defined(__SSE2__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ParallelPool::ParallelPool(int threads) {
  for (int i = 1; i < threads; ++i) {
    helpers_.emplace_back([this] { HelperLoop(); });
  }
}

ParallelPool::~ParallelPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);  // seq_cst: against sleeping_
  }
  wake_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void ParallelPool::Drain() {
  in_chunk = true;
  for (int64_t c = next_.fetch_add(1, std::memory_order_relaxed); c < chunks_;
       c = next_.fetch_add(1, std::memory_order_relaxed)) {
    (*fn_)(c);
  }
  in_chunk = false;
}

void ParallelPool::HelperLoop() {
  uint64_t seen = 0;
  while (true) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    int spins = 0;
    while (generation_.load() == seen) {
      Pause();
      if (++spins % 64 == 0 && std::chrono::steady_clock::now() > until) {
        std::unique_lock<std::mutex> lock(mu_);
        sleeping_.fetch_add(1);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        sleeping_.fetch_sub(1);
      }
    }
    seen = generation_.load();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    Drain();
    busy_.fetch_sub(1, std::memory_order_release);
  }
}

void ParallelPool::Run(int64_t chunks, absl::FunctionRef<void(int64_t)> fn) {
  if (chunks <= 1 || helpers_.empty() || in_chunk) {
    for (int64_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  fn_ = &fn;
  chunks_ = chunks;
  next_.store(0, std::memory_order_relaxed);
  busy_.store(static_cast<int>(helpers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: against sleeping_
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);  // No helper misses the wake.
    wake_.notify_all();
  }
  Drain();
  // The helpers' last chunks (or their check-in): spin briefly, then yield
  // the core, in case a helper waits for it (more threads than cores).
  const auto until = std::chrono::steady_clock::now() + kCallerSpin;
  for (int spins = 0; busy_.load(std::memory_order_acquire) > 0; ++spins) {
    if (spins < 64 || std::chrono::steady_clock::now() < until) {
      Pause();
    } else {
      std::this_thread::yield();
    }
  }
  fn_ = nullptr;
}

void ParallelPool::For(int64_t n, int64_t grain, int64_t align,
                       absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  const int64_t by_grain =
      std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int64_t parts = std::min<int64_t>(threads(), by_grain);
  int64_t step = (n + parts - 1) / parts;
  step = (step + align - 1) / align * align;
  Run((n + step - 1) / step,
      [&](int64_t c) { fn(c * step, std::min(n, (c + 1) * step)); });
}

}  // namespace aqueduct
