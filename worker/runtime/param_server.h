// The parameter server of a replicated stage (JobSpec.data_parallel.mode
// "parameter_server"; Li et al., OSDI 2014). The stage's elements (its
// flat layout, worker/runtime/data_parallel.h) are cut into shards; shard
// k lives on replica k mod d, which keeps its master weights and optimizer
// state. At every step each replica pushes its gradient of each shard and
// pulls the shard's weights back: over the communicator to a shard on
// another replica (a service thread per remote replica and shard answers),
// by a call to one on its own.
//
// Consistency:
//   sync     the shard sums the d gradients of a step in replica order
//            and steps once; every pull of step c returns version c + 1.
//   bounded  the same updates, but a pull after step c returns as soon as
//            steps up to c - S are applied (Ho et al.'s stale synchronous
//            parallel: the fastest replica runs at most S steps ahead of
//            the slowest); S = 0 is sync, bit for bit.
//   async    every push is an update of its own, applied on arrival; a
//            pull returns at once. A replica lost (its pushes stop) is
//            dropped and the others go on.
// The last step's pull waits for every replica's last push in every mode,
// so the replicas end with the same weights. Every applied gradient's
// staleness (updates applied between the version it was computed on and
// its own) is counted in a histogram.
//
// Thread-safety: ParameterShard is thread-safe (service threads and the
// stage loop call it).
#ifndef AQUEDUCT_WORKER_RUNTIME_PARAM_SERVER_H_
#define AQUEDUCT_WORKER_RUNTIME_PARAM_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/comm/communicator.h"
#include "common/device/device.h"
#include "worker/nn/model.h"
#include "worker/nn/optimizer.h"

namespace aqueduct {

enum class Consistency { kSync, kBounded, kAsync };

// "sync" or "", "bounded", "async" (validated at submit: pipeline/spec.cc).
Consistency ConsistencyOf(const std::string& name);

class ParameterShard {
 public:
  struct Config {
    int index = 0;     // Shard k of the stage.
    int replicas = 1;  // d.
    Consistency consistency = Consistency::kSync;
    int staleness = 0;  // Bounded only.
    // The steps (clocks) the job runs: [first_clock, last_clock).
    int64_t first_clock = 0, last_clock = 0;
  };
  // `device`: the shard's own (a CPU device: service threads use it while
  // the stage's thread uses the stage's, and a Device has one user at a
  // time), on which the tensors and the optimizer's state live.
  // `weights`: the shard's elements as one flat tensor, and `views` the
  // named views of it the optimizer steps (worker/runtime/data_parallel.h
  // FlatRangeViews); `grads` holds the summed gradient, with `grad_views`
  // its views.
  ParameterShard(Config config, std::unique_ptr<Device> device, Tensor weights,
                 ParameterSet views, Tensor grads, ParameterSet grad_views,
                 std::unique_ptr<Optimizer> optimizer);

  int64_t size() const { return weights_.numel(); }

  // Replica `replica`'s gradient of step `clock` (size() floats, host
  // memory), computed on weights of update `base` (0 <= base <= the
  // updates so far: INVALID_ARGUMENT otherwise).
  absl::Status Push(int replica, int64_t clock, int64_t base,
                    const float* grad);
  // After replica `replica`'s push of step `clock`: waits until the
  // consistency lets it go on, copies the weights into `out` (size()
  // floats) and returns the update they are at.
  absl::StatusOr<int64_t> Pull(int replica, int64_t clock, float* out,
                               absl::Time deadline);
  // Async: replica `replica` is lost; no wait counts on it any more.
  void Drop(int replica);
  // Sync and bounded: a replica is lost (its service thread failed with
  // `status`); every Push and Pull, waiting or to come, returns it, so that
  // this replica's stage fails now rather than at its deadline. The first
  // error stays.
  void Fail(const absl::Status& status);

  // Under the shard's lock: its weights and optimizer (checkpoints).
  absl::Status WithState(
      const std::function<absl::Status(const Tensor& weights,
                                       const Optimizer& optimizer)>& fn);
  // Copies `weights` (size() floats, host) in and sets the optimizer's
  // steps and the update count (restoring a checkpoint; the state is copied
  // by the caller through WithState's optimizer).
  absl::Status Load(const float* weights, int64_t steps);

  // counts[s]: gradients applied s updates stale.
  std::vector<int64_t> StalenessHistogram() const;
  int64_t updates() const;

 private:
  struct Pending {
    std::vector<std::vector<float>> grads;
    std::vector<int64_t> bases;
    int count = 0;
  };
  // Sync and bounded: applies the steps whose pushes are all in.
  absl::Status ApplyComplete() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One optimizer step on the gradient in grads_ (host `sum`).
  absl::Status Update(const float* sum) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Count(int64_t staleness) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MayGo(int replica, int64_t clock) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Config config_;
  const std::unique_ptr<Device> device_;  // Outlives the tensors below.
  const Tensor weights_, grads_;
  const ParameterSet views_, grad_views_;
  mutable absl::Mutex mu_;
  std::unique_ptr<Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  int64_t updates_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t applied_clock_ ABSL_GUARDED_BY(mu_);  // Sync, bounded.
  std::map<int64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> pushed_ ABSL_GUARDED_BY(mu_);  // Next clock, each.
  std::vector<bool> live_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> histogram_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// shard->Pull in slices of at most 100 ms, ending with CANCELLED once
// `stop` (may be null) is set.
absl::StatusOr<int64_t> PullUntil(ParameterShard& shard, int replica,
                                  int64_t clock, float* out,
                                  absl::Time deadline,
                                  const std::atomic<bool>* stop);

// Message tags of the parameter server (apart from frames' and groups').
uint64_t PushTag(int chunk, int shard, int64_t clock);
uint64_t PullTag(int chunk, int shard, int64_t clock);

// A push or pull on the wire: the clock, the update, the floats.
std::string EncodeShardMessage(int64_t clock, int64_t update, const float* data,
                               size_t n);
// INVALID_ARGUMENT naming what is wrong when the message is not of `clock`
// or not n floats.
absl::StatusOr<int64_t> DecodeShardMessage(const std::string& message,
                                           int64_t clock, float* data,
                                           size_t n);

// The service threads of the shards one replica hosts: one per (shard,
// remote replica), each answering that replica's push of every step with
// the pull. Joined by the destructor (which waits for them to finish the
// job, or for their deadlines after an abort).
class ShardService {
 public:
  struct Remote {
    int replica;
    int rank;
  };
  // `stop` (may be null): when set, a wait for a pull ends.
  ShardService(Communicator* comm, int chunk, absl::Duration timeout,
               const std::atomic<bool>* stop = nullptr);
  ~ShardService();
  ShardService(const ShardService&) = delete;
  ShardService& operator=(const ShardService&) = delete;

  // Starts answering `remote` for `shard` (index `k`) over the clocks
  // [first, last).
  void Serve(ParameterShard* shard, int k, Remote remote, int64_t first,
             int64_t last, bool drop_on_loss);
  // The first error of a service thread (OK so far otherwise).
  absl::Status status() const;
  // Waits for every service thread to end.
  void Join();

 private:
  absl::Status Answer(ParameterShard* shard, int k, Remote remote,
                      int64_t clock);

  Communicator* const comm_;
  const int chunk_;
  const absl::Duration timeout_;
  const std::atomic<bool>* const stop_;
  mutable absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_PARAM_SERVER_H_
