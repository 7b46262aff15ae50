// One stage replica of a pipeline: runs its schedule (pipeline/
// schedule.h) over a Communicator, with weight stashing for the 1F1B
// policies, gradient accumulation over microbatches and an all-reduce among
// replicas for flush/GPipe. A rank that holds several stages (chunks:
// interleaved 1F1B, ZB-V) runs one PipelineStage per chunk under one list
// (RunRank): every op names its stage, and the rank carries the ops out in
// order, communication included: a send op sends what its F or B left, a
// receive op posts its receive (the executor posts them up to 8 ops early)
// and the F or B after it waits for it. Frames between two stages of one
// rank (ZB-V's turn) are handed over in memory.
//
// Messages between stages carry a checked header (kind, minibatch,
// microbatch, weight version, shape, label count): a mismatch fails the
// stage with a message naming what was expected and what arrived, rather
// than corrupting weights. Labels travel from the input stage to the output
// stage with the activations; the output stage computes the loss.
//
// Not thread-safe: Run() executes on the calling thread (the stage loop);
// the communicator carries transfers concurrently.
#ifndef AQUEDUCT_WORKER_RUNTIME_PIPELINE_STAGE_H_
#define AQUEDUCT_WORKER_RUNTIME_PIPELINE_STAGE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/comm/communicator.h"
#include "common/device/device.h"
#include "common/safetensors.h"
#include "pipeline/schedule.h"
#include "pipeline/weight_stash.h"
#include "proto/types.h"
#include "worker/data/dataset.h"
#include "worker/nn/loss.h"
#include "worker/nn/model.h"
#include "worker/nn/optimizer.h"
#include "worker/nn/tensor_parallel.h"
#include "worker/runtime/data_parallel.h"
#include "worker/runtime/frame.h"
#include "worker/runtime/layout.h"
#include "worker/runtime/param_server.h"

namespace aqueduct {

// What a stage tells its observer as it goes.
struct StageEvent {
  OpKind kind;
  int stage = 0;
  int64_t minibatch = 0;
  int microbatch = 0;
  int64_t version = 0;
  absl::Time start, end;
  // The part of [start, end) spent computing (waits on peers excluded).
  absl::Duration compute;
};

struct StageStats {
  int64_t committed_version = 0;
  int peak_stashed_versions = 0;  // Weight versions kept besides the newest.
  int peak_in_flight = 0;         // Microbatches with saved activations.
  int64_t stashed_weight_bytes_peak = 0;
  int64_t stashed_activation_bytes_peak = 0;
  // Bytes of optimizer state this rank keeps for the stage (its part under
  // ZeRO-1; its shards' under the parameter server).
  int64_t optimizer_state_bytes = 0;
  // Parameter server: counts[s] = gradients the shards this rank hosts
  // applied s updates stale (empty elsewhere), and their updates.
  std::vector<int64_t> staleness_histogram;
  int64_t shard_updates = 0;
};

class PipelineStage {
 public:
  struct Options {
    absl::Duration timeout = absl::Seconds(60);
    // Called after every op (on the stage loop's thread).
    std::function<void(const StageEvent&)> on_event;
    // Output stage: called with (minibatch, sum of losses, samples) after
    // each microbatch's loss.
    std::function<void(int64_t, double, int64_t)> on_loss;
    // When set and it becomes true, Run returns CANCELLED before the next
    // op. (A wait for a peer in progress ends when the communicator is
    // aborted: Communicator::Abort.)
    const std::atomic<bool>* stop = nullptr;
    // When set, tensors travel over these device channels (NCCL between
    // GPUs) and only frame headers over the communicator.
    DeviceChannels* channels = nullptr;
    // Activations and gradients travel as bfloat16 (a job's
    // precision.compute "bf16"; not over device channels, nor tied
    // weights' gradients, which stay fp32).
    bool bf16_frames = false;
    // Resume: the first minibatch to train (= the version of the weights
    // the stage starts from), and the checkpoint's training state for this
    // stage's layers (parameters, optimizer state and step count;
    // worker/nn/training_state.h). The pipeline restarts empty at
    // `first_minibatch`: minibatches that were in flight are replayed.
    int64_t first_minibatch = 0;
    const SafetensorsFile* restore = nullptr;
    // Checkpoints: after the step that makes the weights version v, for
    // every v that is a multiple of `checkpoint_every` (and short of the
    // last), called on the stage loop's thread with the new weights and the
    // optimizer. It should copy what it needs and return quickly (the
    // writing happens elsewhere); an error fails the stage.
    int64_t checkpoint_every = 0;
    std::function<absl::Status(int64_t version, const ParameterSet& params,
                               const Optimizer& optimizer)>
        on_checkpoint;
    // When set, also a checkpoint at the version it holds when the stage
    // reaches it (checkpoint.every_seconds: the coordinator's pick).
    const std::atomic<int64_t>* checkpoint_at = nullptr;
    // Periodic evaluation: after the step that makes version v, for every
    // v that is a multiple of `eval_every` short of the last, replica 0
    // calls `on_eval` with v and the new weights (worker/runtime/
    // evaluation.h's EvaluateAtVersion); an error fails the stage.
    int64_t eval_every = 0;
    std::function<absl::Status(int64_t version, const ParameterSet& params)>
        on_eval;
    // A tensor-parallel stage (layout.TensorDegree > 1): its replica's
    // tensor group, whose members run the same list in step; the model
    // must be built as this member's shard. Its checkpoints are gathered
    // into whole tensors over the group by every member of replica 0, and
    // member 0 hands the whole training state to `on_checkpoint_file`
    // (on_checkpoint is not called).
    ProcessGroup* tensor_group = nullptr;
    std::function<absl::Status(int64_t version, SafetensorsFile state)>
        on_checkpoint_file;
    // Tests and benchmarks of unequal workers: after every op that
    // computes, the stage sleeps (slowdown - 1) times the op's compute
    // time, so the stage runs `slowdown` times slower (1: no sleep).
    double slowdown = 1.0;
  };

