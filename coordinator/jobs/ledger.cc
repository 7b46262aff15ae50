#include "coordinator/jobs/ledger.h"

#include <algorithm>
#include <cmath>

namespace aqueduct {

namespace {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * v.size())) - 1;
  return v[std::min(i, v.size() - 1)];
}

void MaxMemory(const v1::StageProgress& m, v1::StageStatus* stage) {
  stage->set_peak_rss_bytes(
      std::max(stage->peak_rss_bytes(), m.peak_rss_bytes()));
  stage->set_stashed_weight_bytes(
      std::max(stage->stashed_weight_bytes(), m.stashed_weight_bytes()));
  stage->set_stashed_activation_bytes(std::max(
      stage->stashed_activation_bytes(), m.stashed_activation_bytes()));
  stage->set_peak_stashed_versions(
      std::max(stage->peak_stashed_versions(), m.peak_stashed_versions()));
  stage->set_peak_in_flight(
      std::max(stage->peak_in_flight(), m.peak_in_flight()));
  stage->set_optimizer_state_bytes(
      std::max(stage->optimizer_state_bytes(), m.optimizer_state_bytes()));
  auto* total = stage->mutable_staleness_histogram();
  for (int s = 0; s < m.staleness_histogram_size(); ++s) {
    if (s == total->size()) total->Add(0);
    total->Set(s, total->Get(s) + m.staleness_histogram(s));
  }
}

}  // namespace

void JobLedger::Apply(const std::string& worker_id, const v1::StageProgress& p,
                      absl::Time now) {
  ApplyCounters(replicas_[{p.stage(), p.replica()}], p, now);
  ApplyLosses(p);
  ApplyTrace(worker_id, p);
}

void JobLedger::Rollback(int64_t version) {
  for (auto& [key, r] : replicas_) {
    r.committed_version = std::min(r.committed_version, version);
    r.minibatches_done = std::min(r.minibatches_done, version);
    r.in_flight.clear();
    r.first_report = absl::InfinitePast();
    r.step_ms.clear();
    // The next attempt's runs count from zero.
    r.bytes_sent_before += r.bytes_sent;
    r.bytes_received_before += r.bytes_received;
    r.bytes_sent = r.bytes_received = 0;
  }
  finished_.clear();
  loss_shares_.clear();
  lost_.clear();
  loss_curve_.erase(std::remove_if(loss_curve_.begin(), loss_curve_.end(),
                                   [version](const v1::LossPoint& p) {
                                     return p.minibatch() >= version;
                                   }),
                    loss_curve_.end());
  loss_ = loss_curve_.empty() ? 0 : loss_curve_.back().loss();
  evals_.erase(evals_.upper_bound(version), evals_.end());
}

void JobLedger::ApplyCounters(Replica& l, const v1::StageProgress& p,
                              absl::Time now) {
  l.committed_version = std::max(l.committed_version, p.committed_version());
  l.in_flight.assign(p.in_flight().begin(), p.in_flight().end());
  // The throughput window opens at the first report of a step (a run's
  // first reports may come before any, e.g. while it loads its data).
  // The worker's time of the report when it says (reports kept while the
  // coordinator was unreachable arrive together).
  if (p.reported_ms() > 0) now = absl::FromUnixMillis(p.reported_ms());
  if (l.first_report == absl::InfinitePast() && p.minibatches_done() > 0) {
    l.first_report = now;
    l.first_done = p.minibatches_done();
  }
  l.minibatches_done = std::max(l.minibatches_done, p.minibatches_done());
  l.last_report = now;
  for (double ms : p.step_ms()) {
    l.step_ms.push_back(ms);
    if (l.step_ms.size() > kStepWindow) l.step_ms.pop_front();
  }
  l.utilization = p.utilization();
  // Counts so far, not increments: summing them counted a stage's bytes
  // once per report that repeated them (twice on the output stage, whose
  // last report after its evaluation repeats its training's count).
  l.bytes_sent = std::max(l.bytes_sent, p.bytes_sent());
  l.bytes_received = std::max(l.bytes_received, p.bytes_received());
  if (p.peak_rss_bytes() > 0) {
    l.memory.set_peak_rss_bytes(p.peak_rss_bytes());
    l.memory.set_stashed_weight_bytes(p.stashed_weight_bytes());
    l.memory.set_stashed_activation_bytes(p.stashed_activation_bytes());
    l.memory.set_peak_stashed_versions(p.peak_stashed_versions());
    l.memory.set_peak_in_flight(p.peak_in_flight());
    l.memory.set_optimizer_state_bytes(p.optimizer_state_bytes());
    *l.memory.mutable_staleness_histogram() = p.staleness_histogram();
  }
}

