#include "worker/model_uploader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace aqueduct {

namespace {

bool Unreachable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

}  // namespace

CoordinatorModelSink::CoordinatorModelSink(CoordinatorClient* coordinator,
                                           std::function<WorkerInfo()> identity,
                                           ModelUploaderOptions options)
    : coordinator_(coordinator),
      identity_(std::move(identity)),
      options_(std::move(options)) {}

bool CoordinatorModelSink::Retryable(const absl::Status& status,
                                     absl::Duration since_unreachable) const {
  if (Unreachable(status) || absl::IsAborted(status)) return true;
  return (absl::IsNotFound(status) || absl::IsFailedPrecondition(status)) &&
         since_unreachable <= options_.reregister_grace;
}

absl::Status CoordinatorModelSink::GiveUp(const std::string& job_id,
                                          const absl::Status& last,
                                          int attempts,
                                          absl::Duration spent) const {
  const std::string what =
      absl::StrCat("uploading the trained model of job ", job_id);
  if (!Unreachable(last)) return Annotate(last, what);
  return absl::UnavailableError(absl::StrCat(
      what, ": the coordinator at ", options_.coordinator_address,
      " is unreachable (", attempts, " attempts over ",
      absl::FormatDuration(spent), "; last: ", last.message(), ")"));
}

absl::Status CoordinatorModelSink::Deliver(const std::string& job_id,
                                           int attempt,
                                           const std::string& safetensors) {
  const absl::Time start = options_.clock->Now();
  const absl::Time give_up = start + options_.deadline;
  absl::Time last_unreachable = absl::InfinitePast();
  absl::Duration backoff = options_.initial_backoff;
  for (int attempts = 1;; ++attempts) {
    const WorkerInfo me = identity_();
    v1::UploadModelChunk header;
    header.set_worker_id(me.worker_id());
    header.set_incarnation(me.incarnation());
    header.set_job_id(job_id);
    header.set_attempt(attempt);
    const absl::Duration timeout = std::max(
        absl::Milliseconds(1),
        std::min(options_.call_timeout, give_up - options_.clock->Now()));
    const absl::StatusOr<v1::UploadModelResponse> uploaded =
        coordinator_->UploadModel(header, safetensors, timeout);
    const absl::Time now = options_.clock->Now();
    if (uploaded.ok()) {
      AQ_LOG_INFO("uploaded the trained model of job {} ({} bytes) to {}",
                  job_id, safetensors.size(), uploaded->path());
      return absl::OkStatus();
    }
    const absl::Status& s = uploaded.status();
    if (Unreachable(s)) last_unreachable = now;
    if (!Retryable(s, now - last_unreachable) || now + backoff >= give_up) {
      return GiveUp(job_id, s, attempts, now - start);
    }
    AQ_LOG_WARN("uploading the model of job {}: {}; retrying in {}", job_id,
                s.ToString(), absl::FormatDuration(backoff));
    options_.sleep(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

}  // namespace aqueduct
