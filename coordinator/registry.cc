#include "coordinator/registry.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/version.h"
#include "coordinator/input_checks.h"

namespace aqueduct {

const char* WorkerStateName(WorkerState state) {
  switch (state) {
    case v1::WORKER_HEALTHY:
      return "HEALTHY";
    case v1::WORKER_SUSPECT:
      return "SUSPECT";
    case v1::WORKER_DEAD:
      return "DEAD";
    case v1::WORKER_LEFT:
      return "LEFT";
    case v1::WORKER_FENCED:
      return "FENCED";
    case v1::WORKER_UNREACHABLE:
      return "UNREACHABLE";
    default:
      return "UNKNOWN";
  }
}

namespace {

bool Final(WorkerState s) {
  return s == v1::WORKER_DEAD || s == v1::WORKER_LEFT || s == v1::WORKER_FENCED;
}

}  // namespace

absl::Status CheckWorkerInfo(const WorkerInfo& info) {
  absl::Status s = CheckWorkerName(info.worker_id(), info.incarnation());
  if (s.ok()) s = CheckAddress("info.address", info.address());
  const std::pair<const char*, const std::string*> texts[] = {
      {"info.version", &info.version()},
      {"info.proto_hash", &info.proto_hash()},
      {"info.host", &info.host()},
      {"info.device.kind", &info.device().kind()},
      {"info.device.name", &info.device().name()},
  };
  for (const auto& [field, value] : texts) {
    if (s.ok()) s = CheckText(field, *value, kMaxWorkerTextBytes);
  }
  if (s.ok()) {
    s = CheckInt("info.device.memory_bytes", info.device().memory_bytes(), 0,
                 std::numeric_limits<int64_t>::max());
  }
  if (s.ok()) {
    s = CheckFinite("info.device.gemm_gflops", info.device().gemm_gflops(), 0,
                    std::numeric_limits<double>::max());
  }
  return s;
}

absl::Status CheckWorkerName(const std::string& worker_id,
                             const std::string& incarnation) {
  absl::Status s = CheckName("worker_id", worker_id, kMaxWorkerIdBytes);
  if (s.ok()) s = CheckName("incarnation", incarnation, kMaxWorkerIdBytes);
  return s;
}

Registry::Registry(const RegistryOptions& options, const Clock* clock)
    : options_(options), clock_(clock) {}

absl::Duration Registry::StallThreshold() const {
  if (options_.stall_after > absl::ZeroDuration()) return options_.stall_after;
  return std::max(options_.dead_after / 2, absl::Seconds(1));
}

absl::Time Registry::Observe() const {
  const absl::Time now = clock_->Now();
  if (last_seen_ != absl::InfinitePast() &&
      now - last_seen_ > StallThreshold()) {
    // The coordinator itself did not run (stopped, swapped out, a VM
    // paused): no heartbeat could have reached it, so silence in that time
    // says nothing about the workers. Every lease starts afresh.
    grace_from_ = now;
    ++stalls_;
    AQ_LOG_WARN(
        "the coordinator did not run for {:.1f} s (more than {:.1f} s): "
        "every worker's lease starts afresh",
        absl::ToDoubleSeconds(now - last_seen_),
        absl::ToDoubleSeconds(StallThreshold()));
  }
  last_seen_ = std::max(last_seen_, now);
  return now;
}

WorkerState Registry::StateAt(const Entry& e, absl::Time now) const {
  const WorkerState current = e.status.state();
  if (Final(current)) return current;
  const absl::Duration silent = now - std::max(e.last_heartbeat, grace_from_);
  if (silent >= options_.dead_after) {
    return now < e.vouched_until ? v1::WORKER_UNREACHABLE : v1::WORKER_DEAD;
  }
  if (silent >= options_.heartbeat_interval * options_.suspect_after_missed) {
    return v1::WORKER_SUSPECT;
  }
  return v1::WORKER_HEALTHY;
}

absl::Status Registry::Register(const WorkerInfo& info,
                                std::vector<WorkerTransition>* transitions) {
  if (absl::Status s = CheckWorkerInfo(info); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterWorker: ", s.message()));
  }
  if (!options_.version.empty() &&
      MajorVersion(info.version()) != MajorVersion(options_.version)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", info.worker_id(), " runs version '", info.version(),
        "', incompatible with the coordinator's version ", options_.version,
        " (major versions differ)"));
  }
  if (workers_.count(info.worker_id()) == 0 &&
      workers_.size() >= static_cast<size_t>(options_.max_workers)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the coordinator has ", workers_.size(),
        " workers registered, the most it keeps (--max_workers=",
        options_.max_workers, "); DEAD and LEFT ones are forgotten after ",
        absl::FormatDuration(options_.forget_after)));
  }
  const absl::Time now = Observe();
  auto it = workers_.find(info.worker_id());
  if (it != workers_.end()) {
    Entry& e = it->second;
    if (e.status.info().incarnation() == info.incarnation()) {
      if (Final(e.status.state())) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker ", info.worker_id(), " incarnation ", info.incarnation(),
            " is ", WorkerStateName(e.status.state()),
            "; restart it to register a new incarnation"));
      }
      // Idempotent: refresh the lease and the details.
      *e.status.mutable_info() = info;
      e.last_heartbeat = now;
      e.status.set_last_heartbeat_ms(absl::ToUnixMillis(clock_->WallNow()));
      e.status.set_state(v1::WORKER_HEALTHY);
      return absl::OkStatus();
    }
    // A new incarnation fences the old one.
    if (!Final(e.status.state()) && transitions != nullptr) {
      transitions->push_back({info.worker_id(), e.status.info().incarnation(),
                              e.status.state(), v1::WORKER_FENCED,
                              e.status.job_id(),
                              // Not naming it: job statuses show this.
                              "superseded by a new incarnation"});
    }
    workers_.erase(it);
  }
  Entry e;
  *e.status.mutable_info() = info;
  e.status.set_state(v1::WORKER_HEALTHY);
  e.status.set_registered_at_ms(absl::ToUnixMillis(clock_->WallNow()));
  e.status.set_last_heartbeat_ms(absl::ToUnixMillis(clock_->WallNow()));
  e.status.set_stage(-1);
  e.status.set_replica(-1);
  e.last_heartbeat = now;
  e.order = next_order_++;
  workers_.emplace(info.worker_id(), std::move(e));
  return absl::OkStatus();
}

