#include "worker/service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/device/factory.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "worker/link_probe.h"
#include "worker/profiler.h"

namespace aqueduct {

grpc::Status GrpcWorkerService::FromCoordinator(
    const grpc::ServerContext& ctx) const {
  if (ConstantTimeEquals(IncomingBearerToken(ctx), control_token_)) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "only the coordinator this worker registered with may "
                      "call its Worker service (control token missing or "
                      "wrong)");
}

grpc::Status GrpcWorkerService::AssignStage(grpc::ServerContext* ctx,
                                            const StageAssignment* request,
                                            v1::AssignStageResponse*) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  return ToGrpcStatus(runtime_->Assign(*request));
}

grpc::Status GrpcWorkerService::StartJob(grpc::ServerContext* ctx,
                                         const v1::StartJobRequest* request,
                                         v1::StartJobResponse*) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  return ToGrpcStatus(runtime_->Start(request->job_id()));
}

grpc::Status GrpcWorkerService::StopJob(grpc::ServerContext* ctx,
                                        const v1::StopJobRequest* request,
                                        v1::StopJobResponse*) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  std::optional<int> attempt;
  if (request->has_attempt()) attempt = request->attempt();
  return ToGrpcStatus(
      runtime_->Stop(request->job_id(), request->reason(), attempt));
}

grpc::Status GrpcWorkerService::Profile(grpc::ServerContext* ctx,
                                        const v1::ProfileRequest* request,
                                        ModelProfile* response) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  ProfilerOptions options;
  if (request->warmup_iterations() > 0) {
    options.warmup_iterations = request->warmup_iterations();
  }
  if (request->measured_iterations() > 0) {
    options.measured_iterations = request->measured_iterations();
  }
  // The data is read under the roots the stages read it under.
  options.files = runtime_->files();
  // Its own device: profiling does not touch the running job's state.
  auto device = CreateDevice(device_, threads_);
  if (!device.ok()) return ToGrpcStatus(device.status());
  auto profile = ProfileModel(request->spec(), device->get(), options);
  if (!profile.ok()) return ToGrpcStatus(profile.status());
  *response = *std::move(profile);
  return grpc::Status::OK;
}

grpc::Status GrpcWorkerService::GetStatus(grpc::ServerContext* ctx,
                                          const v1::GetStatusRequest*,
                                          WorkerRuntimeStatus* response) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  *response = runtime_->Status();
  *response->mutable_info() = info_();
  return grpc::Status::OK;
}

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
                          absl::Duration deadline,
                          std::chrono::system_clock::time_point call_end) {
  v1::LinkResult result;
  result.set_worker_id(target.worker_id());
  const absl::Duration left =
      absl::FromChrono(call_end - std::chrono::system_clock::now());
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

}  // namespace

grpc::Status GrpcWorkerService::MeasureLinks(
    grpc::ServerContext* ctx, const v1::MeasureLinksRequest* request,
    v1::MeasureLinksResponse* response) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  if (absl::Status s = CheckMeasureLinks(*request); !s.ok()) {
    return ToGrpcStatus(s);
  }
  // Targets are measured one after another: parallel probes from one
  // worker would share its link and measure a fraction of it each.
  for (const v1::LinkTarget& target : request->targets()) {
    if (ctx->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "MeasureLinks: the call was cancelled");
    }
    *response->add_results() =
        MeasureOne(target, request->bytes(),
                   absl::Milliseconds(request->deadline_ms()), ctx->deadline());
  }
  return grpc::Status::OK;
}

}  // namespace aqueduct
