#include "worker/runtime/progress.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "pipeline/failure.h"

namespace aqueduct {

int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      int64_t kb = 0;
      std::istringstream(line.substr(6)) >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

ProgressAccumulator::ProgressAccumulator(ProgressOptions options)
    : options_(std::move(options)) {}

void ProgressAccumulator::Reset(const std::string& job_id, int stage,
                                int replica, int attempt) {
  absl::MutexLock lock(&mu_);
  pending_.Clear();
  pending_.set_job_id(job_id);
  pending_.set_stage(stage);
  pending_.set_replica(replica);
  pending_.set_attempt(attempt);
  byte_counter_ = nullptr;
  dirty_ = false;
  loss_parts_.clear();
  loss_samples_ = 0;
  busy_ = absl::ZeroDuration();
  run_start_ = last_step_ = options_.clock->Now();
}

void ProgressAccumulator::Begin(int64_t loss_samples) {
  absl::MutexLock lock(&mu_);
  loss_samples_ = loss_samples;
  output_stage_ = loss_samples > 0;
  busy_ = absl::ZeroDuration();
  run_start_ = last_step_ = options_.clock->Now();
}

void ProgressAccumulator::SetTotalSteps(int64_t total_steps) {
  absl::MutexLock lock(&mu_);
  pending_.set_total_steps(total_steps);
  dirty_ = true;
}

double ProgressAccumulator::UtilizationLocked(absl::Time now) const {
  const absl::Duration elapsed = now - run_start_;
  if (elapsed <= absl::ZeroDuration()) return 0;
  return absl::FDivDuration(busy_, elapsed);
}

void ProgressAccumulator::OnLocalStep(const StepReport& r) {
  absl::MutexLock lock(&mu_);
  busy_ += absl::Milliseconds(r.step_ms);
  pending_.set_minibatches_done(r.step);
  pending_.set_total_steps(r.total_steps);
  pending_.set_committed_version(r.step);
  pending_.clear_in_flight();
  if (r.step < r.total_steps) {
    InFlight* next = pending_.add_in_flight();
    next->set_minibatch(r.step);
    next->set_version(r.step);
  }
  pending_.add_step_ms(r.step_ms);
  LossPoint* loss = pending_.add_losses();
  loss->set_minibatch(r.step - 1);
  loss->set_loss(r.loss);
  pending_.set_utilization(UtilizationLocked(options_.clock->Now()));
  dirty_ = true;
}

void ProgressAccumulator::OnLoss(int64_t minibatch, double sum,
                                 int64_t samples) {
  absl::MutexLock lock(&mu_);
  auto& part = loss_parts_[minibatch];
  part.first += sum;
  part.second += samples;
  if (part.second < loss_samples_) return;
  LossPoint* p = pending_.add_losses();
  p->set_minibatch(minibatch);
  p->set_loss(part.first / part.second);
  p->set_samples(part.second);
  loss_parts_.erase(minibatch);
  dirty_ = true;
}

void ProgressAccumulator::OnStageEvent(const StageEvent& e, int stage,
                                       const StageStats& stats) {
  absl::MutexLock lock(&mu_);
  if (e.kind == OpKind::kForward || e.kind == OpKind::kBackward ||
      e.kind == OpKind::kBackwardInput || e.kind == OpKind::kBackwardWeight ||
      e.kind == OpKind::kOptimizerStep) {
    busy_ += e.compute;
  }
  RecordTraceLocked(e, stage);
  if (e.kind == OpKind::kOptimizerStep) OnStepLocked(e, stats);
  dirty_ = true;
}

void ProgressAccumulator::OnStepLocked(const StageEvent& e,
                                       const StageStats& stats) {
  const absl::Time now = options_.clock->Now();
  pending_.add_step_ms(absl::ToDoubleMilliseconds(now - last_step_));
  last_step_ = now;
  pending_.set_minibatches_done(e.minibatch + 1);
  pending_.set_committed_version(e.version);
  // Busy fraction since the stage started (waits on peers excluded).
  pending_.set_utilization(UtilizationLocked(now));
  pending_.set_peak_rss_bytes(
      options_.peak_rss_bytes ? options_.peak_rss_bytes() : PeakRssBytes());
  pending_.set_stashed_weight_bytes(stats.stashed_weight_bytes_peak);
  pending_.set_stashed_activation_bytes(stats.stashed_activation_bytes_peak);
  pending_.set_peak_stashed_versions(stats.peak_stashed_versions);
  pending_.set_peak_in_flight(stats.peak_in_flight);
  pending_.set_optimizer_state_bytes(stats.optimizer_state_bytes);
  pending_.mutable_staleness_histogram()->Assign(
      stats.staleness_histogram.begin(), stats.staleness_histogram.end());
}

TraceEvent* ProgressAccumulator::AddTraceLocked(std::string name,
                                                const char* track,
                                                absl::Time start,
                                                absl::Duration duration) {
  if (pending_.events_size() >= options_.max_pending_events) return nullptr;
  TraceEvent* t = pending_.add_events();
  t->set_name(std::move(name));
  t->set_track(track);
  t->set_start_us(absl::ToUnixMicros(start));
  t->set_duration_us(absl::ToInt64Microseconds(duration));
  return t;
}

uint64_t FlowId(const std::string& job_id, int attempt, int64_t minibatch,
                int microbatch, bool gradient, int boundary) {
  // FNV-1a over the fields: both sides compute it alone, with no message.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  };
  mix(job_id.data(), job_id.size());
  const int64_t fields[] = {attempt, minibatch, microbatch, gradient ? 1 : 0,
                            boundary};
  mix(fields, sizeof(fields));
  const uint64_t id = h & ((uint64_t{1} << 52) - 1);
  return id == 0 ? 1 : id;
}

void ProgressAccumulator::RecordTransfersLocked(const StageEvent& e, int stage,
                                                bool forward, bool receive) {
  const std::string mb =
      absl::StrCat("mb=", e.minibatch,
                   e.microbatch > 0 ? absl::StrCat(".", e.microbatch) : "");
  const absl::Duration wait =
      std::max(absl::ZeroDuration(), (e.end - e.start) - e.compute);
  // Forward: an activation from stage-1 arrives, one goes to stage+1.
  // Backward: a gradient from stage+1 arrives, one goes to stage-1.
  const bool receives = forward ? stage > 0 : !output_stage_;
  const bool sends = forward ? !output_stage_ : stage > 0;
  const int in_boundary = forward ? stage - 1 : stage;
  const int out_boundary = forward ? stage : stage - 1;
  if (!receive) {
    // The send part only.
  } else if (receives) {
    // Always recorded (a wait of 0 too), so that every send has its end.
    TraceEvent* t =
        AddTraceLocked(absl::StrCat(forward ? "recv act " : "recv grad ", mb),
                       "comm", e.start, std::max(wait, absl::Microseconds(1)));
    if (t != nullptr) {
      t->set_flow_id(FlowId(pending_.job_id(), pending_.attempt(), e.minibatch,
                            e.microbatch, !forward, in_boundary));
      t->set_flow("in");
    }
  } else if (forward && wait > absl::Microseconds(20)) {
    // The input stage's forward waits on its data loader, not a peer.
    AddTraceLocked(absl::StrCat("load ", mb), "comm", e.start, wait);
  }
  if (sends && !receive) {
    // The send is posted when the compute ends; it completes later.
    TraceEvent* t = AddTraceLocked(
        absl::StrCat(forward ? "send act " : "send grad ", mb), "comm",
        e.end - absl::Microseconds(1), absl::Microseconds(1));
    if (t != nullptr) {
      t->set_flow_id(FlowId(pending_.job_id(), pending_.attempt(), e.minibatch,
                            e.microbatch, !forward, out_boundary));
      t->set_flow("out");
    }
  }
}

void ProgressAccumulator::OnEvalSpan(int64_t step, absl::Time start,
                                     absl::Time end) {
  absl::MutexLock lock(&mu_);
  AddTraceLocked(absl::StrCat("eval v=", step), "eval", start, end - start);
  dirty_ = true;
}

void ProgressAccumulator::RecordTraceLocked(const StageEvent& e, int stage) {
  const std::string mb =
      absl::StrCat("mb=", e.minibatch,
                   e.microbatch > 0 ? absl::StrCat(".", e.microbatch) : "");
  switch (e.kind) {
    case OpKind::kForward:
    case OpKind::kBackward:
    case OpKind::kBackwardInput: {
      const bool forward = e.kind == OpKind::kForward;
      RecordTransfersLocked(e, stage, forward, /*receive=*/true);
      AddTraceLocked(
          absl::StrCat(OpKindName(e.kind), " ", mb, " v=", e.version),
          "compute", e.end - e.compute, e.compute);
      RecordTransfersLocked(e, stage, forward, /*receive=*/false);
      break;
    }
    case OpKind::kBackwardWeight:
      AddTraceLocked(absl::StrCat("W ", mb, " v=", e.version), "compute",
                     e.end - e.compute, e.compute);
      break;
    case OpKind::kOptimizerStep:
      AddTraceLocked(absl::StrCat("step v=", e.version), "compute", e.start,
                     e.end - e.start);
      break;
    case OpKind::kAllReduce:
      AddTraceLocked(absl::StrCat("all-reduce ", mb), "comm", e.start,
                     e.end - e.start);
      break;
    default:
      break;
  }
}

void ProgressAccumulator::SetBytes(int64_t sent, int64_t received) {
  absl::MutexLock lock(&mu_);
  byte_counter_ = nullptr;
  pending_.set_bytes_sent(sent);
  pending_.set_bytes_received(received);
  dirty_ = true;
}

void ProgressAccumulator::SetByteCounter(ByteCounter counter) {
  absl::MutexLock lock(&mu_);
  byte_counter_ = std::move(counter);
}

void ProgressAccumulator::OnCheckpoint(const CheckpointWritten& written) {
  absl::MutexLock lock(&mu_);
  *pending_.add_checkpoints() = written;
  dirty_ = true;
}

void ProgressAccumulator::SetTest(double accuracy, double loss) {
  absl::MutexLock lock(&mu_);
  pending_.set_test_accuracy(accuracy);
  pending_.set_test_loss(loss);
  AddEvalLocked(pending_.total_steps(), accuracy, loss);
}

void ProgressAccumulator::OnEval(int64_t step, double accuracy, double loss) {
  absl::MutexLock lock(&mu_);
  AddEvalLocked(step, accuracy, loss);
}

void ProgressAccumulator::AddEvalLocked(int64_t step, double accuracy,
                                        double loss) {
  v1::EvalPoint* e = pending_.add_evals();
  e->set_step(step);
  e->set_loss(loss);
  e->set_accuracy(accuracy);
  dirty_ = true;
}

void ProgressAccumulator::Finish() {
  absl::MutexLock lock(&mu_);
  pending_.set_finished(true);
  pending_.clear_in_flight();
  dirty_ = true;
}

void ProgressAccumulator::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  pending_.set_error(std::string(status.message()));
  pending_.set_error_code(static_cast<int>(status.code()));
  *pending_.mutable_failure() = FailureOf(status);
  dirty_ = true;
}

std::optional<StageProgress> ProgressAccumulator::Take() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LogLine> lines;
  if (options_.logs != nullptr && !pending_.job_id().empty()) {
    lines = options_.logs->Take(pending_.job_id());
  }
  if (!dirty_ && lines.empty()) return std::nullopt;
  if (byte_counter_) {
    const auto [sent, received] = byte_counter_();
    pending_.set_bytes_sent(sent);
    pending_.set_bytes_received(received);
  }
  StageProgress out = pending_;
  for (v1::LogLine& line : lines) *out.add_log_lines() = std::move(line);
  out.set_reported_ms(absl::ToUnixMillis(options_.clock->WallNow()));
  // Keep the identity and cumulative fields; clear the per-report ones.
  pending_.clear_step_ms();
  pending_.clear_losses();
  pending_.clear_events();
  pending_.clear_checkpoints();
  pending_.clear_evals();
  pending_.set_finished(false);
  pending_.clear_error();
  pending_.clear_failure();
  dirty_ = false;
  return out;
}

int64_t ProgressAccumulator::minibatches_done() const {
  absl::MutexLock lock(&mu_);
  return pending_.minibatches_done();
}

}  // namespace aqueduct
