// CoordinatorModelSink: the worker daemon's ModelSink
// (worker/runtime/model_sink.h). It uploads a job's trained model to the
// coordinator (CoordinatorClient::UploadModel: chunks, each with the
// worker's identity and the CRC-32 of the whole file) and returns once the
// coordinator has made it durable.
//
// The coordinator may be restarting when a job ends, so the upload is
// retried with exponential backoff until options.deadline has passed since
// Deliver began, when the coordinator is unreachable (UNAVAILABLE,
// DEADLINE_EXCEEDED) or busy with another upload of the job (ABORTED).
// For options.reregister_grace after it was last unreachable, NOT_FOUND and
// FAILED_PRECONDITION are retried too: a restarted coordinator does not
// know the worker, or its job, until the agent has registered again. Any
// other error ends Deliver at once. Each attempt asks `identity` for the
// worker's current id and incarnation.
//
// Time and sleeping are injected (options.clock, options.sleep), so tests
// run the retries on a FakeClock.
//
// Thread-safe (Deliver keeps no state between calls).
#ifndef AQUEDUCT_WORKER_MODEL_UPLOADER_H_
#define AQUEDUCT_WORKER_MODEL_UPLOADER_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/coordinator_client.h"
#include "proto/service_types.h"
#include "worker/runtime/model_sink.h"

namespace aqueduct {

struct ModelUploaderOptions {
  // The coordinator's host:port, for error messages.
  std::string coordinator_address;
  // Deliver gives up once this has passed since it began.
  absl::Duration deadline = absl::Minutes(5);
  // The longest one UploadModel call may take.
  absl::Duration call_timeout = absl::Minutes(2);
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(10);
  // See the top of this file.
  absl::Duration reregister_grace = absl::Seconds(30);
  // Not owned.
  const Clock* clock = RealClock::Get();
  // Waits between attempts.
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) {
    absl::SleepFor(d);
  };
};

class CoordinatorModelSink final : public ModelSink {
 public:
  // `coordinator` is not owned and must outlive the sink; `identity` gives
  // the worker's current WorkerInfo (worker_id, incarnation).
  CoordinatorModelSink(CoordinatorClient* coordinator,
                       std::function<WorkerInfo()> identity,
                       ModelUploaderOptions options = {});

  // Blocks until the coordinator has the model, or the error that
  // prevented it: UNAVAILABLE naming the coordinator's address when it
  // stayed unreachable until the deadline; otherwise the coordinator's
  // refusal (e.g. FAILED_PRECONDITION when this worker may no longer
  // upload the job's model), prefixed with what was being done.
  absl::Status Deliver(const std::string& job_id, int attempt,
                       const std::string& safetensors) override;

 private:
  // Whether an attempt that failed with `status` is worth repeating, given
  // how long ago the coordinator was last unreachable.
  bool Retryable(const absl::Status& status,
                 absl::Duration since_unreachable) const;
  // The error Deliver ends with after its last attempt failed with `last`.
  absl::Status GiveUp(const std::string& job_id, const absl::Status& last,
                      int attempts, absl::Duration spent) const;

  CoordinatorClient* const coordinator_;
  const std::function<WorkerInfo()> identity_;
  const ModelUploaderOptions options_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_MODEL_UPLOADER_H_
