#include "worker/runtime/stage_runtime.h"

#include "absl/strings/str_cat.h"
#include "common/device/cpu_device.h"
#include "common/logging.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {

StageRuntime::StageRuntime(const StageRuntimeOptions& options)
    : options_(options) {}

StageRuntime::~StageRuntime() { Shutdown(); }

absl::Status StageRuntime::Assign(const StageAssignment& a) {
  if (a.job_id().empty() || a.stage() < 0 ||
      a.stage() >= a.plan().stages_size() || a.replica() < 0 ||
      a.replica() >= a.plan().stages(a.stage()).replicas()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment of stage ", a.stage(), " replica ", a.replica(),
        " does not fit its plan of ", a.plan().stages_size(), " stage(s)"));
  }
  absl::MutexLock lock(&mu_);
  if (has_assignment_ && assignment_.job_id() != a.job_id() &&
      (phase_ == "assigned" || phase_ == "running")) {
    return absl::FailedPreconditionError(
        absl::StrCat("this worker is busy with job ", assignment_.job_id()));
  }
  if (a.plan().stages_size() != 1 || a.plan().stages(0).replicas() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan has ", a.plan().stages_size(), " stage(s) and ",
        a.plan().workers_used(),
        " worker(s); this worker runtime runs one-stage, one-worker plans "
        "only (pipelined execution comes with the data-plane runtime); set "
        "pipeline.workers: 1"));
  }
  if (phase_ == "running") {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", a.job_id(), " is already running here"));
  }
  assignment_ = a;
  has_assignment_ = true;
  phase_ = "assigned";
  done_ = 0;
  pending_.Clear();
  dirty_ = false;
  return absl::OkStatus();
}

absl::Status StageRuntime::Start(const std::string& job_id) {
  StageAssignment a;
  {
    absl::MutexLock lock(&mu_);
    if (!has_assignment_ || assignment_.job_id() != job_id) {
      return absl::NotFoundError(
          absl::StrCat("job ", job_id, " is not assigned to this worker"));
    }
    if (phase_ == "running") return absl::OkStatus();  // Idempotent.
    if (phase_ != "assigned") {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " already ", phase_));
    }
    phase_ = "running";
    a = assignment_;
  }
  if (thread_.joinable()) thread_.join();
  stop_ = false;
  thread_ = std::thread([this, a] { Run(a); });
  return absl::OkStatus();
}

absl::Status StageRuntime::Stop(const std::string& job_id,
                                const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (!has_assignment_ || assignment_.job_id() != job_id) {
    return absl::OkStatus();
  }
  AQ_LOG_INFO("stopping job {}: {}", job_id, reason);
  stop_ = true;
  if (phase_ == "assigned") phase_ = "stopped";
  return absl::OkStatus();
}

void StageRuntime::Shutdown() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<StageProgress> StageRuntime::TakeProgress() {
  absl::MutexLock lock(&mu_);
  if (!dirty_) return {};
  std::vector<StageProgress> out = {pending_};
  // Keep the identity and cumulative fields; clear the per-report ones.
  pending_.clear_step_ms();
  pending_.clear_losses();
  pending_.set_finished(false);
  pending_.clear_error();
  dirty_ = false;
  return out;
}

std::string StageRuntime::current_job() const {
  absl::MutexLock lock(&mu_);
  return has_assignment_ && (phase_ == "assigned" || phase_ == "running")
             ? assignment_.job_id()
             : "";
}

WorkerRuntimeStatus StageRuntime::Status() const {
  absl::MutexLock lock(&mu_);
  WorkerRuntimeStatus s;
  s.set_phase(phase_);
  if (has_assignment_) {
    s.set_job_id(assignment_.job_id());
    s.set_stage(assignment_.stage());
    s.set_replica(assignment_.replica());
  }
  s.set_minibatches_done(done_);
  return s;
}

void StageRuntime::Run(StageAssignment a) {
  {
    absl::MutexLock lock(&mu_);
    pending_.set_job_id(a.job_id());
    pending_.set_stage(a.stage());
    pending_.set_replica(a.replica());
  }
  CpuDevice device(CpuDeviceOptions{options_.threads});
  LocalTrainOptions options;
  options.stop = &stop_;
  options.on_step = [&](const StepReport& r) {
    absl::MutexLock lock(&mu_);
    done_ = r.step;
    pending_.set_minibatches_done(r.step);
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
    pending_.set_utilization(1.0);
    dirty_ = true;
  };
  AQ_LOG_INFO("job {}: training stage {} replica {}", a.job_id(), a.stage(),
              a.replica());
  auto result = TrainLocal(a.spec(), &device, options);
  absl::MutexLock lock(&mu_);
  if (result.ok()) {
    phase_ = "finished";
    pending_.set_finished(true);
    if (result->test.has_value()) {
      pending_.set_test_accuracy(result->test->accuracy);
      pending_.set_test_loss(result->test->loss);
    }
    AQ_LOG_INFO("job {}: finished {} steps", a.job_id(), result->steps);
  } else if (result.status().code() == absl::StatusCode::kCancelled) {
    phase_ = "stopped";
    AQ_LOG_INFO("job {}: {}", a.job_id(),
                std::string(result.status().message()));
    return;
  } else {
    phase_ = "failed";
    pending_.set_error(std::string(result.status().message()));
    AQ_LOG_WARN("job {} failed: {}", a.job_id(), result.status().ToString());
  }
  dirty_ = true;
}

}  // namespace aqueduct
