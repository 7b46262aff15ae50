// PipelineStage's data parallelism (pipeline_stage.h; JobSpec.data_parallel):
// bucketed all-reduce overlapped with the backward pass, ZeRO-1's sharded
// optimizer, and the parameter server.
#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/device/cpu_device.h"
#include "common/status.h"
#include "worker/nn/training_state.h"
#include "worker/runtime/pipeline_stage.h"

namespace aqueduct {

PipelineStage::~PipelineStage() {
  for (const auto& shard : shards_) {
    if (shard != nullptr) shard->Fail(absl::CancelledError("the stage ended"));
  }
  service_.reset();
}

absl::Status PipelineStage::CreateWholeOptimizer() {
  ASSIGN_OR_RETURN(optimizer_,
                   CreateOptimizer(spec_.optimizer(), latest_, device_,
                                   layout_.num_minibatches, &spec_.model()));
  return absl::OkStatus();
}

bool PipelineStage::NeedsWholeGradients() const {
  if (Degree() > 1 || spec_.optimizer().clip_grad_norm() > 0) return true;
  for (const auto& [owner, tied] : model_->ties()) {
    if (Holds(owner) || Holds(tied)) return true;
  }
  return false;
}

absl::Status PipelineStage::PrepareDataParallel() {
  const v1::DataParallelSpec& d = spec_.data_parallel();
  if (data_group_ == nullptr) {
    ASSIGN_OR_RETURN(grads_, ZerosLike(latest_, device_));
    return CreateWholeOptimizer();
  }
  flat_layout_ =
      MakeFlatLayout(latest_, BucketFloats(d.bucket_mb(), latest_.numel()));
  ASSIGN_OR_RETURN(grads_,
                   FlatZerosLike(latest_, flat_layout_, device_, &flat_grads_));
  if (d.mode() == "parameter_server") {
    dp_ = DataParallel::kParameterServer;
    return PrepareParameterServer();
  }
  dp_ = d.shard_optimizer() ? DataParallel::kZero : DataParallel::kAllReduce;
  overlap_ = device_->kind() == DeviceKind::kCpu && d.reduce() != "after";
  reducer_ = std::make_unique<BucketReducer>(data_group_.get(),
                                             options_.timeout, overlap_);
  if (dp_ == DataParallel::kAllReduce) return CreateWholeOptimizer();
  scatter_ = !NeedsWholeGradients();
  owned_ = flat_layout_.Owned(replica_, Replicas());
  const ParameterSet mine =
      RangeViews(latest_, flat_layout_, owned_, &view_starts_);
  ASSIGN_OR_RETURN(optimizer_,
                   CreateOptimizer(spec_.optimizer(), mine, device_,
                                   layout_.num_minibatches, &spec_.model()));
  return absl::OkStatus();
}

absl::Status PipelineStage::PrepareParameterServer() {
  const v1::DataParallelSpec& d = spec_.data_parallel();
  const int replicas = Replicas();
  const int shards = d.shards() > 0 ? d.shards() : replicas;
  RETURN_IF_ERROR(CheckTiesForShards());
  if (shards < replicas) {
    // Only the replicas that host shards gather them for checkpoints: a
    // replica that hosts none may be lost (async) without stopping them.
    RETURN_IF_ERROR(PrepareHostGroup(shards));
  }
  shards_.resize(shards);
  shard_starts_.resize(shards);
  shard_base_.assign(shards, 0);
  for (int k = 0; k < shards; ++k) {
    const ProcessGroup::Part part =
        ProcessGroup::PartOf(flat_layout_.total, shards, k);
    shard_range_.emplace_back(static_cast<int64_t>(part.begin),
                              static_cast<int64_t>(part.end));
    if (k % replicas == replica_) RETURN_IF_ERROR(MakeShard(k));
  }
  return absl::OkStatus();
}

// Shard k on a CPU device of its own (its service threads step it while
// this stage's thread uses device_), from this replica's weights.
absl::Status PipelineStage::MakeShard(int k) {
  const v1::DataParallelSpec& d = spec_.data_parallel();
  const auto [lo, hi] = shard_range_[k];
  auto device = std::make_unique<CpuDevice>(CpuDeviceOptions{1});
  ASSIGN_OR_RETURN(Tensor weights,
                   device->Allocate(Shape({hi - lo}), DType::kF32));
  ASSIGN_OR_RETURN(Tensor grads,
                   device->Allocate(Shape({hi - lo}), DType::kF32));
  RETURN_IF_ERROR(CopyRangeHost(device_, flat_layout_, latest_, lo, hi,
                                weights.f32(), /*to_host=*/true));
  ParameterSet views =
      FlatRangeViews(latest_, flat_layout_, lo, hi, weights, &shard_starts_[k]);
  ParameterSet grad_views =
      FlatRangeViews(latest_, flat_layout_, lo, hi, grads);
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   CreateOptimizer(spec_.optimizer(), views, device.get(),
                                   layout_.num_minibatches * UpdatesPerStep(),
                                   &spec_.model()));
  ParameterShard::Config config{k,
                                Replicas(),
                                ConsistencyOf(d.consistency()),
                                d.staleness(),
                                first_,
                                layout_.num_minibatches};
  shards_[k] = std::make_unique<ParameterShard>(
      config, std::move(device), std::move(weights), std::move(views),
      std::move(grads), std::move(grad_views), std::move(optimizer));
  return absl::OkStatus();
}

