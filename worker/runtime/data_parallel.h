// Data parallelism's pieces for a replicated stage (JobSpec.data_parallel):
// the stage's gradients laid out flat in buckets (backward order, so a
// bucket's gradients are final together), a reducer that all-reduces or
// reduce-scatters the buckets on a thread of its own while the backward
// pass goes on (PyTorch DDP's overlap), and views of element ranges of a
// stage's tensors (ZeRO-1's and the parameter server's shards), with the
// copies between a sharded optimizer's state and a whole one (checkpoints
// stay whole).
//
// Thread-safety: BucketReducer's Launch and Wait are called from the stage
// loop's thread; its own thread runs the collectives. The rest are plain
// values and functions.
#ifndef AQUEDUCT_WORKER_RUNTIME_DATA_PARALLEL_H_
#define AQUEDUCT_WORKER_RUNTIME_DATA_PARALLEL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/comm/process_group.h"
#include "common/device/device.h"
#include "worker/nn/model.h"
#include "worker/nn/optimizer.h"

namespace aqueduct {

// Where each tensor of a stage's ParameterSet sits in one flat buffer, and
// the buckets: the tensors in reverse layer order (the order the backward
// pass finishes them), cut into buckets of whole layers of about
// `bucket_floats` each.
struct FlatLayout {
  struct Bucket {
    int64_t begin = 0, end = 0;  // Elements of the flat buffer.
    int lowest_layer = 0;        // Final once this layer's backward ran.
  };
  std::vector<int64_t> offset;  // Of tensor i, in elements.
  std::vector<Bucket> buckets;  // In backward order.
  int64_t total = 0;

  // The element ranges [begin, end) of the flat buffer that member `r` of
  // `d` owns: its part (ProcessGroup::PartOf) of every bucket.
  std::vector<std::pair<int64_t, int64_t>> Owned(int r, int d) const;
};

// The layout of `params` (layers [params.begin, params.end)), buckets of
// about `bucket_floats` (at least one layer each).
FlatLayout MakeFlatLayout(const ParameterSet& params, int64_t bucket_floats);

// Bucket size for JobSpec.data_parallel.bucket_mb (0: 25 MiB, or a quarter
// of `total_floats` when that is smaller), in floats.
int64_t BucketFloats(double bucket_mb, int64_t total_floats);

// A zero-filled set shaped like `like` whose tensors are views of one flat
// allocation laid out as `layout`; `*flat` receives the whole of it.
absl::StatusOr<ParameterSet> FlatZerosLike(const ParameterSet& like,
                                           const FlatLayout& layout,
                                           Device* device, Tensor* flat);

// One-dimensional views of the elements of `set`'s tensors that fall in
// `ranges` of the flat layout, named as the tensors, in tensor order (a
// tensor lies in one bucket, so it has at most one view per member's
// ranges). `starts`, when given, receives each view's first element within
// its tensor.
ParameterSet RangeViews(const ParameterSet& set, const FlatLayout& layout,
                        const std::vector<std::pair<int64_t, int64_t>>& ranges,
                        std::vector<int64_t>* starts = nullptr);

// Named one-dimensional views of `flat_range`, a tensor holding elements
// [lo, hi) of the flat layout of `like`: one per tensor of `like` that
// overlaps them, in tensor order; `starts` as RangeViews'. (A parameter
// shard's weights and gradients.)
ParameterSet FlatRangeViews(const ParameterSet& like, const FlatLayout& layout,
                            int64_t lo, int64_t hi, const Tensor& flat_range,
                            std::vector<int64_t>* starts = nullptr);

// Copies elements [lo, hi) of the flat layout between `set`'s tensors and
// `flat_range` (a tensor of hi - lo elements): into the flat range when
// `to_flat`, else out of it into the tensors.
void CopyRange(Device* device, const FlatLayout& layout,
               const ParameterSet& set, int64_t lo, int64_t hi,
               const Tensor& flat_range, bool to_flat);

// The same between `set`'s tensors (on `device`) and host memory `host`
// (hi - lo floats): into the host memory when `to_host`.
absl::Status CopyRangeHost(Device* device, const FlatLayout& layout,
                           const ParameterSet& set, int64_t lo, int64_t hi,
                           float* host, bool to_host);

// A view of elements [begin, end) of a flat tensor.
Tensor FlatSlice(const Tensor& flat, int64_t begin, int64_t end);

// Copies between a sharded optimizer's state (of the views RangeViews made,
// starting at `starts` within their tensors) and a whole optimizer's state
// (same names; "<param>.<state>") on `device`. To a whole optimizer: only
// the views' elements are written. `shard_on_host`: the sharded state is
// in host memory (a parameter shard's own CPU device), not on `device`.
absl::Status CopyStateToWhole(const Optimizer& shard,
                              const std::vector<int64_t>& starts,
                              const Optimizer& whole, Device* device,
                              bool shard_on_host = false);
absl::Status CopyStateFromWhole(const Optimizer& whole,
                                const std::vector<int64_t>& starts,
                                const Optimizer& shard, Device* device,
                                bool shard_on_host = false);

// Runs `fn` on the floats of `t` in host memory: in place on a device whose
// memory the host addresses (the CPU), else through a host copy written
// back after.
absl::Status OnHost(Device* device, const Tensor& t,
                    const std::function<absl::Status(float*, size_t)>& fn);

// The buckets' collectives in launch order: on a thread of its own
// (`threaded`), or on the caller's at Wait.
class BucketReducer {
 public:
  enum class Kind { kAllReduce, kReduceScatter };
  BucketReducer(ProcessGroup* group, absl::Duration timeout, bool threaded);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  // Queues a collective over data[0, n) (host memory that stays valid and
  // untouched by others until Wait returns).
  void Launch(Kind kind, float* data, size_t n);
  // Waits for every launched collective; the first error, if any (then the
  // rest are dropped).
  absl::Status Wait(absl::Time deadline);

 private:
  struct Job {
    Kind kind;
    float* data;
    size_t n;
  };
  void Loop();
  absl::Status Run(const Job& job);

  ProcessGroup* const group_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Threaded only.
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_DATA_PARALLEL_H_
