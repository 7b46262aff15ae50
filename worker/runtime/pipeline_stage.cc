#include "worker/runtime/pipeline_stage.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "pipeline/failure.h"
#include "pipeline/policy.h"
#include "worker/nn/loss.h"
#include "worker/nn/training_state.h"

namespace aqueduct {

namespace {

// A set shaped like `like` in new buffers (contents undefined).
absl::StatusOr<ParameterSet> Uninitialised(Device* device,
                                           const ParameterSet& like) {
  ParameterSet out = like;
  for (size_t i = 0; i < out.tensors.size(); ++i) {
    ASSIGN_OR_RETURN(out.tensors[i], device->Allocate(like.tensors[i].shape(),
                                                      like.tensors[i].dtype()));
  }
  return out;
}

int64_t CacheBytes(const RangeCache& cache) {
  int64_t bytes = 0;
  for (const LayerCache& l : cache.layers) {
    for (const Tensor& t : l.tensors) {
      if (t.defined()) bytes += static_cast<int64_t>(t.nbytes());
    }
  }
  return bytes;
}

// What a split backward's W still holds (a buffer shared by two entries,
// such as one linear's dy that is another's, counts twice).
int64_t DeferredBytes(const DeferredGrads& deferred) {
  int64_t bytes = 0;
  for (const DeferredLinearGrad& g : deferred.linears) {
    bytes += static_cast<int64_t>(g.x.nbytes() + g.dy.nbytes());
  }
  return bytes;
}

}  // namespace

uint64_t ActivationTag(int64_t minibatch, int microbatch) {
  return FrameTag(FrameKind::kActivation, minibatch, microbatch);
}

uint64_t GradientTag(int64_t minibatch, int microbatch) {
  return FrameTag(FrameKind::kGradient, minibatch, microbatch);
}

PipelineStage::PipelineStage(const Model* model, const JobSpec& spec,
                             const PipelineLayout& layout, int stage, int slot,
                             Device* device, Communicator* comm,
                             const Dataset* train, ParameterSet params,
                             Options options)
    : model_(model),
      spec_(spec),
      layout_(layout),
      stage_(stage),
      replica_(slot / layout.TensorDegree(stage)),
      member_(slot % layout.TensorDegree(stage)),
      device_(device),
      comm_(comm),
      train_(train),
      options_(std::move(options)),
      stash_rules_(layout.policy, stage, layout.num_stages(),
                   layout.warmup_depth[stage], layout.warmup_depth[0],
                   layout.num_minibatches - options_.first_minibatch),
      latest_(std::move(params)),
      first_(options_.first_minibatch),
      version_(first_) {}

int PipelineStage::MicroRows() const {
  return static_cast<int>(spec_.batch_size() / layout_.microbatches);
}

int PipelineStage::PeerRank(int stage, int microbatch) const {
  const int d = ReplicaFor(microbatch, layout_.Replicas(stage));
  return layout_.RankAt(stage, d, member_ % layout_.TensorDegree(stage));
}

// Member k' of the other stage's group receives from member k' % t here.
std::vector<int> PipelineStage::SendPeers(int stage, int microbatch) const {
  const int d = ReplicaFor(microbatch, layout_.Replicas(stage));
  std::vector<int> peers;
  for (int k = member_; k < layout_.TensorDegree(stage); k += Degree()) {
    peers.push_back(layout_.RankAt(stage, d, k));
  }
  return peers;
}

PassContext PipelineStage::TrainingPass(int64_t m, int j) const {
  PassContext ctx;
  ctx.training = true;
  ctx.minibatch = static_cast<uint64_t>(m);
  ctx.sample_offset = static_cast<uint64_t>(j) * MicroRows();
  ctx.tensor = tensor_.get();
  ctx.recompute = layout_.RecomputeOf(stage_);
  return ctx;
}

// The stash rules count minibatches and versions from the start of this run
// (first_); the stage works in the job's minibatches and versions.
int64_t PipelineStage::VersionFor(int64_t m) const {
  return first_ + stash_rules_.VersionFor(m - first_);
}

bool PipelineStage::MustKeep(int64_t version) const {
  std::vector<int64_t> in_flight = InFlightVersions();
  for (int64_t& v : in_flight) v -= first_;
  return stash_rules_.MustKeep(version - first_, next_forward_ - first_,
                               in_flight);
}

std::vector<int64_t> PipelineStage::InFlightVersions() const {
  std::vector<int64_t> versions;
  versions.reserve(in_flight_.size());
  for (const auto& [key, f] : in_flight_) versions.push_back(f.version);
  return versions;
}

absl::Status PipelineStage::BuildOps(std::vector<Op>* ops) {
  ScheduleConfig config;
  config.policy = layout_.policy;
  config.stage = stage_;
  config.num_stages = layout_.num_stages();
  config.replica = replica_;
  config.replicas = layout_.Replicas(stage_);
  config.warmup_depth = layout_.warmup_depth[stage_];
  config.num_minibatches = layout_.num_minibatches - first_;
  config.microbatches = layout_.microbatches;
  ASSIGN_OR_RETURN(*ops, BuildSchedule(config));
  for (Op& op : *ops) op.minibatch += first_;
  return absl::OkStatus();
}

absl::Status PipelineStage::PrepareTensorGroup() {
  const TensorShard& shard = model_->shard();
  if (shard.degree != Degree() || shard.rank != member_) {
    return absl::InternalError(
        absl::StrCat(Who(), " is member ", member_, " of a tensor group of ",
                     Degree(), " but its model was built as member ",
                     shard.rank, " of ", shard.degree));
  }
  if (Degree() == 1) return absl::OkStatus();
  ProcessGroup* group = options_.tensor_group;
  if (group == nullptr || group->size() != Degree() ||
      group->rank() != member_) {
    return absl::InternalError(absl::StrCat(
        Who(), " is member ", member_, " of a tensor group of ", Degree(),
        " but was given ",
        group == nullptr
            ? std::string("no group")
            : absl::StrCat("member ", group->rank(), " of ", group->size())));
  }
  tensor_ =
      std::make_unique<ProcessGroupTensorParallel>(group, options_.timeout);
  return absl::OkStatus();
}

absl::Status PipelineStage::PrepareDataGroup() {
  if (layout_.Replicas(stage_) == 1) return absl::OkStatus();
  const int channel = 1 + ChunkOfStage(stage_);
  if (channel >= kHostGroupChannel) {
    return absl::InvalidArgumentError(
        absl::StrCat(Who(), ": chunk ", channel - 1, " of a rank exceeds the ",
                     kHostGroupChannel - 1, " data-parallel channels"));
  }
  ASSIGN_OR_RETURN(
      data_group_,
      ProcessGroup::Make(
          comm_, layout_.DataGroup(stage_, member_), channel,
          absl::StrCat("the replicas of stage ", stage_,
                       Degree() > 1 ? absl::StrCat(" member ", member_)
                                    : std::string())));
  return absl::OkStatus();
}

absl::Status PipelineStage::Prepare() {
  if (first_ < 0 || first_ > layout_.num_minibatches) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resume at minibatch ", first_, " of a job of ",
                     layout_.num_minibatches));
  }
  next_forward_ = first_;
  if (spec_.batch_size() % layout_.microbatches != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size=", spec_.batch_size(), " is not divisible into ",
        layout_.microbatches, " microbatches"));
  }
  ASSIGN_OR_RETURN(const PipelinePolicy policy, ResolvePipeline(spec_));
  pipemare_warmup_ = policy.pipemare_warmup_steps;
  RETURN_IF_ERROR(CheckTies());
  RETURN_IF_ERROR(PrepareTensorGroup());
  RETURN_IF_ERROR(PrepareDataGroup());
  if (stage_ == 0) {
    if (train_ == nullptr) {
      return absl::FailedPreconditionError("the input stage has no data");
    }
    const bool shuffle = !spec_.data().has_shuffle() || spec_.data().shuffle();
    sampler_ = std::make_unique<EpochSampler>(
        EpochSampler::For(*train_, spec_.batch_size(), shuffle, spec_.seed()));
  }
  RETURN_IF_ERROR(PrepareDataParallel());
  if (options_.restore != nullptr) {
    // Checkpoints hold whole tensors: this member takes its part.
    ASSIGN_OR_RETURN(const SafetensorsFile part,
                     ShardFile(*options_.restore, *model_, model_->shard()));
    RETURN_IF_ERROR(Annotate(Restore(part), "restoring the checkpoint"));
  }
  stats_.optimizer_state_bytes = StateBytes();
  return StartShardService();
}

