#include "worker/handler.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/status.h"
#include "worker/link_probe.h"
#include "worker/profiler.h"

namespace aqueduct {

namespace {

// MeasureLinks' bounds: a coordinator asks for one target per call today;
// the caps keep one call from tying the worker's link up for long.
constexpr int kMaxLinkTargets = 64;
constexpr int64_t kMaxLinkProbeBytes = int64_t{64} << 20;
constexpr int64_t kMaxLinkDeadlineMs = 60000;

absl::Status CheckMeasureLinks(const v1::MeasureLinksRequest& r) {
  if (r.targets_size() > kMaxLinkTargets) {
    return absl::InvalidArgumentError(absl::StrCat(
        "targets: ", r.targets_size(), " is more than ", kMaxLinkTargets));
  }
  if (r.bytes() <= 0 || r.bytes() > kMaxLinkProbeBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes=", r.bytes(), " is not in [1, ", kMaxLinkProbeBytes, "]"));
  }
  if (r.deadline_ms() <= 0 || r.deadline_ms() > kMaxLinkDeadlineMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("deadline_ms=", r.deadline_ms(), " is not in [1, ",
                     kMaxLinkDeadlineMs, "]"));
  }
  return absl::OkStatus();
}

// One target, within `deadline` and what is left of the call.
v1::LinkResult MeasureOne(const v1::LinkTarget& target, int64_t bytes,
                          absl::Duration deadline, absl::Time call_end) {
  v1::LinkResult result;
  result.set_worker_id(target.worker_id());
  const absl::Duration left = call_end - MonotonicNow();
  if (target.port() <= 0 || target.port() > 65535) {
    result.set_error(absl::StrCat("port ", target.port(), " is out of range"));
  } else if (left <= absl::ZeroDuration()) {
    result.set_error("the call's deadline passed before this target");
  } else {
    auto m = MeasureLink(target.host(), target.port(), bytes,
                         std::min(deadline, left));
    if (m.ok()) {
      result.set_bytes_per_second(m->bytes_per_second);
      result.set_round_trip_ms(m->round_trip_ms);
    } else {
      result.set_error(std::string(m.status().message()));
    }
  }
  return result;
}

// A profile's result, shared by the profiling thread and the call that
// waits for it (which may give up first).
struct ProfileSlot {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<ModelProfile> result ABSL_GUARDED_BY(mu) =
      absl::UnknownError("not run");
};

}  // namespace

WorkerHandler::WorkerHandler(StageRuntime* runtime, DeviceSpec device,
                             int threads, std::function<WorkerInfo()> info)
    : runtime_(runtime),
      device_(std::move(device)),
      threads_(threads),
      info_(std::move(info)) {}

absl::Status WorkerHandler::AssignStage(const StageAssignment& assignment) {
  return runtime_->Assign(assignment);
}

absl::Status WorkerHandler::StartJob(const v1::StartJobRequest& request) {
  return runtime_->Start(request.job_id());
}

absl::Status WorkerHandler::StopJob(const v1::StopJobRequest& request) {
  std::optional<int> attempt;
  if (request.has_attempt()) attempt = request.attempt();
  return runtime_->Stop(request.job_id(), request.reason(), attempt);
}

absl::StatusOr<ModelProfile> WorkerHandler::Profile(
    const v1::ProfileRequest& request, absl::Time deadline) {
  ProfilerOptions options;
  if (request.warmup_iterations() > 0) {
    options.warmup_iterations = request.warmup_iterations();
  }
  if (request.measured_iterations() > 0) {
    options.measured_iterations = request.measured_iterations();
  }
  // The data is read under the roots the stages read it under, in the
  // memory the worker offers.
  options.files = runtime_->files();
  options.slowdown = runtime_->slowdown();
  options.memory_bytes = info_().device().memory_bytes();
  auto slot = std::make_shared<ProfileSlot>();
  const DeviceSpec device = device_;
  const int threads = threads_;
  RETURN_IF_ERROR(profiler_.Submit([slot, request, options, device, threads] {
    // Its own device: profiling does not touch the running job's state.
    absl::StatusOr<ModelProfile> result =
        [&]() -> absl::StatusOr<ModelProfile> {
      ASSIGN_OR_RETURN(auto made, CreateDevice(device, threads));
      return ProfileModel(request.spec(), made.get(), options);
    }();
    absl::MutexLock lock(&slot->mu);
    slot->result = std::move(result);
    slot->done = true;
  }));
  absl::MutexLock lock(&slot->mu);
  auto done = [&slot]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot->mu) {
    return slot->done;
  };
  if (!AwaitMonotonic(slot->mu, absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(
        "Profile: the call's deadline passed before the profile was done");
  }
  return slot->result;
}

WorkerRuntimeStatus WorkerHandler::GetStatus() const {
  WorkerRuntimeStatus status = runtime_->Status();
  *status.mutable_info() = info_();
  return status;
}

absl::StatusOr<v1::MeasureLinksResponse> WorkerHandler::MeasureLinks(
    const v1::MeasureLinksRequest& request, absl::Time call_end,
    const std::function<bool()>& cancelled) {
  RETURN_IF_ERROR(CheckMeasureLinks(request));
  v1::MeasureLinksResponse response;
  // Targets are measured one after another: parallel probes from one
  // worker would share its link and measure a fraction of it each.
  for (const v1::LinkTarget& target : request.targets()) {
    if (cancelled()) {
      return absl::CancelledError("MeasureLinks: the call was cancelled");
    }
    *response.add_results() =
        MeasureOne(target, request.bytes(),
                   absl::Milliseconds(request.deadline_ms()), call_end);
  }
  return response;
}

}  // namespace aqueduct