void JobLedger::ApplyLosses(const v1::StageProgress& p) {
  for (const v1::EvalPoint& e : p.evals()) evals_[e.step()] = e;
  // Losses come from the output stage alone.
  if (p.losses_size() > 0 && p.reported_ms() > 0) {
    AddThroughputPoint(p.reported_ms(), p.minibatches_done());
  }
  for (v1::LossPoint point : p.losses()) {
    if (point.samples() > 0 && point.samples() < batch_size_) {
      share_samples_[{p.stage(), p.replica()}] = point.samples();
      LossShare& share = loss_shares_[point.minibatch()];
      share.stage = p.stage();
      share.sum += point.loss() * point.samples();
      share.samples += point.samples();
      share.replicas.insert(p.replica());
      if (!Complete(share)) continue;
      point.set_loss(share.sum / share.samples);
      point.set_samples(share.samples);
      loss_shares_.erase(point.minibatch());
    }
    AddLossPoint(point);
  }
}

bool JobLedger::Complete(const LossShare& share) const {
  int64_t missing = 0;  // The lost replicas' shares it will never get.
  for (const auto& [key, samples] : lost_) {
    if (key.first == share.stage && share.replicas.count(key.second) == 0) {
      missing += samples;
    }
  }
  return share.samples + missing >= batch_size_;
}

void JobLedger::LoseReplica(int stage, int replica, int64_t samples) {
  auto known = share_samples_.find({stage, replica});
  lost_[{stage, replica}] =
      known != share_samples_.end() ? known->second : samples;
  // The minibatches that waited for its share only are whole now, in
  // order.
  for (auto it = loss_shares_.begin(); it != loss_shares_.end();) {
    if (!Complete(it->second)) {
      ++it;
      continue;
    }
    v1::LossPoint point;
    point.set_minibatch(it->first);
    point.set_loss(it->second.sum / it->second.samples);
    point.set_samples(it->second.samples);
    AddLossPoint(point);
    it = loss_shares_.erase(it);
  }
}

void JobLedger::AddLossPoint(const v1::LossPoint& point) {
  loss_ = point.loss();
  if (point.minibatch() % loss_stride_ == 0) loss_curve_.push_back(point);
  if (loss_curve_.size() <= kMaxLossPoints) return;
  // Halve the resolution: keep every other point.
  loss_stride_ *= 2;
  std::vector<v1::LossPoint> kept;
  for (const v1::LossPoint& q : loss_curve_) {
    if (q.minibatch() % loss_stride_ == 0) kept.push_back(q);
  }
  loss_curve_ = std::move(kept);
}

void JobLedger::AddThroughputPoint(int64_t time_ms, int64_t step) {
  if (!throughput_.empty() &&
      time_ms - throughput_.back().time_ms() < throughput_gap_ms_) {
    return;
  }
  v1::ThroughputPoint& point = throughput_.emplace_back();
  point.set_time_ms(time_ms);
  point.set_step(step);
  if (throughput_.size() <= kMaxThroughputPoints) return;
  // Halve the resolution: every other point, twice the gap.
  throughput_gap_ms_ *= 2;
  std::vector<v1::ThroughputPoint> kept;
  for (size_t i = 0; i < throughput_.size(); i += 2) {
    kept.push_back(throughput_[i]);
  }
  throughput_ = std::move(kept);
}

void JobLedger::ApplyTrace(const std::string& worker_id,
                           const v1::StageProgress& p) {
  v1::StageTrace& trace = trace_[{p.stage(), p.replica()}];
  trace.set_worker_id(worker_id);
  trace.set_stage(p.stage());
  trace.set_replica(p.replica());
  for (const v1::TraceEvent& e : p.events()) {
    if (trace_events_ >= kMaxTraceEvents) DropOldestTraceEvents();
    *trace.add_events() = e;
    ++trace_events_;
  }
}

void JobLedger::DropOldestTraceEvents() {
  v1::StageTrace* longest = nullptr;
  for (auto& [key, trace] : trace_) {
    if (longest == nullptr || trace.events_size() > longest->events_size()) {
      longest = &trace;
    }
  }
  if (longest == nullptr || longest->events_size() == 0) return;
  const int n = std::max(1, longest->events_size() / 4);
  longest->mutable_events()->DeleteSubrange(0, n);
  trace_events_ -= n;
  trace_dropped_ += n;
}

size_t JobLedger::MarkFinished(const v1::StageProgress& p, bool output_stage) {
  // Once: the final figures are those of the first finished report.
  if (!finished_.emplace(std::make_pair(p.stage(), p.replica()), true).second) {
    return finished_.size();
  }
  if (output_stage && (p.test_accuracy() != 0 || p.test_loss() != 0)) {
    test_accuracy_ = p.test_accuracy();
    test_loss_ = p.test_loss();
  }
  return finished_.size();
}

