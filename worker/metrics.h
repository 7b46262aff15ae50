// The worker's Prometheus metrics (GET /metrics on its --http_listen): its
// own view of the stages it ran and of the coordinator. The numbers are
// those of the progress reports the worker delivered (compute and
// communication seconds summed from their trace events, bytes moved, stash
// peaks, the latest loss of an output stage, checkpoint files) and of its
// calls to the coordinator (heartbeats sent and failed, whether the
// coordinator answered the latest call), observed by a CoordinatorClient
// decorator that the agent calls through; plus the process's metrics.
// docs/operations.md, "Metrics", lists every family.
//
// Thread-safety: thread-safe.
#ifndef AQUEDUCT_WORKER_METRICS_H_
#define AQUEDUCT_WORKER_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/synchronization/mutex.h"
#include "common/coordinator_client.h"
#include "common/metrics.h"

namespace aqueduct {

class WorkerMetrics {
 public:
  // Stage series kept at most (the oldest jobs' are forgotten beyond).
  static constexpr size_t kMaxStages = 256;

  // A heartbeat's, registration's or report's outcome.
  void ObserveHeartbeat(const absl::Status& status);
  void ObserveRegistration(const absl::Status& status);
  // Reports the coordinator accepted.
  void ObserveReports(const v1::ReportProgressRequest& request);
  // Any call's outcome: the coordinator is reachable unless it was
  // UNAVAILABLE or DEADLINE_EXCEEDED.
  void ObserveReachability(const absl::Status& status);

  // The exposition text; `worker_id` labels the worker's families.
  std::string Render(const std::string& worker_id) const;

  // `inner` (not owned) with every call observed into `metrics` (not
  // owned); both must outlive the result.
  static std::unique_ptr<CoordinatorClient> Observe(CoordinatorClient* inner,
                                                    WorkerMetrics* metrics);

 private:
  using StageKey = std::tuple<std::string, int, int>;  // job, stage, replica
  struct Stage {
    int64_t order = 0;  // when first seen (for forgetting the oldest)
    StageTimeTotals time;
    int32_t attempt = -1;
    int64_t last_sent = 0, last_received = 0;
    int64_t bytes_sent = 0, bytes_received = 0;
    int64_t minibatches_done = 0, total_steps = 0, checkpoint_files = 0;
    int64_t reports = 0;
    int64_t stashed_weight_bytes = 0, stashed_activation_bytes = 0;
    int32_t peak_in_flight = 0;
    double utilization = 0;
    bool has_loss = false;
    double loss = 0;
    bool finished = false;
  };
  void ApplyLocked(const v1::StageProgress& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RenderStagesLocked(MetricsText* text) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  int64_t heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t heartbeat_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t registration_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  bool reachable_ ABSL_GUARDED_BY(mu_) = false;
  bool answered_ ABSL_GUARDED_BY(mu_) = false;  // any call answered yet
  int64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<StageKey, Stage> stages_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_METRICS_H_