int PipelineStage::UpdatesPerStep() const {
  const bool async =
      ConsistencyOf(spec_.data_parallel().consistency()) == Consistency::kAsync;
  return async ? Replicas() : 1;
}

// A weight tied across stages (the gradients of both copies summed by the
// stages, replica r with replica r) under the parameter server: the
// replicas push their own shares, so each stage's replica r must pair with
// exactly one of the other's (equal degrees), and both stages' shards must
// apply the same updates in the same order (not async).
absl::Status PipelineStage::CheckTiesForShards() const {
  for (const auto& [owner, tied] : model_->ties()) {
    if (!Holds(owner) && !Holds(tied)) continue;
    const int other = StageOf(Holds(owner) ? tied : owner);
    if (other == stage_) continue;
    if (layout_.Replicas(other) != Replicas()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers[", tied, "].tie_weight_to=", owner,
          ": under data_parallel.mode \"parameter_server\" the tied layers' "
          "stages ",
          stage_, " and ", other, " need as many replicas (", Replicas(),
          " and ", layout_.Replicas(other), ")"));
    }
    if (UpdatesPerStep() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers[", tied, "].tie_weight_to=", owner,
          ": a weight tied across stages ", stage_, " and ", other,
          " cannot train under consistency \"async\" (each stage's shards "
          "would apply the pushes in their own order)"));
    }
  }
  return absl::OkStatus();
}

absl::Status PipelineStage::PrepareHostGroup(int hosts) {
  if (replica_ >= hosts) return absl::OkStatus();
  const int channel = kHostGroupChannel + ChunkOfStage(stage_);
  if (channel >= kMaxGroupChannels) {
    return absl::InvalidArgumentError(
        absl::StrCat(Who(), ": chunk ", ChunkOfStage(stage_),
                     " of a rank exceeds the parameter servers' channels"));
  }
  std::vector<int> ranks;
  for (int r = 0; r < hosts; ++r) ranks.push_back(ReplicaRank(r));
  ASSIGN_OR_RETURN(
      host_group_,
      ProcessGroup::Make(comm_, std::move(ranks), channel,
                         absl::StrCat("the shard hosts of stage ", stage_)));
  return absl::OkStatus();
}

absl::Status PipelineStage::StartShardService() {
  if (dp_ != DataParallel::kParameterServer) return absl::OkStatus();
  const bool async =
      ConsistencyOf(spec_.data_parallel().consistency()) == Consistency::kAsync;
  service_ = std::make_unique<ShardService>(comm_, ChunkOfStage(stage_),
                                            options_.timeout, options_.stop);
  for (size_t k = 0; k < shards_.size(); ++k) {
    if (shards_[k] == nullptr) continue;
    for (int r = 0; r < Replicas(); ++r) {
      if (r == replica_) continue;
      service_->Serve(shards_[k].get(), static_cast<int>(k),
                      {r, ReplicaRank(r)}, first_, layout_.num_minibatches,
                      async);
    }
  }
  return absl::OkStatus();
}