absl::Status PipelineStage::Run() {
  if (layout_.chunks > 1 || layout_.program != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        ScheduleName(layout_.policy), " runs a rank's program: use RunRank"));
  }
  std::vector<Op> ops;
  RETURN_IF_ERROR(BuildOps(&ops));
  return RunRank({this}, ops);
}

namespace {

// The chunk of `chunks` that holds `stage`, or null.
PipelineStage* ChunkOf(const std::vector<PipelineStage*>& chunks, int stage) {
  for (PipelineStage* c : chunks) {
    if (c->stage() == stage) return c;
  }
  return nullptr;
}

}  // namespace

absl::Status PipelineStage::RunRank(const std::vector<PipelineStage*>& chunks,
                                    const std::vector<Op>& ops) {
  if (chunks.empty()) return absl::InvalidArgumentError("a rank of no stages");
  for (PipelineStage* c : chunks) {
    c->local_ = &chunks[0]->own_local_;
    RETURN_IF_ERROR(c->Prepare());
  }
  for (const Op& op : ops) {
    if (op.kind == OpKind::kBackward || op.kind == OpKind::kBackwardInput ||
        op.kind == OpKind::kBackwardWeight) {
      PipelineStage* c = ChunkOf(chunks, op.stage);
      if (c != nullptr) ++c->gradient_ops_left_[op.minibatch];
    }
  }
  const std::atomic<bool>* stop = chunks[0]->options_.stop;
  constexpr size_t kWindow = 8;  // Receives are posted this many ops ahead.
  size_t posted_until = 0;
  int64_t tied_posted = -1;
  for (size_t index = 0; index < ops.size(); ++index) {
    const Op& op = ops[index];
    PipelineStage* chunk = ChunkOf(chunks, op.stage);
    if (chunk == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the schedule gives ", chunks[0]->Who(), " an op of stage ", op.stage,
          ", which this rank does not hold"));
    }
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(absl::StrCat(
          chunk->Who(), " stopped before minibatch ", op.minibatch));
    }
    for (; posted_until < std::min(ops.size(), index + kWindow);
         ++posted_until) {
      PipelineStage* to = ChunkOf(chunks, ops[posted_until].stage);
      if (to != nullptr) RETURN_IF_ERROR(to->PostRecvFor(ops[posted_until]));
    }
    const absl::Time start = absl::Now();
    chunk->last_compute_ = absl::ZeroDuration();
    if (op.kind == OpKind::kOptimizerStep && tied_posted != op.minibatch) {
      for (PipelineStage* c : chunks) {
        RETURN_IF_ERROR(c->PostTiedGradients(op.minibatch));
      }
      RETURN_IF_ERROR(ClipAcrossStages(chunks, op.minibatch));
      tied_posted = op.minibatch;
    }
    RETURN_IF_ERROR(chunk->Execute(op));
    chunk->SlowDown();
    const absl::Time end = absl::Now();
    if (op.kind == OpKind::kOptimizerStep) chunk->last_compute_ = end - start;
    if (chunk->options_.on_event) {
      chunk->options_.on_event({op.kind, op.stage, op.minibatch, op.microbatch,
                                chunk->version_, start, end,
                                chunk->last_compute_});
    }
  }
  for (PipelineStage* c : chunks) RETURN_IF_ERROR(c->Finish());
  return absl::OkStatus();
}

