#include "common/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace aqueduct {
namespace {

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// HELP text escapes only backslashes and newlines.
std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string LabelText(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&out, i > 0 ? "," : "", labels[i].first, "=\"",
                    EscapeLabelValue(labels[i].second), "\"");
  }
  return out + "}";
}

// The whole of a small /proc file; empty if unreadable.
std::string ReadProcFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Seconds since the epoch at which the system booted (btime in /proc/stat);
// 0 if unknown.
int64_t BootTimeSeconds() {
  std::istringstream stat(ReadProcFile("/proc/stat"));
  std::string line;
  while (std::getline(stat, line)) {
    int64_t btime = 0;
    if (line.rfind("btime ", 0) == 0 &&
        absl::SimpleAtoi(line.substr(6), &btime)) {
      return btime;
    }
  }
  return 0;
}

// CPU seconds and start time from /proc/self/stat; the fields after the
// command (which may hold spaces) are counted from its closing ')'.
void AddStatMetrics(MetricsText* text) {
  const std::string stat = ReadProcFile("/proc/self/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return;
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(paren + 2), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state): utime is 14, stime 15, starttime 22,
  // vsize 23, rss 24 (pages).
  if (fields.size() < 22) return;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  int64_t utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
  if (!absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime) ||
      !absl::SimpleAtoi(fields[19], &start) ||
      !absl::SimpleAtoi(fields[20], &vsize) ||
      !absl::SimpleAtoi(fields[21], &rss) || ticks <= 0) {
    return;
  }
  text->Declare("process_cpu_seconds_total", MetricType::kCounter,
                "User and system CPU time of the process, seconds.");
  text->Add("process_cpu_seconds_total", {}, (utime + stime) / ticks);
  text->Declare("process_resident_memory_bytes", MetricType::kGauge,
                "Resident set size of the process, bytes.");
  text->Add("process_resident_memory_bytes", {},
            static_cast<double>(rss) * sysconf(_SC_PAGESIZE));
  text->Declare("process_virtual_memory_bytes", MetricType::kGauge,
                "Virtual memory size of the process, bytes.");
  text->Add("process_virtual_memory_bytes", {}, static_cast<double>(vsize));
  if (const int64_t boot = BootTimeSeconds(); boot > 0) {
    text->Declare("process_start_time_seconds", MetricType::kGauge,
                  "Start time of the process since the Unix epoch, seconds.");
    text->Add("process_start_time_seconds", {}, boot + start / ticks);
  }
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  // The shortest of %.15g..%.17g that reads back as the same double (0.1,
  // not 0.10000000000000001).
  char buffer[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

MetricsText::Family& MetricsText::Get(const std::string& name) {
  auto [it, added] = families_.try_emplace(name);
  if (added) order_.push_back(name);
  return it->second;
}

void MetricsText::Declare(const std::string& name, MetricType type,
                          const std::string& help) {
  if (families_.count(name) > 0) return;
  Family& family = Get(name);
  family.type = type;
  family.help = help;
}

void MetricsText::Add(const std::string& name, const MetricLabels& labels,
                      double value) {
  Get(name).lines.push_back(
      absl::StrCat(name, LabelText(labels), " ", FormatMetricValue(value)));
}

void MetricsText::AddHistogram(const std::string& name,
                               const MetricLabels& labels,
                               const HistogramSnapshot& h) {
  Family& family = Get(name);
  MetricLabels with_le = labels;
  with_le.emplace_back("le", "");
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    const bool inf = i == h.bounds.size();
    with_le.back().second = inf ? "+Inf" : FormatMetricValue(h.bounds[i]);
    family.lines.push_back(absl::StrCat(
        name, "_bucket", LabelText(with_le), " ",
        FormatMetricValue(
            static_cast<double>(inf ? h.count : h.cumulative[i]))));
  }
  family.lines.push_back(absl::StrCat(name, "_sum", LabelText(labels), " ",
                                      FormatMetricValue(h.sum)));
  family.lines.push_back(
      absl::StrCat(name, "_count", LabelText(labels), " ",
                   FormatMetricValue(static_cast<double>(h.count))));
}

std::string MetricsText::Render() const {
  std::string out;
  for (const std::string& name : order_) {
    const Family& family = families_.at(name);
    if (!family.help.empty()) {
      absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(family.help),
                      "\n");
    }
    absl::StrAppend(&out, "# TYPE ", name, " ", TypeName(family.type), "\n");
    for (const std::string& line : family.lines) {
      absl::StrAppend(&out, line, "\n");
    }
  }
  return out;
}

std::vector<double> RpcLatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_([&] {
        std::sort(bounds.begin(), bounds.end());
        return bounds;
      }()),
      counts_(bounds_.size(), 0) {}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  if (bucket < counts_.size()) ++counts_[bucket];
  sum_ += value;
  ++count_;
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

HistogramFamily::HistogramFamily(std::vector<std::string> label_names,
                                 std::vector<double> bounds, size_t max_series)
    : label_names_(std::move(label_names)),
      bounds_(std::move(bounds)),
      max_series_(max_series) {}

void HistogramFamily::Observe(const std::vector<std::string>& label_values,
                              double value) {
  Histogram* h = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = series_.find(label_values);
    if (it == series_.end()) {
      if (series_.size() >= max_series_) {
        ++dropped_;
        return;
      }
      it = series_.emplace(label_values, std::make_unique<Histogram>(bounds_))
               .first;
    }
    h = it->second.get();  // Series are never removed.
  }
  h->Observe(value);
}

std::vector<std::pair<MetricLabels, HistogramSnapshot>>
HistogramFamily::Snapshot() const {
  std::vector<std::pair<MetricLabels, HistogramSnapshot>> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [values, histogram] : series_) {
    MetricLabels labels;
    for (size_t i = 0; i < label_names_.size() && i < values.size(); ++i) {
      labels.emplace_back(label_names_[i], values[i]);
    }
    out.emplace_back(std::move(labels), histogram->Snapshot());
  }
  return out;
}

void HistogramFamily::AddTo(const std::string& name, MetricsText* text) const {
  for (const auto& [labels, histogram] : Snapshot()) {
    text->AddHistogram(name, labels, histogram);
  }
}

uint64_t HistogramFamily::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

void AddProcessMetrics(MetricsText* text) {
  AddStatMetrics(text);
  int open_fds = 0;
  if (DIR* dir = opendir("/proc/self/fd"); dir != nullptr) {
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++open_fds;
    }
    closedir(dir);
    text->Declare("process_open_fds", MetricType::kGauge,
                  "Open file descriptors of the process.");
    text->Add("process_open_fds", {}, open_fds);
  }
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    text->Declare("process_max_fds", MetricType::kGauge,
                  "Most open file descriptors the process may hold.");
    text->Add("process_max_fds", {}, static_cast<double>(limit.rlim_cur));
  }
}

void StageTimeTotals::AddEvent(const std::string& track, int64_t start_us,
                               int64_t duration_us) {
  duration_us = std::max<int64_t>(duration_us, 0);
  if (track == "compute") {
    compute_us += duration_us;
  } else if (track == "comm") {
    comm_us += duration_us;
  }
  if (first_start_us == 0 || start_us < first_start_us) {
    first_start_us = start_us;
  }
  last_end_us = std::max(last_end_us, start_us + duration_us);
}

double StageTimeTotals::idle_seconds() const {
  if (first_start_us == 0) return 0;
  const int64_t idle = (last_end_us - first_start_us) - compute_us - comm_us;
  return std::max<int64_t>(idle, 0) / 1e6;
}

}  // namespace aqueduct