absl::Status PipelineStage::Restore(const SafetensorsFile& part) {
  std::unique_ptr<Optimizer> whole;
  Optimizer* into = optimizer_.get();
  if (Sharded()) {
    // The whole state, then this replica's part of it (any degree).
    ASSIGN_OR_RETURN(whole,
                     CreateOptimizer(spec_.optimizer(), latest_, device_,
                                     layout_.num_minibatches, &spec_.model()));
    into = whole.get();
  }
  RETURN_IF_ERROR(ImportTrainingState(part, *device_, latest_, into));
  // Checkpoints count steps in minibatches, whatever the mode.
  if (into->steps() != first_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint's optimizer made ", into->steps(),
                     " steps, but training resumes at minibatch ", first_));
  }
  if (dp_ == DataParallel::kZero) {
    RETURN_IF_ERROR(
        CopyStateFromWhole(*whole, view_starts_, *optimizer_, device_));
    optimizer_->SetSteps(whole->steps());
  }
  if (dp_ == DataParallel::kParameterServer) {
    for (size_t k = 0; k < shards_.size(); ++k) {
      RETURN_IF_ERROR(RestoreShard(k, *whole));
    }
  }
  return absl::OkStatus();
}

// Shard k (if hosted here) from the restored weights and `whole` state;
// every shard's base: the update the restored weights are at.
absl::Status PipelineStage::RestoreShard(size_t k, const Optimizer& whole) {
  const int64_t updates = whole.steps() * UpdatesPerStep();
  shard_base_[k] = updates;
  if (shards_[k] == nullptr) return absl::OkStatus();
  const auto [lo, hi] = shard_range_[k];
  std::vector<float> host(static_cast<size_t>(hi - lo));
  RETURN_IF_ERROR(CopyRangeHost(device_, flat_layout_, latest_, lo, hi,
                                host.data(), /*to_host=*/true));
  RETURN_IF_ERROR(shards_[k]->Load(host.data(), updates));
  return shards_[k]->WithState([&](const Tensor&, const Optimizer& optimizer) {
    return CopyStateFromWhole(whole, shard_starts_[k], optimizer, device_,
                              /*shard_on_host=*/true);
  });
}

void PipelineStage::CountShardStats() {
  stats_.staleness_histogram.clear();
  stats_.shard_updates = 0;
  for (const auto& shard : shards_) {
    if (shard == nullptr) continue;
    const std::vector<int64_t> h = shard->StalenessHistogram();
    auto& total = stats_.staleness_histogram;
    if (total.size() < h.size()) total.resize(h.size(), 0);
    for (size_t s = 0; s < h.size(); ++s) total[s] += h[s];
    stats_.shard_updates += shard->updates();
  }
}

int64_t PipelineStage::StateBytes() const {
  int64_t bytes = 0;
  auto add = [&](const Optimizer& optimizer) {
    for (const auto& [name, t] : optimizer.State()) {
      bytes += static_cast<int64_t>(t.nbytes());
    }
    return absl::OkStatus();
  };
  if (optimizer_ != nullptr) add(*optimizer_).IgnoreError();
  for (const auto& shard : shards_) {
    if (shard == nullptr) continue;
    shard->WithState([&](const Tensor&, const Optimizer& o) { return add(o); })
        .IgnoreError();
  }
  return bytes;
}

bool PipelineStage::LastGradientOp(int64_t m) const {
  auto it = gradient_ops_left_.find(m);
  return it != gradient_ops_left_.end() && it->second == 1;
}

