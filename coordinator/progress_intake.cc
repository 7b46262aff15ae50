#include "coordinator/progress_intake.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/input_checks.h"
#include "coordinator/jobs/failure_policy.h"
#include "coordinator/progress_checks.h"
#include "coordinator/recovery.h"

namespace aqueduct {

namespace {

// A stage's error becomes the job's reason, shown in every listing: cut to
// this many bytes (at a UTF-8 boundary).
constexpr size_t kMaxErrorBytes = 4096;

// A checked report as it is kept (nullopt: as it came): utilisation at
// most 1 (a report may be a little over, progress_checks.h) and the error
// cut to kMaxErrorBytes.
std::optional<StageProgress> Tidied(const StageProgress& report) {
  if (report.utilization() <= 1 && report.error().size() <= kMaxErrorBytes) {
    return std::nullopt;
  }
  StageProgress p = report;
  if (p.utilization() > 1) p.set_utilization(1);
  if (p.error().size() > kMaxErrorBytes) {
    size_t end = kMaxErrorBytes;
    // Back to the start of a UTF-8 sequence (continuation bytes: 10xxxxxx).
    while (end > 0 &&
           (static_cast<unsigned char>(p.error()[end]) & 0xc0) == 0x80) {
      --end;
    }
    p.set_error(absl::StrCat(p.error().substr(0, end), "... (",
                             report.error().size(), " bytes)"));
  }
  return p;
}

// Whether `worker_id` ran stage p.stage() replica p.replica() of `job`.
bool RanStage(const Job& job, const std::string& worker_id,
              const StageProgress& p) {
  const auto& stages = job.stage_workers;
  return p.stage() >= 0 && p.stage() < static_cast<int>(stages.size()) &&
         p.replica() >= 0 &&
         p.replica() < static_cast<int>(stages[p.stage()].size()) &&
         stages[p.stage()][p.replica()] == worker_id;
}

// The bounds of a report's values for `job` (progress_checks.h).
ProgressBounds BoundsFor(const Job& job, const StageProgress& p) {
  ProgressBounds bounds;
  if (job.total_steps > 0) {
    bounds.total_steps = job.total_steps;
    bounds.total_what = "the job's total steps";
  } else if (p.total_steps() > 0) {
    bounds.total_steps = p.total_steps();
    bounds.total_what = "the total steps the report gives";
  } else {
    bounds.total_what = "the bound while the job's total is not known";
  }
  bounds.batch_size = job.spec.batch_size();
  bounds.job_id = job.id;
  bounds.attempt = job.attempt;
  bounds.checkpoint_dir = job.spec.checkpoint().dir();
  return bounds;
}

}  // namespace

ProgressIntake::ProgressIntake(const CoordinatorOptions& options,
                               const Clock* clock, Registry& registry,
                               JobTable& jobs, JobLogStore& logs,
                               CheckpointCommitter& checkpoints,
                               JobEvents& events)
    : options_(options),
      clock_(clock),
      registry_(registry),
      jobs_(jobs),
      logs_(logs),
      checkpoints_(checkpoints),
      events_(events) {}

absl::Status ProgressIntake::CheckBatch(
    const std::string& worker_id, const std::string& incarnation,
    const std::vector<StageProgress>& stages) {
  RETURN_IF_ERROR(CheckWorkerName(worker_id, incarnation));
  if (stages.size() > static_cast<size_t>(kMaxReportEntries)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReportProgress has ", stages.size(),
                     " stage reports; the limit is ", kMaxReportEntries));
  }
  return absl::OkStatus();
}

absl::Status ProgressIntake::Report(const std::string& worker_id,
                                    const std::string& incarnation,
                                    const std::vector<StageProgress>& stages,
                                    std::vector<Records>* records) {
  auto worker = registry_.Get(worker_id);
  if (!worker.ok()) return worker.status();
  if (worker->info().incarnation() != incarnation) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", worker_id, " reports progress as incarnation ",
                     incarnation, ", which is not its registered incarnation"));
  }
  RETURN_IF_ERROR(registry_.CheckLive(worker_id, incarnation));
  // All or nothing: a batch with one forged or broken report changes
  // nothing.
  for (size_t i = 0; i < stages.size(); ++i) {
    RETURN_IF_ERROR(Check(*worker, stages[i], i));
  }
  const absl::Time now = clock_->Now();
  for (const StageProgress& p : stages) {
    Job* job = jobs_.Get(p.job_id());
    // Log lines of the attempt are kept even after the job ended: the
    // last ones often say why.
    if (job == nullptr || p.attempt() != job->attempt) continue;
    Record(*job, worker_id, p, records);
    // Of a job that ended (maybe by an earlier report of this batch):
    // ignored.
    if (!IsFinal(job->state)) Apply(*job, worker_id, p, now);
  }
  return absl::OkStatus();
}