void PipelineStage::SlowDown() {
  if (options_.slowdown <= 1.0 || last_compute_ <= absl::ZeroDuration()) {
    return;
  }
  const absl::Duration extra = (options_.slowdown - 1.0) * last_compute_;
  absl::SleepFor(extra);
  last_compute_ += extra;
}

absl::Status PipelineStage::Finish() {
  stats_.committed_version = version_;
  if (service_ != nullptr) {
    service_->Join();
    RETURN_IF_ERROR(service_->status());
  }
  CountShardStats();
  while (!pending_sends_.empty()) {
    RETURN_IF_ERROR(
        pending_sends_.front()->Wait(absl::Now() + options_.timeout));
    pending_sends_.pop_front();
  }
  return device_->Synchronize();
}

int PipelineStage::ChunkOfStage(int stage) const {
  return stage / layout_.ChunkLayout().ranks;
}

bool PipelineStage::Local(int stage, int microbatch) const {
  return PeerRank(stage, microbatch) == comm_->rank();
}

absl::Status PipelineStage::PostRecvFor(const Op& op) {
  FrameKind kind;
  int from;
  if (op.kind == OpKind::kRecvActivation) {
    kind = FrameKind::kActivation;
    from = stage_ - 1;
  } else if (op.kind == OpKind::kRecvGradient) {
    kind = FrameKind::kGradient;
    from = stage_ + 1;
  } else {
    return absl::OkStatus();
  }
  if (from < 0 || from >= layout_.num_stages() || Local(from, op.microbatch)) {
    return absl::OkStatus();
  }
  const uint64_t tag =
      FrameTag(kind, op.minibatch, op.microbatch, ChunkOfStage(from));
  if (posted_.count(tag) > 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(posted_[tag], PostRecv(kind, op.minibatch, op.microbatch));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PendingFrame>> PipelineStage::PostRecv(
    FrameKind kind, int64_t m, int j) {
  const int rows = MicroRows();
  if (kind == FrameKind::kActivation) {
    const int begin = layout_.layer_begin[stage_];
    return PendingFrame::Post(
        *comm_, *device_, PeerRank(stage_ - 1, j), kind, m, j,
        model_->layer(begin).input_shape().WithLeading(rows),
        LabelShape(*model_, rows).numel(), options_.channels, stage_ - 1,
        ChunkOfStage(stage_ - 1), options_.bf16_frames);
  }
  const int end = layout_.layer_begin[stage_ + 1];
  return PendingFrame::Post(
      *comm_, *device_, PeerRank(stage_ + 1, j), kind, m, j,
      model_->layer(end - 1).output_shape().WithLeading(rows), 0,
      options_.channels, stage_ + 1, ChunkOfStage(stage_ + 1),
      options_.bf16_frames);
}

absl::StatusOr<Frame> PipelineStage::TakeFrame(FrameKind kind, int64_t m,
                                               int j) {
  const int from = kind == FrameKind::kActivation ? stage_ - 1 : stage_ + 1;
  const uint64_t tag = FrameTag(kind, m, j, ChunkOfStage(from));
  std::unique_ptr<PendingFrame> pending;
  auto it = posted_.find(tag);
  if (it != posted_.end()) {
    pending = std::move(it->second);
    posted_.erase(it);
  } else {
    ASSIGN_OR_RETURN(pending, PostRecv(kind, m, j));
  }
  return pending->Wait(absl::Now() + options_.timeout, Who());
}

absl::StatusOr<Frame> PipelineStage::Input(FrameKind kind, int64_t m, int j) {
  const int from = kind == FrameKind::kActivation ? stage_ - 1 : stage_ + 1;
  if (!Local(from, j)) return TakeFrame(kind, m, j);
  auto it = local_->frames.find({static_cast<int>(kind), from, m, j});
  if (it == local_->frames.end()) {
    return absl::InternalError(absl::StrCat(
        Who(), ": the ",
        kind == FrameKind::kActivation ? "activation" : "gradient",
        " of minibatch ", m, " microbatch ", j, " from stage ", from,
        " on this rank is not there: the schedule runs this stage's ",
        kind == FrameKind::kActivation ? "F" : "B", " before stage ", from,
        "'s"));
  }
  Frame frame = std::move(it->second);
  local_->frames.erase(it);
  return frame;
}

absl::Status PipelineStage::Made(FrameKind kind, int64_t m, int j,
                                 Outgoing out) {
  const int to = kind == FrameKind::kActivation ? stage_ + 1 : stage_ - 1;
  if (!Local(to, j)) {
    // Sent when the list says (its SEND op).
    outgoing_[{static_cast<int>(kind), {m, j}}] = std::move(out);
    return absl::OkStatus();
  }
  // The next stage is on this rank (the V's turn): no send in the list.
  Frame frame;
  frame.info = out.info;
  frame.data = out.data;
  if (out.labels.defined()) {
    frame.labels.resize(out.labels.numel());
    RETURN_IF_ERROR(device_->CopyToHost(out.labels, frame.labels.data()));
  }
  local_->frames[{static_cast<int>(kind), stage_, m, j}] = std::move(frame);
  return absl::OkStatus();
}

absl::Status PipelineStage::Send(FrameKind kind, int64_t m, int j) {
  auto it = outgoing_.find({static_cast<int>(kind), {m, j}});
  if (it == outgoing_.end()) {
    return absl::InternalError(absl::StrCat(
        Who(), ": a send of minibatch ", m, " microbatch ", j, " before the ",
        kind == FrameKind::kActivation ? "F" : "B", " that makes it"));
  }
  Outgoing out = std::move(it->second);
  outgoing_.erase(it);
  const int to = kind == FrameKind::kActivation ? stage_ + 1 : stage_ - 1;
  for (int peer : SendPeers(to, j)) {
    RETURN_IF_ERROR(PostSend(peer, out.info, out.data,
                             out.labels.defined() ? &out.labels : nullptr));
  }
  return absl::OkStatus();
}

std::string PipelineStage::Who() const {
  return absl::StrCat("stage ", stage_, " (rank ", comm_->rank(), ")");
}

absl::Status PipelineStage::PostSend(int peer, const FrameInfo& info,
                                     const Tensor& data, const Tensor* labels) {
  constexpr size_t kMaxPending = 64;
  while (pending_sends_.size() >= kMaxPending) {
    RETURN_IF_ERROR(
        pending_sends_.front()->Wait(absl::Now() + options_.timeout));
    pending_sends_.pop_front();
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<Work> work,
      SendFrame(*comm_, *device_, peer, info, data, labels, options_.channels,
                options_.bf16_frames && info.kind != FrameKind::kTiedGradient));
  pending_sends_.push_back(std::move(work));
  return absl::OkStatus();
}

absl::Status PipelineStage::Execute(const Op& op) {
  switch (op.kind) {
    case OpKind::kForward:
      return Forward(op.minibatch, op.microbatch);
    case OpKind::kBackward:
      return Backward(op.minibatch, op.microbatch);
    case OpKind::kBackwardInput:
      return Backward(op.minibatch, op.microbatch, /*split=*/true);
    case OpKind::kBackwardWeight:
      return BackwardWeight(op.minibatch, op.microbatch);
    case OpKind::kAllReduce:
      return AllReduce();
    case OpKind::kOptimizerStep:
      return Step(op.minibatch);
    case OpKind::kSendActivation:
      return Send(FrameKind::kActivation, op.minibatch, op.microbatch);
    case OpKind::kSendGradient:
      return Send(FrameKind::kGradient, op.minibatch, op.microbatch);
    case OpKind::kRecvActivation:
    case OpKind::kRecvGradient:
      // Posted by the rank's loop (PostRecvFor); F or B waits for it.
      return PostRecvFor(op);
  }
  return absl::OkStatus();
}

absl::StatusOr<const ParameterSet*> PipelineStage::WeightsFor(int64_t version) {
  if (version == version_) return &latest_;
  auto it = stash_.find(version);
  if (it == stash_.end()) {
    return absl::InternalError(
        absl::StrCat("stage ", stage_, ": weight version ", version,
                     " is not kept (newest ", version_, ")"));
  }
  return &it->second;
}

void PipelineStage::DropUnneededVersions() {
  for (auto it = stash_.begin(); it != stash_.end();) {
    it = MustKeep(it->first) ? std::next(it) : stash_.erase(it);
  }
}

absl::Status PipelineStage::Forward(int64_t m, int j) {
  const int rows = MicroRows();
  const int S = layout_.num_stages();
  const int begin = layout_.layer_begin[stage_];
  const int end = layout_.layer_begin[stage_ + 1];
  InFlight f;
  Tensor x;
  // 2BW: the one-step delay, also where a newer version exists already.
  int64_t version =
      layout_.policy == v1::SCHEDULE_2BW ? VersionFor(m) : version_;
  ASSIGN_OR_RETURN(f.labels,
                   device_->Allocate(LabelShape(*model_, rows), DType::kI32));
  const Shape in_shape = model_->layer(begin).input_shape().WithLeading(rows);
  if (stage_ == 0) {
    auto indices =
        sampler_->Batch(m).subspan(static_cast<size_t>(j) * rows, rows);
    ASSIGN_OR_RETURN(x, device_->Allocate(in_shape, DType::kF32));
    RETURN_IF_ERROR(
        LoadBatch(*train_, indices, *device_, x, f.labels, staging_));
  } else {
    ASSIGN_OR_RETURN(Frame frame, Input(FrameKind::kActivation, m, j));
    x = std::move(frame.data);
    RETURN_IF_ERROR(device_->CopyFromHost(frame.labels.data(), f.labels));
    if (layout_.policy == v1::SCHEDULE_1F1B_VERTICAL_SYNC) {
      version = frame.info.version;
    }
  }
  if (version != VersionFor(m)) {
    return absl::InternalError(
        absl::StrCat(Who(), ": minibatch ", m, " would use weight version ",
                     version, " but the schedule says ", VersionFor(m)));
  }
  f.version = version;
  ASSIGN_OR_RETURN(const ParameterSet* weights, WeightsFor(version));
  ParameterSet range = *weights;  // Handles (shared buffers), not a copy.
  range.begin = begin;
  range.end = end;
  const PassContext ctx = TrainingPass(m, j);
  Tensor y;
  const absl::Time compute_start = absl::Now();
  RETURN_IF_ERROR(ForwardRange(*model_, *device_, range, x, ctx, &y, &f.cache));
  last_compute_ = absl::Now() - compute_start;
  if (stage_ == S - 1) {
    ASSIGN_OR_RETURN(LossOutput loss, Loss(y, f.labels));
    std::vector<float> losses(f.labels.numel());
    RETURN_IF_ERROR(device_->CopyToHost(loss.losses, losses.data()));
    double sum = 0;
    for (float l : losses) sum += l;
    if (!std::isfinite(sum)) {
      return WithCause(absl::DataLossError(absl::StrCat(
                           kNonFiniteLoss, " at step ", m + 1, " (minibatch ",
                           m, ") on ", Who(), ": the loss is ", sum)),
                       v1::FAILURE_NONFINITE_LOSS);
    }
    // Reported per sample (a sample's loss: the mean over its tokens), so
    // the minibatch's mean is the mean over every token.
    const double per_sample = static_cast<double>(f.labels.numel()) / rows;
    // A tensor group's members compute the same loss: member 0 reports it.
    if (options_.on_loss && member_ == 0) {
      options_.on_loss(m, sum / per_sample, rows);
    }
    f.dlogits = loss.dlogits;
  } else {
    FrameInfo info{FrameKind::kActivation, m, j, comm_->rank(), version};
    info.stage = stage_;
    info.chunk = ChunkOfStage(stage_);
    RETURN_IF_ERROR(Made(FrameKind::kActivation, m, j, {info, y, f.labels}));
  }
  f.activation_bytes = CacheBytes(f.cache);
  in_flight_[{m, j}] = std::move(f);
  // The next minibatch with a forward to come: this one until the last of
  // its microbatches this replica runs (2BW's later microbatches use the
  // version the first did, which must stay kept).
  const int replicas = layout_.Replicas(stage_);
  const bool last = j + replicas >= layout_.microbatches;
  next_forward_ = std::max(next_forward_, last ? m + 1 : m);
  stats_.peak_in_flight =
      std::max(stats_.peak_in_flight, static_cast<int>(in_flight_.size()));
  int64_t bytes = 0;
  for (const auto& [key, g] : in_flight_) bytes += g.activation_bytes;
  stats_.stashed_activation_bytes_peak =
      std::max(stats_.stashed_activation_bytes_peak, bytes);
  return absl::OkStatus();
}

absl::Status PipelineStage::Backward(int64_t m, int j, bool split) {
  const int S = layout_.num_stages();
  const int begin = layout_.layer_begin[stage_];
  const int end = layout_.layer_begin[stage_ + 1];
  auto it = in_flight_.find({m, j});
  if (it == in_flight_.end()) {
    return absl::InternalError(absl::StrCat(Who(), ": backward of minibatch ",
                                            m, " microbatch ", j,
                                            " without its forward"));
  }
  InFlight& f = it->second;
  if (f.input_done) {
    return absl::InternalError(absl::StrCat(
        Who(), ": a second backward of minibatch ", m, " microbatch ", j));
  }
  Tensor dy;
  if (stage_ == S - 1) {
    dy = f.dlogits;
  } else {
    ASSIGN_OR_RETURN(Frame frame, Input(FrameKind::kGradient, m, j));
    dy = std::move(frame.data);
  }
  ASSIGN_OR_RETURN(const ParameterSet* weights, WeightsFor(f.version));
  ParameterSet range = *weights;
  range.begin = begin;
  range.end = end;
  ParameterSet grads = grads_;
  grads.begin = begin;
  grads.end = end;
  const PassContext ctx = TrainingPass(m, j);
  Tensor dx;
  bool accumulate = accumulated_ && SplitsMinibatches(layout_.policy);
  if (split) {
    // The W's may run in any order (a user's program): every one adds to
    // gradients zeroed before the minibatch's first backward, rather than
    // the first overwriting them. 0 + g == g, so the schedules whose W's
    // follow their I's give the same bits as a write would.
    if (!accumulated_) {
      for (const Tensor& g : grads_.tensors) {
        device_->Fill(g.f32(), g.numel(), 0.0f);
      }
    }
    accumulate = true;
  }
  // The minibatch's last backward: buckets go as their layers finish.
  const std::function<void(int)> on_layer = [this](int l) { LaunchBuckets(l); };
  const bool overlap = overlap_ && !split && LastGradientOp(m);
  const absl::Time compute_start = absl::Now();
  RETURN_IF_ERROR(BackwardRange(*model_, *device_, range, f.cache, dy, ctx,
                                stage_ > 0 ? &dx : nullptr, grads, accumulate,
                                split ? &f.deferred : nullptr,
                                overlap ? &on_layer : nullptr));
  last_compute_ = absl::Now() - compute_start;
  accumulated_ = true;
  GradientOpDone(m);
  if (stage_ > 0) {
    FrameInfo info{FrameKind::kGradient, m, j, comm_->rank(), f.version};
    info.stage = stage_;
    info.chunk = ChunkOfStage(stage_);
    RETURN_IF_ERROR(Made(FrameKind::kGradient, m, j, {info, dx, Tensor()}));
  }
  if (split) {
    // W needs only what `deferred` holds (the linear maps' inputs and
    // output gradients): the rest of the activations go now.
    f.input_done = true;
    f.cache = RangeCache();
    f.activation_bytes = DeferredBytes(f.deferred);
    return absl::OkStatus();
  }
  in_flight_.erase(it);
  DropUnneededVersions();
  return absl::OkStatus();
}

absl::Status PipelineStage::BackwardWeight(int64_t m, int j) {
  auto it = in_flight_.find({m, j});
  if (it == in_flight_.end() || !it->second.input_done) {
    return absl::InternalError(
        absl::StrCat(Who(), ": the weight gradient of minibatch ", m,
                     " microbatch ", j, " before its input gradient"));
  }
  const absl::Time compute_start = absl::Now();
  RunDeferredGrads(*device_, it->second.deferred);
  last_compute_ = absl::Now() - compute_start;
  GradientOpDone(m);
  in_flight_.erase(it);
  DropUnneededVersions();
  return absl::OkStatus();
}

absl::StatusOr<LossOutput> PipelineStage::Loss(const Tensor& logits,
                                               const Tensor& labels) {
  const float scale =
      1.0f /
      static_cast<float>(LabelShape(*model_, spec_.batch_size()).numel());
  if (!model_->vocabulary_parallel()) {
    return SoftmaxCrossEntropy(*device_, logits, labels, scale);
  }
  // The logits are this member's share of the vocabulary.
  const int64_t classes = logits.shape()[logits.shape().rank() - 1];
  return VocabParallelCrossEntropy(*device_, *tensor_, logits, labels,
                                   member_ * classes, scale);
}

bool PipelineStage::Holds(int layer) const {
  return layer >= layout_.layer_begin[stage_] &&
         layer < layout_.layer_begin[stage_ + 1];
}

int PipelineStage::StageOf(int layer) const {
  int s = 0;
  while (layer >= layout_.layer_begin[s + 1]) ++s;
  return s;
}

absl::Status PipelineStage::CheckTies() const {
  const bool flushes = SplitsMinibatches(layout_.policy);
  for (const auto& [owner, tied] : model_->ties()) {
    const int a = StageOf(owner), b = StageOf(tied);
    if (layout_.TensorDegree(a) != layout_.TensorDegree(b)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers[", tied, "].tie_weight_to=", owner,
          ": the tied layers sit on stages ", a, " and ", b,
          " of tensor degrees ", layout_.TensorDegree(a), " and ",
          layout_.TensorDegree(b), "; tied weights need equal degrees"));
    }
    if (StageOf(owner) != StageOf(tied) && !flushes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers[", tied, "].tie_weight_to=", owner,
          ": the tied layers sit on stages ", StageOf(owner), " and ",
          StageOf(tied),
          ", which under this schedule update the shared "
          "weight at different versions; use 1f1b_flush or gpipe"));
    }
  }
  return absl::OkStatus();
}