void PipelineStage::LaunchBuckets(int lowest) {
  if (reducer_ == nullptr || !overlap_) return;
  const BucketReducer::Kind kind = scatter_
                                       ? BucketReducer::Kind::kReduceScatter
                                       : BucketReducer::Kind::kAllReduce;
  const auto& buckets = flat_layout_.buckets;
  while (launched_ < buckets.size() &&
         buckets[launched_].lowest_layer >= lowest) {
    const FlatLayout::Bucket& b = buckets[launched_++];
    reducer_->Launch(kind, flat_grads_.f32() + b.begin,
                     static_cast<size_t>(b.end - b.begin));
  }
}

void PipelineStage::GradientOpDone(int64_t m) {
  auto it = gradient_ops_left_.find(m);
  if (it == gradient_ops_left_.end() || --it->second > 0) return;
  gradient_ops_left_.erase(it);
  LaunchBuckets(INT_MIN);
}

// The replicas' collectives over the gradient buckets: those the backward
// pass did not start yet start now, and the op waits for all (the time it
// waits is the all-reduce's exposed time). Off the CPU, through a host
// copy.
absl::Status PipelineStage::AllReduce() {
  if (reducer_ == nullptr) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.timeout;
  if (!overlap_) {
    const BucketReducer::Kind kind = scatter_
                                         ? BucketReducer::Kind::kReduceScatter
                                         : BucketReducer::Kind::kAllReduce;
    return OnHost(device_, flat_grads_, [&](float* flat, size_t) {
      for (const FlatLayout::Bucket& b : flat_layout_.buckets) {
        reducer_->Launch(kind, flat + b.begin,
                         static_cast<size_t>(b.end - b.begin));
      }
      return reducer_->Wait(deadline);
    });
  }
  LaunchBuckets(INT_MIN);
  launched_ = 0;
  return reducer_->Wait(deadline);
}

absl::Status PipelineStage::Update(int64_t m, const ParameterSet& from,
                                   const ParameterSet& to) {
  switch (dp_) {
    case DataParallel::kZero:
      return StepSharded(from, to);
    case DataParallel::kParameterServer:
      RETURN_IF_ERROR(ExchangeWithShards(m));
      CopyRange(device_, flat_layout_, to, 0, flat_layout_.total, flat_grads_,
                false);
      CountShardStats();
      return absl::OkStatus();
    default:
      return optimizer_->StepFrom(from, to, grads_);
  }
}

