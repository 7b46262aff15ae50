// JobLedger: what a running job's workers have reported, aggregated: per
// stage replica the committed weight version, minibatches in flight and the
// version each uses, step times, utilisation, bytes moved and memory peaks;
// for the job the loss curve (replicated output stages' shares of a
// minibatch merged), the final test metrics and the executed schedule
// (trace). FillStatus turns it into the stages of a JobStatus.
//
// Pure: no clock (the caller passes the time of each report), no I/O.
// Not thread-safe: owned by the coordinator's job table, under its mutex.
#ifndef AQUEDUCT_COORDINATOR_JOBS_LEDGER_H_
#define AQUEDUCT_COORDINATOR_JOBS_LEDGER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "proto/control.pb.h"

namespace aqueduct {

class JobLedger {
 public:
  // Step times kept per replica, loss points kept per job (the curve
  // halves its resolution beyond), trace events kept in memory per job:
  // the newest (the dashboard's timeline reads the last window); beyond,
  // the oldest quarter of the longest stage's are dropped. The trace store
  // (coordinator/trace_store.h) keeps every event on disk. About 150 bytes
  // each: some 30 MB a job at most (issue 22, item 7: 2,000,000 took a
  // coordinator to 1.5 GB).
  static constexpr size_t kStepWindow = 2048;
  static constexpr size_t kMaxLossPoints = 1000;
  static constexpr int64_t kMaxTraceEvents = 200000;
  static constexpr size_t kMaxThroughputPoints = 600;

  // `batch_size` is the job's minibatch size (losses reported for fewer
  // samples are shares of a minibatch split among output replicas).
  JobLedger() = default;
  explicit JobLedger(int64_t batch_size) : batch_size_(batch_size) {}

  // Records a report from `worker_id` received at `now`. The caller has
  // checked that the worker runs this stage replica.
  void Apply(const std::string& worker_id, const v1::StageProgress& p,
             absl::Time now);

  // A stage replica finished; returns how many have. An output stage's
  // final test metrics are kept.
  size_t MarkFinished(const v1::StageProgress& p, bool output_stage);

  // Fills `status`'s per-stage fields, loss, loss curve, test metrics, step
  // and samples/s. `stage_workers[s][r]` is the worker of stage s replica
  // r; `state_of` gives a worker's state.
  void FillStatus(
      const std::vector<std::vector<std::string>>& stage_workers,
      const std::function<v1::WorkerState(const std::string&)>& state_of,
      v1::JobStatus* status) const;

  // Replica `replica` of `stage` is lost and the job goes on without it
  // (coordinator/recovery.h ToleratesLoss): a minibatch's loss is whole
  // without its share, which is the samples its reports gave, else
  // `samples`. Minibatches that waited only for it are added to the curve.
  // Until the next Rollback.
  void LoseReplica(int stage, int replica, int64_t samples);
  // How many stage replicas have finished.
  size_t finished() const { return finished_.size(); }

  // A restart from the checkpoint of `version`: every replica's committed
  // version and minibatches done go back to it, nothing is in flight or
  // finished, and the loss curve keeps only the minibatches before it (the
  // new attempt trains the rest again, so no minibatch appears twice).
  void Rollback(int64_t version);

  v1::GetTraceResponse Trace() const;
  // The events of the last `window_us` of the trace (ending at or after
  // its latest event's end minus the window), for a live view: copies only
  // those, scanning each stage replica's events from the newest.
  v1::GetTraceResponse TraceTail(int64_t window_us) const;
  double loss() const { return loss_; }
  // The newest whole minibatch's loss (minibatch -1 before any), and the
  // evaluations by step.
  v1::LossPoint latest_loss() const {
    if (loss_curve_.empty()) {
      v1::LossPoint none;
      none.set_minibatch(-1);
      return none;
    }
    return loss_curve_.back();
  }
  const std::map<int64_t, v1::EvalPoint>& evals() const { return evals_; }

 private:
  struct Replica {
    int64_t committed_version = 0;
    std::vector<v1::InFlight> in_flight;
    int64_t minibatches_done = 0;
    std::deque<double> step_ms;
    double utilization = 0;
    // The attempt's bytes (a report carries its run's count so far, and
    // later reports repeat it), and those of earlier attempts.
    int64_t bytes_sent = 0, bytes_received = 0;
    int64_t bytes_sent_before = 0, bytes_received_before = 0;
    v1::StageProgress memory;  // The memory fields of the latest report.
    // For samples/s: (time, minibatches_done) of the first and last report.
    absl::Time first_report = absl::InfinitePast();
    int64_t first_done = 0;
    absl::Time last_report = absl::InfinitePast();
  };
  using Key = std::pair<int, int>;  // (stage, replica)

  void ApplyCounters(Replica& r, const v1::StageProgress& p, absl::Time now);
  void ApplyLosses(const v1::StageProgress& p);
  void AddLossPoint(const v1::LossPoint& point);
  // The output stage's step at the worker's `time_ms`.
  void AddThroughputPoint(int64_t time_ms, int64_t step);
  // The points with the samples/s between each and the one before.
  void FillThroughput(v1::JobStatus* s) const;
  void ApplyTrace(const std::string& worker_id, const v1::StageProgress& p);
  // Adds replica `r`'s figures to `stage`; returns its samples/s.
  double AddReplica(const Replica& r, v1::StageStatus* stage,
                    std::vector<double>* step_ms) const;

  int64_t batch_size_ = 0;
  std::map<Key, Replica> replicas_;
  std::map<Key, bool> finished_;
  std::vector<v1::LossPoint> loss_curve_;
  // Shares of minibatch losses from replicated output stages, until the
  // whole minibatch is in (or all but the lost replicas' shares).
  struct LossShare {
    int stage = 0;
    double sum = 0;
    int64_t samples = 0;
    std::set<int> replicas;  // Those whose share is in.
  };
  bool Complete(const LossShare& share) const;
  std::map<int64_t, LossShare> loss_shares_;
  // Each replica's share of a minibatch (samples), as last reported, and
  // the lost replicas' (LoseReplica).
  std::map<Key, int64_t> share_samples_;
  std::map<Key, int64_t> lost_;
  int64_t loss_stride_ = 1;
  // (time_ms, step) points, at least throughput_gap_ms_ apart.
  std::vector<v1::ThroughputPoint> throughput_;
  int64_t throughput_gap_ms_ = 1000;
  double loss_ = 0;
  double test_accuracy_ = 0, test_loss_ = 0;
  // Evaluations by step (periodic ones and the final one).
  std::map<int64_t, v1::EvalPoint> evals_;
  std::map<Key, v1::StageTrace> trace_;
  int64_t trace_events_ = 0, trace_dropped_ = 0;
  // Drops the oldest quarter of the longest stage trace's events.
  void DropOldestTraceEvents();
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOBS_LEDGER_H_