  // `model` holds every layer; `params` the initial weights of this stage's
  // layers; `train` the training data (read by the input stage only).
  // `slot`: this worker's index among the stage's ranks (replica d, member
  // k of its tensor group: d * t + k).
  PipelineStage(const Model* model, const JobSpec& spec,
                const PipelineLayout& layout, int stage, int slot,
                Device* device, Communicator* comm, const Dataset* train,
                ParameterSet params, Options options);

  // Ends the parameter shards' service threads (a failed or stopped
  // stage's: their waits end now, or at their deadline on the
  // communicator).
  ~PipelineStage();

  // Runs this stage's own schedule (one stage on this rank).
  absl::Status Run();

  // Runs the stages of one rank (`chunks`, each built for its stage, all on
  // one communicator and device) under the rank's list (pipeline/
  // schedule.h BuildProgramSchedule). The stop flag is the first chunk's.
  static absl::Status RunRank(const std::vector<PipelineStage*>& chunks,
                              const std::vector<Op>& ops);

  int stage() const { return stage_; }
  const ParameterSet& params() const { return latest_; }
  // Statistics so far (safe to read from the stage loop's callbacks).
  const StageStats& stats() const { return stats_; }

 private:
  struct InFlight {
    int64_t version = 0;
    RangeCache cache;
    Tensor labels;   // Output stage: for the loss; others: to pass on.
    Tensor dlogits;  // Output stage.
    int64_t activation_bytes = 0;
    // Zero-bubble schedules: what the input gradient (I) left for the
    // weight gradient (W), once I ran.
    DeferredGrads deferred;
    bool input_done = false;
  };

  // What the stages of one rank hand each other without the transport.
  struct LocalFrames {
    // By (kind, sending stage, minibatch, microbatch).
    std::map<std::tuple<int, int, int64_t, int>, Frame> frames;
    std::map<uint64_t, std::string> tied;  // Tied gradients, by FrameTag.
  };
  // A frame made by F or B, waiting for its send op.
  struct Outgoing {
    FrameInfo info;
    Tensor data;
    Tensor labels;  // Activations only.
  };

