// Prometheus metrics without a client library: a writer of the text
// exposition format 0.0.4 (families with # HELP and # TYPE, counters,
// gauges and histograms, escaped labels), a thread-safe latency Histogram
// and a labelled family of them, the process's own metrics read from
// /proc/self, and the per-stage time split both daemons derive from trace
// events. Names follow Prometheus' conventions: base units (seconds,
// bytes), counters ending in _total, an aqueduct_ prefix (process_* as the
// client libraries name them).
//
// Thread-safety: MetricsText is not thread-safe (one scrape builds one);
// Histogram and HistogramFamily are thread-safe.
#ifndef AQUEDUCT_COMMON_METRICS_H_
#define AQUEDUCT_COMMON_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace aqueduct {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kHistogram };

// What a Histogram holds: bucket upper bounds, cumulative counts per bound
// (the last bucket, +Inf, is `count`), the sum and the count.
struct HistogramSnapshot {
  std::vector<double> bounds;
  std::vector<uint64_t> cumulative;  // one per bound
  double sum = 0;
  uint64_t count = 0;
};

// One scrape's text. Samples of a family may be added in any order and are
// written together under its # HELP and # TYPE lines (the format wants a
// family's samples contiguous).
class MetricsText {
 public:
  // Declares a family; a second declaration of the same name is ignored
  // (no family is written twice). Counters' names end in _total.
  void Declare(const std::string& name, MetricType type,
               const std::string& help);
  // A counter's or gauge's sample. Adding to an undeclared family declares
  // it as a gauge without help (a programming error made visible, not a
  // crash).
  void Add(const std::string& name, const MetricLabels& labels, double value);
  // A histogram's samples: name_bucket{le=...} (cumulative, +Inf last),
  // name_sum and name_count.
  void AddHistogram(const std::string& name, const MetricLabels& labels,
                    const HistogramSnapshot& histogram);
  // The exposition text.
  std::string Render() const;

 private:
  struct Family {
    MetricType type = MetricType::kGauge;
    std::string help;
    std::vector<std::string> lines;
  };
  Family& Get(const std::string& name);

  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

// Escapes a label value (\\, \" and \n) for the text format.
std::string EscapeLabelValue(const std::string& value);
// A sample value: integers exactly, others with full precision, +Inf,
// -Inf and NaN as Prometheus spells them.
std::string FormatMetricValue(double value);

// Buckets for RPC latencies, in seconds: 0.5 ms to 60 s.
std::vector<double> RpcLatencyBuckets();

// Observations into fixed buckets. Thread-safe.
class Histogram {
 public:
  // `bounds` ascending (not checked beyond sorting them).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  HistogramSnapshot Snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bound, not
                                                       // cumulative
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Histograms by label values (e.g. method and status code), created on
// first use; at most `max_series` of them (observations of further label
// sets are dropped and counted in dropped(), so that a caller cannot grow
// the coordinator without bound). Thread-safe.
class HistogramFamily {
 public:
  HistogramFamily(std::vector<std::string> label_names,
                  std::vector<double> bounds, size_t max_series = 1000);
  // `label_values` in the order of the label names.
  void Observe(const std::vector<std::string>& label_values, double value);
  // Adds every series to `text` under `name` (declared by the caller).
  void AddTo(const std::string& name, MetricsText* text) const;
  // Every series' labels and histogram.
  std::vector<std::pair<MetricLabels, HistogramSnapshot>> Snapshot() const;
  uint64_t dropped() const;

 private:
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;
  const size_t max_series_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Histogram>> series_
      ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_cpu_seconds_total, process_start_time_seconds, process_open_fds
// and process_max_fds from /proc/self (families whose file cannot be read
// are left out).
void AddProcessMetrics(MetricsText* text);

// A stage's time split, summed from its trace events (TraceEvent.track
// "compute": forward, backward, optimizer steps; "comm": waits for
// activations, gradients and the data loader, all-reduces), and the span
// from its first event's start to its last event's end; idle is the rest.
struct StageTimeTotals {
  int64_t compute_us = 0;
  int64_t comm_us = 0;
  int64_t first_start_us = 0;  // 0: no event yet
  int64_t last_end_us = 0;
  // Adds one event (durations below zero count as zero).
  void AddEvent(const std::string& track, int64_t start_us,
                int64_t duration_us);
  double compute_seconds() const { return compute_us / 1e6; }
  double comm_seconds() const { return comm_us / 1e6; }
  double idle_seconds() const;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_METRICS_H_