// ZeRO-1: this replica's part steps; the replicas all-gather the weights
// bucket by bucket, through the gradients' buffer (spent by now).
absl::Status PipelineStage::StepSharded(const ParameterSet& from,
                                        const ParameterSet& to) {
  RETURN_IF_ERROR(
      optimizer_->StepFrom(RangeViews(from, flat_layout_, owned_),
                           RangeViews(to, flat_layout_, owned_),
                           RangeViews(grads_, flat_layout_, owned_)));
  for (const auto& [lo, hi] : owned_) {
    CopyRange(device_, flat_layout_, to, lo, hi, FlatSlice(flat_grads_, lo, hi),
              true);
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  RETURN_IF_ERROR(OnHost(device_, flat_grads_, [&](float* flat, size_t) {
    for (const FlatLayout::Bucket& b : flat_layout_.buckets) {
      RETURN_IF_ERROR(data_group_->AllGatherInPlace(
          flat + b.begin, static_cast<size_t>(b.end - b.begin), deadline));
    }
    return absl::OkStatus();
  }));
  CopyRange(device_, flat_layout_, to, 0, flat_layout_.total, flat_grads_,
            false);
  return absl::OkStatus();
}

// The parameter server's step: every shard's part of the gradient goes to
// its host and its weights come back into the gradients' buffer.
absl::Status PipelineStage::ExchangeWithShards(int64_t m) {
  if (service_ != nullptr) RETURN_IF_ERROR(service_->status());
  return OnHost(device_, flat_grads_,
                [&](float* flat, size_t) { return PushAndPull(m, flat); });
}

absl::Status PipelineStage::PushAndPull(int64_t m, float* flat) {
  const int chunk = ChunkOfStage(stage_);
  const absl::Time deadline = absl::Now() + options_.timeout;
  const size_t shards = shard_range_.size();
  std::vector<std::unique_ptr<Work>> sends;
  std::vector<std::unique_ptr<RecvWork>> recvs(shards);
  for (size_t k = 0; k < shards; ++k) {
    const auto [lo, hi] = shard_range_[k];
    const int host = static_cast<int>(k) % Replicas();
    if (host == replica_) {
      RETURN_IF_ERROR(shards_[k]->Push(replica_, m, shard_base_[k], flat + lo));
      continue;
    }
    const int rank = ReplicaRank(host);
    recvs[k] = comm_->Recv(rank, PullTag(chunk, static_cast<int>(k), m));
    sends.push_back(
        comm_->Send(rank, PushTag(chunk, static_cast<int>(k), m),
                    EncodeShardMessage(m, shard_base_[k], flat + lo,
                                       static_cast<size_t>(hi - lo))));
  }
  for (size_t k = 0; k < shards; ++k) {
    const auto [lo, hi] = shard_range_[k];
    if (recvs[k] == nullptr) {
      ASSIGN_OR_RETURN(shard_base_[k], PullLocal(k, m, flat + lo, deadline));
      continue;
    }
    ASSIGN_OR_RETURN(const std::string message, recvs[k]->Wait(deadline));
    ASSIGN_OR_RETURN(shard_base_[k],
                     DecodeShardMessage(message, m, flat + lo,
                                        static_cast<size_t>(hi - lo)));
  }
  for (auto& send : sends) RETURN_IF_ERROR(send->Wait(deadline));
  return absl::OkStatus();
}

// A pull from this replica's own shard: a stop ends it (a wait on a peer
// over the communicator ends when the communicator is aborted).
absl::StatusOr<int64_t> PipelineStage::PullLocal(size_t k, int64_t m,
                                                 float* out,
                                                 absl::Time deadline) {
  absl::StatusOr<int64_t> got =
      PullUntil(*shards_[k], replica_, m, out, deadline, options_.stop);
  if (got.ok()) return got;
  return Annotate(got.status(), Who());
}

// Every element has one owner (a ZeRO part, a hosted shard), which writes
// it into zero-filled whole tensors; a sum over the replicas then gives
// every replica the whole (x + 0 == x).
absl::StatusOr<std::unique_ptr<Optimizer>> PipelineStage::GatherWholeState(
    ParameterSet* params) {
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> whole,
                   CreateOptimizer(spec_.optimizer(), latest_, device_,
                                   layout_.num_minibatches, &spec_.model()));
  const bool server = dp_ == DataParallel::kParameterServer;
  if (server) {
    ASSIGN_OR_RETURN(*params, ZerosLike(latest_, device_));
    for (size_t k = 0; k < shards_.size(); ++k) {
      if (shards_[k] == nullptr) continue;
      const int64_t lo = shard_range_[k].first, hi = shard_range_[k].second;
      RETURN_IF_ERROR(shards_[k]->WithState([&](const Tensor& weights,
                                                const Optimizer& optimizer) {
        RETURN_IF_ERROR(CopyRangeHost(device_, flat_layout_, *params, lo, hi,
                                      weights.f32(), /*to_host=*/false));
        return CopyStateToWhole(optimizer, shard_starts_[k], *whole, device_,
                                /*shard_on_host=*/true);
      }));
    }
  } else {
    RETURN_IF_ERROR(
        CopyStateToWhole(*optimizer_, view_starts_, *whole, device_));
  }
  std::vector<Tensor> tensors;
  for (const auto& [name, t] : whole->State()) tensors.push_back(t);
  if (server) {
    tensors.insert(tensors.end(), params->tensors.begin(),
                   params->tensors.end());
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  for (const Tensor& t : tensors) {
    RETURN_IF_ERROR(OnHost(device_, t, [&](float* data, size_t n) {
      return StateGroup()->AllReduce(data, n, deadline);
    }));
  }
  // In minibatches, whatever the mode (an async shard's optimizer counts
  // a step a push): a checkpoint resumes in any mode.
  whole->SetSteps(version_);
  return whole;
}

}  // namespace aqueduct