  absl::Status Execute(const Op& op);
  // What F or B made for the next or previous stage: kept for its send op,
  // or handed over at once to a stage on this rank.
  absl::Status Made(FrameKind kind, int64_t m, int j, Outgoing out);
  absl::Status Send(FrameKind kind, int64_t m, int j);
  // The frame F or B needs: received (posted ahead) or handed over on this
  // rank.
  absl::StatusOr<Frame> Input(FrameKind kind, int64_t m, int j);
  // Tied weights: every stage of a rank posts its share before the first of
  // the rank's steps (PostTiedGradients), then each step adds what it
  // received (FinishTiedGradients).
  absl::Status PostTiedGradients(int64_t m);
  absl::Status FinishTiedGradients(int64_t m);
  // What a step does before the update: the sequence-parallel sums and the
  // tied gradients (once per minibatch; clipping runs it early).
  absl::Status FinishGradients(int64_t m);
  // Gradient-norm clipping (OptimizerSpec.clip_grad_norm) across the
  // pipeline, before the rank's first step of minibatch m
  // (pipeline_clip.cc): every stage's sum of squares (its tensor group's
  // members added) goes to every other stage's matching ranks, and every
  // stage scales its gradients by the same factor.
  static absl::Status ClipAcrossStages(
      const std::vector<PipelineStage*>& chunks, int64_t m);
  // This stage's sum of squares, over its tensor group.
  absl::StatusOr<double> StageSquares(absl::Time deadline);
  // The ranks of the other stages (not on this rank) that take this
  // stage's sum: those that read it as theirs (as tied gradients pair
  // replicas and members).
  std::vector<int> NormPeers(const std::vector<PipelineStage*>& chunks) const;
  absl::Status Finish();
  // Options::slowdown's sleep after an op that computed.
  void SlowDown();
  absl::Status Forward(int64_t m, int j);
  // The whole backward, or (split) its input half, I: the weight half, W,
  // is BackwardWeight's.
  absl::Status Backward(int64_t m, int j, bool split = false);
  absl::Status BackwardWeight(int64_t m, int j);
  absl::Status Step(int64_t m);
  // The update of minibatch m from `from` into `to` (which may be `from`):
  // the optimizer's step, ZeRO-1's sharded step and all-gather, or the
  // parameter server's push and pull.
  absl::Status Update(int64_t m, const ParameterSet& from,
                      const ParameterSet& to);
  absl::Status AllReduce();