absl::Status Registry::CheckIncarnation(const Entry& e,
                                        const std::string& worker_id,
                                        const std::string& incarnation) const {
  if (e.status.info().incarnation() != incarnation) {
    // Not naming the live incarnation: it is what a worker's calls prove
    // themselves with.
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " incarnation ", incarnation,
                     " is not the registered one: a newer incarnation has "
                     "fenced it"));
  }
  const WorkerState state = StateAt(e, Observe());
  if (Final(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " incarnation ", incarnation, " is ",
                     WorkerStateName(state), "; register again"));
  }
  return absl::OkStatus();
}

absl::Status Registry::Heartbeat(const std::string& worker_id,
                                 const std::string& incarnation,
                                 WorkerState* before) {
  RETURN_IF_ERROR(CheckWorkerName(worker_id, incarnation));
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, " is not registered"));
  }
  Entry& e = it->second;
  // An expired lease stays to be reported by Tick (which fails its job).
  if (absl::Status s = CheckIncarnation(e, worker_id, incarnation); !s.ok()) {
    return s;
  }
  const absl::Time now = Observe();
  if (before != nullptr) *before = e.status.state();
  e.last_heartbeat = now;
  e.status.set_last_heartbeat_ms(absl::ToUnixMillis(clock_->WallNow()));
  e.status.set_state(v1::WORKER_HEALTHY);
  return absl::OkStatus();
}

absl::Status Registry::CheckLive(const std::string& worker_id,
                                 const std::string& incarnation) const {
  RETURN_IF_ERROR(CheckWorkerName(worker_id, incarnation));
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, " is not registered"));
  }
  return CheckIncarnation(it->second, worker_id, incarnation);
}

absl::Status Registry::Deregister(const std::string& worker_id,
                                  const std::string& incarnation,
                                  std::vector<WorkerTransition>* transitions) {
  RETURN_IF_ERROR(CheckWorkerName(worker_id, incarnation));
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, " is not registered"));
  }
  Entry& e = it->second;
  if (absl::Status s = CheckIncarnation(e, worker_id, incarnation); !s.ok()) {
    return s;
  }
  if (transitions != nullptr) {
    transitions->push_back({worker_id, incarnation, e.status.state(),
                            v1::WORKER_LEFT, e.status.job_id(),
                            "deregistered"});
  }
  e.status.set_state(v1::WORKER_LEFT);
  e.final_since = Observe();
  return absl::OkStatus();
}