// Megatron's embedding group: the two stages holding a tie's layers send
// each other their gradient of the weight and both add the other's, so
// both copies take the step of the sum. Replica r of one stage sends to
// every replica q of the other with q % (this stage's replicas) == r, and
// receives from replica r % (the other's replicas); likewise between the
// members of their tensor groups (tied weights are whole on every member).
// Two stages of one rank (ZB-V's first and last) hand theirs over in
// memory.
absl::Status PipelineStage::PostTiedGradients(int64_t m) {
  const auto ties = model_->ties();
  for (size_t t = 0; t < ties.size(); ++t) {
    const auto [owner, tied] = ties[t];
    if (Holds(owner) == Holds(tied)) continue;  // Summed locally, or not ours.
    const int mine = Holds(owner) ? owner : tied;
    const int other = StageOf(Holds(owner) ? tied : owner);
    const Tensor& g = WeightOf(*model_, grads_, mine);
    std::string out(g.nbytes(), '\0');
    RETURN_IF_ERROR(device_->CopyToHost(g, out.data()));
    RETURN_IF_ERROR(device_->Synchronize());
    const uint64_t tag = FrameTag(FrameKind::kTiedGradient, m,
                                  static_cast<int>(t), ChunkOfStage(stage_));
    for (int d = replica_; d < layout_.Replicas(other);
         d += layout_.Replicas(stage_)) {
      for (int k = member_; k < layout_.TensorDegree(other); k += Degree()) {
        const int peer = layout_.RankAt(other, d, k);
        if (peer == comm_->rank()) {
          local_->tied[tag] = out;
        } else {
          tied_sends_.push_back(comm_->SendExact(peer, tag, out));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PipelineStage::FinishTiedGradients(int64_t m) {
  const auto ties = model_->ties();
  const absl::Time deadline = absl::Now() + options_.timeout;
  for (size_t t = 0; t < ties.size(); ++t) {
    const auto [owner, tied] = ties[t];
    if (Holds(owner) == Holds(tied)) continue;
    const int mine = Holds(owner) ? owner : tied;
    const int other = StageOf(Holds(owner) ? tied : owner);
    const Tensor& g = WeightOf(*model_, grads_, mine);
    const uint64_t tag = FrameTag(FrameKind::kTiedGradient, m,
                                  static_cast<int>(t), ChunkOfStage(other));
    const int from = layout_.RankAt(other, replica_ % layout_.Replicas(other),
                                    member_ % layout_.TensorDegree(other));
    std::string in;
    if (from == comm_->rank()) {
      auto it = local_->tied.find(tag);
      if (it == local_->tied.end()) {
        return absl::InternalError(absl::StrCat(
            Who(), ": stage ", other, "'s tied gradient is not there"));
      }
      in = std::move(it->second);
      local_->tied.erase(it);
    } else {
      ASSIGN_OR_RETURN(in,
                       comm_->RecvExact(from, tag, g.nbytes())->Wait(deadline));
    }
    ASSIGN_OR_RETURN(Tensor theirs, device_->Allocate(g.shape(), DType::kF32));
    RETURN_IF_ERROR(device_->CopyFromHost(in.data(), theirs));
    device_->Axpby(g.numel(), 1.0f, theirs.f32(), 1.0f, g.f32());
  }
  for (auto& send : tied_sends_) RETURN_IF_ERROR(send->Wait(deadline));
  tied_sends_.clear();
  SumTiedGradients(*model_, *device_, grads_);
  return absl::OkStatus();
}

absl::Status PipelineStage::FinishGradients(int64_t m) {
  if (finished_ == m) return absl::OkStatus();
  RETURN_IF_ERROR(
      SumSequenceParallelGradients(*model_, *device_, grads_, tensor_.get()));
  RETURN_IF_ERROR(FinishTiedGradients(m));
  finished_ = m;
  return absl::OkStatus();
}

absl::Status PipelineStage::Step(int64_t m) {
  RETURN_IF_ERROR(FinishGradients(m));
  if (pipemare_warmup_ > 0 && optimizer_ != nullptr) {
    // PipeMare: the gradient of minibatch m is this many steps stale.
    optimizer_->SetLearningRateScale(StalenessLrScale(
        version_ - VersionFor(m), optimizer_->steps(), pipemare_warmup_));
  }
  // Keep the version about to be replaced if a minibatch in flight, or one
  // still to come, uses it.
  if (MustKeep(version_)) {
    // The update goes into fresh buffers and the current ones become the
    // stashed version: no copy of the weights.
    ASSIGN_OR_RETURN(ParameterSet next, Uninitialised(device_, latest_));
    RETURN_IF_ERROR(Update(m, latest_, next));
    stash_[version_] = std::move(latest_);
    latest_ = std::move(next);
  } else {
    RETURN_IF_ERROR(Update(m, latest_, latest_));
  }
  ++version_;
  accumulated_ = false;
  DropUnneededVersions();
  stats_.peak_stashed_versions =
      std::max(stats_.peak_stashed_versions, static_cast<int>(stash_.size()));
  stats_.stashed_weight_bytes_peak =
      std::max(stats_.stashed_weight_bytes_peak,
               static_cast<int64_t>(stash_.size()) * latest_.numel() *
                   static_cast<int64_t>(sizeof(float)));
  stats_.committed_version = version_;
  RETURN_IF_ERROR(Checkpoint());
  const int64_t every = options_.eval_every;
  // Every member of replica 0's tensor group: each sends the evaluator its
  // part.
  if (every > 0 && version_ % every == 0 && replica_ == 0 &&
      version_ < layout_.num_minibatches && options_.on_eval) {
    return options_.on_eval(version_, latest_);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> PipelineStage::CheckpointNow() {
  const bool due =
      CheckpointDue(version_, layout_.num_minibatches,
                    options_.checkpoint_every, options_.checkpoint_at);
  if (options_.checkpoint_at == nullptr) return due;
  // The coordinator's pick reaches the members (and, when the state is
  // sharded, the replicas) at different times: they agree (any one's due
  // makes it due for all) before they gather.
  float votes = due ? 1.0f : 0.0f;
  const absl::Time deadline = absl::Now() + options_.timeout;
  if (Degree() > 1) {
    RETURN_IF_ERROR(options_.tensor_group->AllReduce(&votes, 1, deadline));
  }
  if (Sharded()) RETURN_IF_ERROR(StateGroup()->AllReduce(&votes, 1, deadline));
  return votes > 0;
}

absl::Status PipelineStage::Checkpoint() {
  if (replica_ != 0 && (!Sharded() || StateGroup() == nullptr)) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const bool now, CheckpointNow());
  if (!now) return absl::OkStatus();
  // Sharded state: every replica takes part in gathering it whole.
  const ParameterSet* params = &latest_;
  const Optimizer* optimizer = optimizer_.get();
  ParameterSet gathered;
  std::unique_ptr<Optimizer> whole_state;
  if (Sharded()) {
    ASSIGN_OR_RETURN(whole_state, GatherWholeState(&gathered));
    if (replica_ != 0) return absl::OkStatus();
    optimizer = whole_state.get();
    if (dp_ == DataParallel::kParameterServer) params = &gathered;
  }
  if (Degree() == 1) {
    if (!options_.on_checkpoint) return absl::OkStatus();
    return options_.on_checkpoint(version_, *params, *optimizer);
  }
  // Whole tensors, gathered by every member; member 0 hands them on.
  ASSIGN_OR_RETURN(SafetensorsFile part,
                   ExportTrainingState(*device_, *params, *optimizer, {}));
  ASSIGN_OR_RETURN(SafetensorsFile whole,
                   GatherWholeFile(part, *model_, *options_.tensor_group,
                                   absl::Now() + options_.timeout));
  if (member_ != 0 || !options_.on_checkpoint_file) return absl::OkStatus();
  return options_.on_checkpoint_file(version_, std::move(whole));
}

}  // namespace aqueduct