absl::Status ProgressIntake::Check(const WorkerStatus& worker,
                                   const StageProgress& p, size_t index) const {
  const std::string& id = worker.info().worker_id();
  ASSIGN_OR_RETURN(const Job* found, jobs_.Find(p.job_id()));
  const Job& job = *found;
  if (p.attempt() < 0 || p.attempt() > job.attempt) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", id, " reports progress for attempt ", p.attempt(),
        " of job ", job.id, ", which has not started (it runs attempt ",
        job.attempt, ")"));
  }
  if (p.attempt() < job.attempt) return absl::OkStatus();  // Ignored.
  if (IsFinal(job.state)) {
    // Its workers were released when it ended: a late report of theirs is
    // ignored, anyone else's refused.
    if (RanStage(job, id, p)) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", id, " reports progress for stage ", p.stage(), " replica ",
        p.replica(), " of job ", job.id, ", which it did not run"));
  }
  if (worker.job_id() != job.id) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", id, " reports progress for job ", job.id,
                     ", which it is not assigned to"));
  }
  // A worker with several chunks reports for each stage it holds.
  if (!RanStage(job, id, p)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", id, " reports progress for stage ", p.stage(), " replica ",
        p.replica(), " of job ", job.id, "; it runs stage ", worker.stage(),
        " replica ", worker.replica()));
  }
  return CheckProgressValues(p, absl::StrCat("stages[", index, "]"),
                             BoundsFor(job, p));
}

void ProgressIntake::Record(const Job& job, const std::string& worker_id,
                            const StageProgress& p,
                            std::vector<Records>* records) {
  std::vector<v1::LogLine> lines(p.log_lines().begin(), p.log_lines().end());
  // Who wrote them comes from the caller's identity, not the report.
  for (v1::LogLine& line : lines) {
    line.set_worker(worker_id);
    line.set_stage(p.stage());
  }
  // Now, in order with the coordinator's own lines about the job (a follow
  // ends after "job SUCCEEDED": the last report's lines must be in before
  // it); trace events after the lock.
  if (!lines.empty()) logs_.Append(job.id, std::move(lines));
  if (p.events_size() == 0 || IsFinal(job.state)) return;
  Records r;
  r.job_id = job.id;
  r.trace.set_worker_id(worker_id);
  r.trace.set_stage(p.stage());
  r.trace.set_replica(p.replica());
  *r.trace.mutable_events() = p.events();
  records->push_back(std::move(r));
}

void ProgressIntake::Apply(Job& job, const std::string& worker_id,
                           const StageProgress& report, absl::Time now) {
  const std::optional<StageProgress> tidied = Tidied(report);
  const StageProgress& p = tidied.has_value() ? *tidied : report;
  job.ledger.Apply(worker_id, p, now);
  if (job.total_steps == 0 && p.total_steps() > 0) {
    job.total_steps = p.total_steps();
  }
  ++job.version;
  if (IsOutputStage(job, p.stage())) LogTrainingSignal(job);
  LogFirstStepAfterRestart(job, p);
  VouchForWorkers(job, p, now);
  checkpoints_.ApplyLocked(job, p);
  if (!p.error().empty()) {
    ReactToFailure(job, worker_id, p);
    return;
  }
  if (!p.finished()) return;
  // Every replica but those the job went on without (recovery.h).
  size_t total = 0;
  for (const auto& workers : job.stage_workers) total += workers.size();
  total -= std::min(total, job.tolerated_losses.size());
  if (job.ledger.MarkFinished(p, IsOutputStage(job, p.stage())) == total) {
    events_.Transition(job, JobEvent::kAllReplicasFinished, "");
  }
}

void ProgressIntake::ReactToFailure(Job& job, const std::string& worker_id,
                                    const StageProgress& p) {
  const v1::StageFailure& f = p.failure();
  const FailureReaction r = ReactToStageFailure(
      f, static_cast<absl::StatusCode>(p.error_code()),
      job.spec.fault_tolerance().on_nonfinite() == "rollback");
  if (r.forget_checkpoint) {
    ForgetUnloadableCheckpoint(job, f.checkpoint_version(), p.error());
  }
  if (r.note_unreachable_peer && registry_.Get(f.peer_worker_id()).ok()) {
    job.unreachable_peers.insert(f.peer_worker_id());
  }
  const std::string reason = StageFailureReason(worker_id, p);
  switch (r.action) {
    case FailureAction::kFail:
      events_.Transition(job, JobEvent::kFailed, reason);
      return;
    case FailureAction::kRestart:
      events_.RestartOrFail(job, reason);
      return;
    case FailureAction::kProbe:
      // A replica the job can go on without (recovery.h ToleratesLoss):
      // lost with its stage, whoever failed it; no probe needed.
      if (ToleratesLoss(job, worker_id).tolerated) {
        events_.WorkerLost(job, worker_id, reason);
        return;
      }
      events_.Probe(job, reason);
      return;
  }
}