std::vector<WorkerTransition> Registry::Tick() {
  std::vector<WorkerTransition> changes;
  const absl::Time now = Observe();
  for (auto& [id, e] : workers_) {
    const WorkerState before = e.status.state();
    const WorkerState after = StateAt(e, now);
    if (after == before) continue;
    e.status.set_state(after);
    if (Final(after)) e.final_since = now;
    std::string detail = absl::StrFormat(
        "no heartbeat for %.1f s",
        absl::ToDoubleSeconds(now - std::max(e.last_heartbeat, grace_from_)));
    if (after == v1::WORKER_UNREACHABLE) {
      absl::StrAppend(&detail, ", but its job keeps committing steps");
    } else if (after == v1::WORKER_DEAD && e.vouched_until > e.last_heartbeat) {
      // Its job vouched for it while it was silent, then stopped.
      absl::StrAppendFormat(
          &detail, ", and its job has committed no step for %.1f s",
          absl::ToDoubleSeconds(now - e.vouched_until + options_.dead_after));
    }
    changes.push_back({id, e.status.info().incarnation(), before, after,
                       e.status.job_id(), std::move(detail)});
  }
  return changes;
}

std::vector<WorkerStatus> Registry::ForgetFinal() {
  std::vector<WorkerStatus> forgotten;
  const absl::Time now = Observe();
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (now - it->second.final_since >= options_.forget_after) {
      forgotten.push_back(std::move(it->second.status));
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  return forgotten;
}

std::vector<WorkerTransition> Registry::MarkDead(const std::string& worker_id,
                                                 const std::string& detail) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || Final(it->second.status.state())) return {};
  Entry& e = it->second;
  const WorkerState before = e.status.state();
  e.status.set_state(v1::WORKER_DEAD);
  e.final_since = Observe();
  return {{worker_id, e.status.info().incarnation(), before, v1::WORKER_DEAD,
           e.status.job_id(), detail}};
}

void Registry::Vouch(const std::string& worker_id, absl::Time until) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  it->second.vouched_until = std::max(it->second.vouched_until, until);
}

std::vector<std::string> Registry::IdleHealthyWorkers() const {
  std::vector<std::pair<int64_t, std::string>> idle;
  const absl::Time now = Observe();
  for (const auto& [id, e] : workers_) {
    if (StateAt(e, now) == v1::WORKER_HEALTHY && e.status.job_id().empty()) {
      idle.emplace_back(e.order, id);
    }
  }
  std::sort(idle.begin(), idle.end());
  std::vector<std::string> ids;
  for (auto& [order, id] : idle) ids.push_back(std::move(id));
  return ids;
}

void Registry::Assign(const std::string& worker_id, const std::string& job_id,
                      int stage, int replica) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  it->second.status.set_job_id(job_id);
  it->second.status.set_stage(stage);
  it->second.status.set_replica(replica);
}

void Registry::Release(const std::string& worker_id,
                       const std::string& job_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.status.job_id() != job_id) return;
  it->second.status.clear_job_id();
  it->second.vouched_until = absl::InfinitePast();
  it->second.status.set_stage(-1);
  it->second.status.set_replica(-1);
}

std::vector<WorkerStatus> Registry::List() const {
  // Registration order, without copying entries twice.
  std::vector<const Entry*> entries;
  entries.reserve(workers_.size());
  for (const auto& [id, e] : workers_) entries.push_back(&e);
  std::sort(entries.begin(), entries.end(),
            [](const Entry* a, const Entry* b) { return a->order < b->order; });
  const absl::Time now = Observe();
  std::vector<WorkerStatus> out(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    out[i] = StatusAt(*entries[i], now);
  }
  return out;
}

std::vector<WorkerStatus> Registry::ListPage(const std::string& after,
                                             size_t max_count, size_t max_bytes,
                                             bool* more) const {
  const absl::Time now = Observe();
  std::vector<WorkerStatus> out;
  size_t bytes = 0;
  auto it = after.empty() ? workers_.begin() : workers_.upper_bound(after);
  for (; it != workers_.end() && out.size() < max_count; ++it) {
    WorkerStatus s = StatusAt(it->second, now);
    // A repeated field's element costs its size and a few bytes of tag and
    // length.
    const size_t size = s.ByteSizeLong() + 8;
    if (!out.empty() && bytes + size > max_bytes) break;
    bytes += size;
    out.push_back(std::move(s));
  }
  *more = it != workers_.end();
  return out;
}

WorkerStatus Registry::StatusAt(const Entry& e, absl::Time now) const {
  WorkerStatus s = e.status;
  s.set_state(StateAt(e, now));
  return s;
}

absl::StatusOr<WorkerStatus> Registry::Get(const std::string& worker_id) const {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, " is not registered"));
  }
  return StatusAt(it->second, Observe());
}

}  // namespace aqueduct