double JobLedger::AddReplica(const Replica& l, v1::StageStatus* stage,
                             std::vector<double>* step_ms) const {
  stage->set_committed_version(
      std::max(stage->committed_version(), l.committed_version));
  for (const v1::InFlight& f : l.in_flight) *stage->add_in_flight() = f;
  // Every replica steps on every minibatch: the stage's count is theirs.
  stage->set_minibatches_done(
      std::max(stage->minibatches_done(), l.minibatches_done));
  step_ms->insert(step_ms->end(), l.step_ms.begin(), l.step_ms.end());
  stage->set_bytes_sent(stage->bytes_sent() + l.bytes_sent_before +
                        l.bytes_sent);
  stage->set_bytes_received(stage->bytes_received() + l.bytes_received_before +
                            l.bytes_received);
  MaxMemory(l.memory, stage);
  const double span = absl::ToDoubleSeconds(l.last_report - l.first_report);
  return span > 0 ? (l.minibatches_done - l.first_done) * batch_size_ / span
                  : 0;
}

void JobLedger::FillThroughput(v1::JobStatus* s) const {
  for (size_t i = 0; i < throughput_.size(); ++i) {
    v1::ThroughputPoint* point = s->add_throughput();
    *point = throughput_[i];
    if (i == 0) continue;
    const v1::ThroughputPoint& before = throughput_[i - 1];
    const int64_t steps = point->step() - before.step();
    const double seconds = (point->time_ms() - before.time_ms()) / 1e3;
    if (steps > 0 && seconds > 0) {
      point->set_samples_per_second(steps * batch_size_ / seconds);
    }
  }
}

void JobLedger::FillStatus(
    const std::vector<std::vector<std::string>>& stage_workers,
    const std::function<v1::WorkerState(const std::string&)>& state_of,
    v1::JobStatus* s) const {
  s->set_loss(loss_);
  *s->mutable_loss_curve() = {loss_curve_.begin(), loss_curve_.end()};
  s->set_test_accuracy(test_accuracy_);
  s->set_test_loss(test_loss_);
  for (const auto& [step, e] : evals_) *s->add_evals() = e;
  FillThroughput(s);
  const int stages = static_cast<int>(stage_workers.size());
  for (int st = 0; st < stages; ++st) {
    v1::StageStatus* stage = s->add_stages();
    stage->set_stage(st);
    std::vector<double> step_ms;
    double rate = 0, utilization = 0;
    int reporting = 0;
    for (size_t r = 0; r < stage_workers[st].size(); ++r) {
      stage->add_workers(stage_workers[st][r]);
      stage->add_worker_states(state_of(stage_workers[st][r]));
      auto it = replicas_.find({st, static_cast<int>(r)});
      if (it == replicas_.end()) continue;
      ++reporting;
      rate = std::max(rate, AddReplica(it->second, stage, &step_ms));
      utilization += it->second.utilization;
    }
    stage->set_samples_per_second(rate);
    stage->set_utilization(reporting > 0 ? utilization / reporting : 0);
    stage->set_step_ms_p50(Percentile(step_ms, 0.50));
    stage->set_step_ms_p90(Percentile(step_ms, 0.90));
    stage->set_step_ms_p99(Percentile(step_ms, 0.99));
    if (st == stages - 1) {
      s->set_samples_per_second(rate);
      s->set_step(stage->minibatches_done());
    }
  }
}

v1::GetTraceResponse JobLedger::TraceTail(int64_t window_us) const {
  // The latest end among each replica's newest events (they arrive in
  // about time order, a report at a time).
  int64_t end_us = 0;
  for (const auto& [key, trace] : trace_) {
    for (int i = std::max(0, trace.events_size() - 1000);
         i < trace.events_size(); ++i) {
      const v1::TraceEvent& e = trace.events(i);
      end_us = std::max(end_us, e.start_us() + e.duration_us());
    }
  }
  v1::GetTraceResponse response;
  for (const auto& [key, trace] : trace_) {
    v1::StageTrace* tail = response.add_stages();
    tail->set_worker_id(trace.worker_id());
    tail->set_stage(trace.stage());
    tail->set_replica(trace.replica());
    // Events arrive in about time order: stop at the first that ended
    // before the window (a few reports' worth of slack).
    int first = trace.events_size();
    int behind = 0;
    while (first > 0 && behind < 1000) {
      const v1::TraceEvent& e = trace.events(first - 1);
      behind =
          e.start_us() + e.duration_us() < end_us - window_us ? behind + 1 : 0;
      --first;
    }
    for (int i = first; i < trace.events_size(); ++i) {
      const v1::TraceEvent& e = trace.events(i);
      if (e.start_us() + e.duration_us() >= end_us - window_us) {
        *tail->add_events() = e;
      }
    }
  }
  response.set_dropped(trace_dropped_);
  return response;
}

v1::GetTraceResponse JobLedger::Trace() const {
  v1::GetTraceResponse response;
  for (const auto& [key, trace] : trace_) *response.add_stages() = trace;
  response.set_dropped(trace_dropped_);
  return response;
}

}  // namespace aqueduct