std::string ProgressIntake::StageFailureReason(const std::string& worker_id,
                                               const StageProgress& p) const {
  if (p.failure().cause() != v1::FAILURE_PEER_UNREACHABLE) {
    return absl::StrCat("stage ", p.stage(), " replica ", p.replica(),
                        " on worker ", worker_id, " failed: ", p.error());
  }
  // A partition between two workers: the error names the peer and its
  // host ("could not reach stage S on worker W (HOST): ..."); this says
  // which end reported it, and from where.
  auto status = registry_.Get(worker_id);
  const std::string address = status.ok() ? status->info().address() : "";
  const size_t colon = address.rfind(':');
  return absl::StrCat(
      "stage ", p.stage(), " on worker ", worker_id,
      address.empty()
          ? ""
          : absl::StrCat(
                " (", address.substr(0, std::min(colon, address.size())), ")"),
      " ", p.error());
}

void ProgressIntake::ForgetUnloadableCheckpoint(Job& job, int64_t version,
                                                const std::string& error) {
  auto it = job.checkpoints.find(version);
  if (it == job.checkpoints.end()) return;
  AQ_LOG_WARN(
      "job {}: the checkpoint of version {} in {} does not load; later "
      "restarts use an older one: {}",
      job.id, it->first, it->second.dir(), error);
  job.checkpoints.erase(it);
}

void ProgressIntake::LogTrainingSignal(Job& job) {
  const int64_t now_ms = absl::ToUnixMillis(clock_->WallNow());
  const v1::LossPoint latest = job.ledger.latest_loss();
  const int64_t step = latest.minibatch() + 1;
  const int64_t every = LogEvery(job);
  if (step / every > job.logged_step / every ||
      (job.total_steps > 0 && step == job.total_steps &&
       job.logged_step < step)) {
    job.logged_step = step;
    logs_.AppendEvent(
        job.id, now_ms, "info",
        job.total_steps > 0
            ? absl::StrFormat("step %d/%d loss %.4f", step, job.total_steps,
                              latest.loss())
            : absl::StrFormat("step %d loss %.4f", step, latest.loss()));
  }
  const bool text = job.spec.data().has_text();
  for (const auto& [at, e] : job.ledger.evals()) {
    if (at <= job.logged_eval) continue;
    job.logged_eval = at;
    logs_.AppendEvent(
        job.id, now_ms, "info",
        text ? absl::StrFormat(
                   "evaluation at step %d: validation loss %.4f perplexity "
                   "%.2f",
                   at, e.loss(), std::exp(e.loss()))
             : absl::StrFormat(
                   "evaluation at step %d: test loss %.4f accuracy %.4f", at,
                   e.loss(), e.accuracy()));
  }
}

void ProgressIntake::LogFirstStepAfterRestart(Job& job,
                                              const StageProgress& p) {
  if (job.restarts.empty() || job.stepped_since_restart) return;
  const v1::RestartRecord& r = job.restarts.back();
  if (!IsOutputStage(job, p.stage()) ||
      p.committed_version() <= r.rolled_back_to()) {
    return;
  }
  job.stepped_since_restart = true;
  AQ_LOG_INFO(
      "job {} attempt {}: first step after the restart committed (version {}) "
      "{:.3f} s after the restart",
      job.id, job.attempt, p.committed_version(),
      absl::ToDoubleSeconds(clock_->WallNow() -
                            absl::FromUnixMillis(r.at_ms())));
}

void ProgressIntake::VouchForWorkers(Job& job, const StageProgress& p,
                                     absl::Time now) {
  if (!p.error().empty() || p.committed_version() <= job.vouched_version) {
    return;
  }
  job.vouched_version = p.committed_version();
  for (const auto& replicas : job.stage_workers) {
    for (const std::string& w : replicas) {
      // The job commits steps without a replica it could lose: no word
      // for that one (its lease alone says whether it lives).
      if (ToleratesLoss(job, w).tolerated) continue;
      registry_.Vouch(w, now + options_.registry.dead_after);
    }
  }
}

}  // namespace aqueduct
