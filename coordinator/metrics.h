// The coordinator's Prometheus metrics (GET /metrics on --http_listen):
// jobs, their stages and workers as the core holds them, rendered on each
// scrape, plus what only the RPCs show: the latency of every call by
// method and status code, heartbeats by worker, and per stage replica the
// compute, communication and idle seconds and bytes moved summed over the
// progress reports the coordinator accepted (docs/operations.md,
// "Metrics", lists every family).
//
// The RPCs are observed by a gRPC server interceptor (so the service's
// methods, present and future, need no timer of their own): it times each
// call from its arrival to its status, and for Heartbeat and
// ReportProgress keeps a summary of the request that counts only if the
// call succeeded.
//
// Thread-safety: thread-safe. Render() reads the core through its public,
// locking accessors (ListJobs, ListWorkers) and never holds this class's
// lock while it does.
#ifndef AQUEDUCT_COORDINATOR_METRICS_H_
#define AQUEDUCT_COORDINATOR_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "coordinator/core.h"
#include "grpcpp/support/server_interceptor.h"
#include "proto/control.pb.h"

namespace aqueduct {

class CoordinatorMetrics {
 public:
  // Series of stage replicas and workers kept at most (beyond, new ones are
  // not tracked until old ones are forgotten).
  static constexpr size_t kMaxTracked = 20000;

  CoordinatorMetrics();

  // A call to `method` (the short name, e.g. "Heartbeat") ended with
  // `code` after `elapsed`.
  void ObserveCall(const std::string& method, int code, absl::Duration elapsed);
  // An accepted heartbeat of `worker_id`.
  void ObserveHeartbeat(const std::string& worker_id);
  // One stage report, reduced to what the metrics keep (a call's reports
  // are summarized on arrival and applied if the call succeeds, so the
  // trace events are not copied).
  struct ReportSummary {
    std::string job_id;
    int32_t stage = 0, replica = 0, attempt = 0;
    StageTimeTotals time;                        // of this report's events only
    int64_t bytes_sent = 0, bytes_received = 0;  // cumulative in the attempt
    int64_t minibatches_done = 0, total_steps = 0, checkpoint_files = 0;
    int64_t stashed_weight_bytes = 0, stashed_activation_bytes = 0;
    int64_t peak_rss_bytes = 0;
    int32_t peak_in_flight = 0, in_flight = 0;
    double utilization = 0;
    bool has_loss = false;
    double loss = 0;
    std::vector<double> step_seconds;  // each step since the last report
  };
  static std::vector<ReportSummary> Summarize(
      const v1::ReportProgressRequest& request);
  // Accepted progress reports of `worker_id`.
  void ObserveReports(const std::string& worker_id,
                      const std::vector<ReportSummary>& reports);

  // The exposition text: the core's jobs and workers (read now), the
  // observed counters of those it still holds, the RPC histograms and the
  // process's metrics. Counters of jobs and workers the core no longer
  // holds are forgotten here.
  std::string Render(const CoordinatorCore& core, absl::Time now);

  // The interceptor factory to give grpc::ServerBuilder
  // (experimental().SetInterceptorCreators); `metrics` is not owned and
  // must outlive the server.
  static std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewInterceptorFactory(CoordinatorMetrics* metrics);

 private:
  // (job, stage, replica, worker)
  using ReplicaKey = std::tuple<std::string, int, int, std::string>;
  struct Replica {
    StageTimeTotals time;
    // Monotonic totals: the communicator's cumulative counts restart with
    // each attempt, so deltas are summed.
    int32_t attempt = -1;
    int64_t last_sent = 0, last_received = 0;
    int64_t bytes_sent = 0, bytes_received = 0;
    int64_t minibatches_done = 0;
    int64_t steps_total = 0;
    int64_t checkpoint_files = 0;
    int64_t reports = 0;
    int64_t stashed_weight_bytes = 0, stashed_activation_bytes = 0;
    int64_t peak_rss_bytes = 0;
    int32_t peak_in_flight = 0, in_flight = 0;
    double utilization = 0;
    double last_loss = 0;
    bool has_loss = false;
    HistogramSnapshot steps;  // step durations, seconds
  };
  void ApplyReport(const std::string& worker_id, const ReportSummary& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How long a finished job's series stay after it ended.
  static constexpr absl::Duration kFinishedJobGrace = absl::Minutes(10);
  void RenderJobs(const std::vector<v1::JobStatus>& jobs, absl::Time now,
                  MetricsText* text) const;
  void RenderReplicas(const std::vector<v1::JobStatus>& jobs,
                      MetricsText* text);
  void RenderWorkers(const std::vector<v1::WorkerStatus>& workers,
                     MetricsText* text);

  HistogramFamily rpc_seconds_;
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::map<ReplicaKey, Replica> replicas_ ABSL_GUARDED_BY(mu_);
};

// Every job in the core (all pages of ListJobs).
std::vector<v1::JobStatus> AllJobs(const CoordinatorCore& core);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_METRICS_H_