  // Data parallelism (pipeline_data_parallel.cc): the gradients' flat
  // layout and buckets, the reducer, ZeRO-1's part, the parameter shards.
  enum class DataParallel { kNone, kAllReduce, kZero, kParameterServer };
  absl::Status PrepareDataParallel();
  absl::Status PrepareParameterServer();
  absl::Status MakeShard(int k);
  // Optimizer updates a shard applies a step: the replicas' pushes one by
  // one under async, else their sum once.
  int UpdatesPerStep() const;
  absl::Status CheckTiesForShards() const;
  // The group of the replicas that host the `hosts` shards (fewer shards
  // than replicas; channels from kHostGroupChannel on).
  absl::Status PrepareHostGroup(int hosts);
  static constexpr int kHostGroupChannel = 32;
  // The group that gathers sharded state for checkpoints: the shard hosts
  // (null on a replica that hosts none), else every replica.
  ProcessGroup* StateGroup() const {
    if (dp_ == DataParallel::kParameterServer && !shards_.empty() &&
        static_cast<int>(shards_.size()) < Replicas()) {
      return host_group_.get();
    }
    return data_group_.get();
  }
  absl::Status StartShardService();
  absl::Status CreateWholeOptimizer();
  // Restores a checkpoint's training state (whole tensors) into this
  // rank's weights and optimizer (sharded ones take their part).
  absl::Status Restore(const SafetensorsFile& part);
  absl::Status RestoreShard(size_t k, const Optimizer& whole);
  // Whether a gradient must be whole on every replica before the step
  // (clipping, tied weights, tensor-parallel sums): ZeRO-1 all-reduces
  // rather than reduce-scatters then.
  bool NeedsWholeGradients() const;
  // Queues the buckets whose lowest layer is at least `lowest` (all: any
  // layer below the stage), in bucket order, once per minibatch.
  void LaunchBuckets(int lowest);
  // After an op that wrote gradients of minibatch m: when it was the last,
  // the remaining buckets go.
  void GradientOpDone(int64_t m);
  bool LastGradientOp(int64_t m) const;
  absl::Status StepSharded(const ParameterSet& from, const ParameterSet& to);
  absl::Status ExchangeWithShards(int64_t m);
  absl::Status PushAndPull(int64_t m, float* flat);
  absl::StatusOr<int64_t> PullLocal(size_t k, int64_t m, float* out,
                                    absl::Time deadline);
  // A whole optimizer (and, for the parameter server, whole weights in
  // `*params`) gathered over the replicas for a checkpoint.
  absl::StatusOr<std::unique_ptr<Optimizer>> GatherWholeState(
      ParameterSet* params);
  int64_t StateBytes() const;
  // The hosted shards' staleness histogram and updates, into stats_.
  void CountShardStats();
  int Replicas() const { return layout_.Replicas(stage_); }
  bool Sharded() const {
    return dp_ == DataParallel::kZero || dp_ == DataParallel::kParameterServer;
  }
  int ReplicaRank(int replica) const {
    return layout_.RankAt(stage_, replica, member_);
  }
  // The output stage's loss: over this member's share of the vocabulary
  // when the model's head splits it.
  absl::StatusOr<LossOutput> Loss(const Tensor& logits, const Tensor& labels);
  // Tied weights (Model::ties): the gradients of both copies become their
  // sum, across stages (PostTiedGradients, FinishTiedGradients) or within
  // this one.

  // INVALID_ARGUMENT for a tie across stages under a schedule that does not
  // flush (the copies would step at different versions).
  absl::Status CheckTies() const;
  bool Holds(int layer) const;
  int StageOf(int layer) const;
  absl::StatusOr<const ParameterSet*> WeightsFor(int64_t version);
  // The weight versions of the minibatches in flight.
  std::vector<int64_t> InFlightVersions() const;
  void DropUnneededVersions();
  int64_t VersionFor(int64_t m) const;
  // Whether `version` must be kept (the stash rules, which count from the
  // first minibatch of this run).
  bool MustKeep(int64_t version) const;
  absl::Status BuildOps(std::vector<Op>* ops);
  absl::Status Prepare();
  // The tensor group's collectives for the layers (degree > 1); INTERNAL
  // when the model or the group is not this member's.
  absl::Status PrepareTensorGroup();
  // The replicas' group (pipeline/mesh.h's data-parallel group: this
  // member of each replica of the stage), on channel 1 + this stage's
  // chunk (the tensor groups' is 0). Replicas > 1 only.
  absl::Status PrepareDataGroup();
  // Whether the stage that holds `stage`'s replica for microbatch j is on
  // this rank.
  bool Local(int stage, int microbatch) const;
  // Which of its rank's chunks `stage` is (in frame tags).
  int ChunkOfStage(int stage) const;
  absl::Status Checkpoint();
  // Whether this version is checkpointed (the members of a tensor group
  // agree on the coordinator's pick).
  absl::StatusOr<bool> CheckpointNow();
  int MicroRows() const;
  // The rank of `stage` this one receives microbatch j's frames from (the
  // member of the other stage's tensor group that matches this one), and
  // the ranks it sends them to (every member of the other's group that
  // receives from this one).
  int PeerRank(int stage, int microbatch) const;
  std::vector<int> SendPeers(int stage, int microbatch) const;
  int Degree() const { return layout_.TensorDegree(stage_); }
  PassContext TrainingPass(int64_t m, int j) const;

  const Model* model_;
  const JobSpec spec_;
  const PipelineLayout layout_;
  const int stage_, replica_, member_;
  Device* device_;
  Communicator* comm_;
  const Dataset* train_;
  Options options_;
  const WeightStashRules stash_rules_;
  std::unique_ptr<EpochSampler> sampler_;
  BatchStaging staging_;  // Input batches on devices other than the CPU.

  ParameterSet latest_;
  ParameterSet grads_;
  std::unique_ptr<Optimizer> optimizer_;
  const int64_t first_;  // options_.first_minibatch.
  int64_t version_ = 0;  // Steps applied to latest_.
  // PipeMare's learning-rate rescheduling over this many steps (0: none).
  int64_t pipemare_warmup_ = 0;
  std::map<int64_t, ParameterSet> stash_;  // Older versions still needed.
  std::map<std::pair<int64_t, int>, InFlight> in_flight_;
  std::map<std::pair<int64_t, int>, int64_t> vertical_versions_;
  int64_t next_forward_ = 0;
  absl::Duration last_compute_;  // Of the op being executed.
  // Sends still in flight: a stage never waits for its send before moving
  // on (a peer may be sending to it at the same time); it waits for the
  // oldest when too many are pending, and for all at the end.
  std::deque<std::unique_ptr<Work>> pending_sends_;
  absl::Status PostSend(int peer, const FrameInfo& info, const Tensor& data,
                        const Tensor* labels);
  // Receives posted ahead of the op that needs them (a few ops ahead, in
  // schedule order), so a transfer lands in its tensor while the stage
  // computes.
  std::map<uint64_t, std::unique_ptr<PendingFrame>> posted_;
  // Posts the receive of a receive op (once; none for a frame from this
  // rank).
  absl::Status PostRecvFor(const Op& op);
  absl::StatusOr<std::unique_ptr<PendingFrame>> PostRecv(FrameKind kind,
                                                         int64_t m, int j);
  // The frame of (kind, m, j), posted ahead or now, waited for and checked.
  absl::StatusOr<Frame> TakeFrame(FrameKind kind, int64_t m, int j);
  std::string Who() const;
  LocalFrames own_local_;
  LocalFrames* local_ = &own_local_;
  std::map<std::pair<int, std::pair<int64_t, int>>, Outgoing> outgoing_;
  std::vector<std::unique_ptr<Work>> tied_sends_;
  bool accumulated_ = false;  // Gradients hold this minibatch's sum so far.
  int64_t finished_ = -1;     // The minibatch FinishGradients last ran for.
  std::unique_ptr<TensorParallelGroup> tensor_;  // Degree > 1 only.
  std::unique_ptr<ProcessGroup> data_group_;     // Replicas > 1 only.
  DataParallel dp_ = DataParallel::kNone;
  FlatLayout flat_layout_;  // Replicas > 1: grads_ are views of flat_grads_.
  Tensor flat_grads_;
  std::unique_ptr<BucketReducer> reducer_;
  bool overlap_ = false;  // Buckets reduced during the backward pass.
  bool scatter_ = false;  // ZeRO-1 reduce-scatters.
  size_t launched_ = 0;   // Buckets queued for this minibatch.
  // Ops still to write each minibatch's gradients (B, I, W).
  std::map<int64_t, int> gradient_ops_left_;
  // ZeRO-1: the elements this replica steps, and where its optimizer's
  // views start within their tensors.
  std::vector<std::pair<int64_t, int64_t>> owned_;
  std::vector<int64_t> view_starts_;
  // Parameter server: every shard's flat range; the shards this replica
  // hosts (null for the others), their views' starts; the update each
  // shard's weights here came from.
  std::vector<std::pair<int64_t, int64_t>> shard_range_;
  std::vector<std::unique_ptr<ParameterShard>> shards_;
  std::vector<std::vector<int64_t>> shard_starts_;
  std::vector<int64_t> shard_base_;
  std::unique_ptr<ShardService> service_;
  std::unique_ptr<ProcessGroup> host_group_;  // Shards < replicas only.
  StageStats stats_;
};

// Message tags.
uint64_t ActivationTag(int64_t minibatch, int microbatch);
uint64_t GradientTag(int64_t minibatch, int microbatch);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_PIPELINE_STAGE_H_
