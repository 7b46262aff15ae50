#include "coordinator/driver.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/planner/memory_fit.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/profile_graph.h"
#include "coordinator/planning.h"
#include "coordinator/speeds.h"
#include "coordinator/topology.h"
#include "pipeline/failure.h"
#include "pipeline/ir/action.h"
#include "pipeline/policy.h"

namespace aqueduct {

namespace {

bool MeasuresTopology(const JobSpec& spec) {
  auto policy = ResolvePipeline(spec);
  return policy.ok() && policy->topology == v1::TOPOLOGY_MEASURED;
}

// Whether `refusal` says the worker still ends an earlier attempt of this
// very job (FAILURE_BUSY_WITH_EARLIER_ATTEMPT, worker/runtime/
// stage_runtime.cc: the restart's stop is in flight, or interrupts a wait
// on a peer), so that it will be free in a moment.
bool BusyWithAnEarlierAttempt(const absl::Status& refusal,
                              const std::string& job_id) {
  const v1::StageFailure f = FailureOf(refusal);
  return f.cause() == v1::FAILURE_BUSY_WITH_EARLIER_ATTEMPT &&
         f.job_id() == job_id;
}

// Assigns `a` through `client`. A refusal as busy with an earlier attempt
// of the job is not the new attempt's failure (it would burn a restart and
// hide why the job restarted): asked again with backoff until `patience`
// has passed since the first call, then the refusal is returned.
absl::Status AssignUnlessStillBusy(WorkerClient& client,
                                   const StageAssignment& a,
                                   absl::Duration rpc_timeout,
                                   absl::Duration patience) {
  const absl::Time deadline = MonotonicNow() + patience;
  absl::Duration backoff = absl::Milliseconds(100);
  int refusals = 0;
  while (true) {
    const absl::Status s = client.AssignStage(a, rpc_timeout);
    if (!BusyWithAnEarlierAttempt(s, a.job_id()) ||
        MonotonicNow() + backoff > deadline) {
      if (s.ok() && refusals > 0) {
        AQ_LOG_INFO("job {}: stage {} assigned after {} busy refusal(s)",
                    a.job_id(), a.stage(), refusals);
      }
      return s;
    }
    ++refusals;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

// Puts element order[r] of `v` at r.
template <typename T>
void Reorder(std::vector<T>& v, const std::vector<int>& order) {
  std::vector<T> out;
  out.reserve(order.size());
  for (int i : order) out.push_back(std::move(v[i]));
  v = std::move(out);
}

// The reserved workers' speeds (coordinator/speeds.h) from their probes;
// empty when they are equally fast, or of more than one kind (the plan is
// then made on the slowest kind's profile, as for equal workers).
std::vector<double> SpeedsOf(const JobSpec& spec,
                             const std::vector<v1::DeviceInfo>& devices) {
  std::vector<double> probes;
  for (const v1::DeviceInfo& d : devices) {
    if (ProfileCache::KeyOf(spec, d) != ProfileCache::KeyOf(spec, devices[0])) {
      return {};
    }
    probes.push_back(d.gemm_gflops());
  }
  return RelativeSpeeds(probes);
}

std::string DescribeSpeeds(const std::vector<std::string>& workers,
                           const std::vector<double>& speeds) {
  std::vector<std::string> out;
  for (size_t i = 0; i < workers.size() && i < speeds.size(); ++i) {
    out.push_back(absl::StrFormat("%s %.2f", workers[i], speeds[i]));
  }
  return absl::StrJoin(out, ", ");
}

}  // namespace

JobDriver::JobDriver(const CoordinatorOptions& options, absl::Mutex& mu,
                     Registry& registry, JobTable& jobs, JobEvents& events,
                     const WorkerClientFactory& worker_clients,
                     JournalAccessor journal, BoundedExecutor& executor)
    : options_(options),
      mu_(mu),
      registry_(registry),
      jobs_(jobs),
      events_(events),
      worker_clients_(worker_clients),
      journal_(std::move(journal)),
      executor_(executor) {}

Job* JobDriver::PlanningLocked(const std::string& job_id, int attempt) {
  Job* job = jobs_.Get(job_id);
  if (events_.ShuttingDown() || job == nullptr ||
      job->state != v1::JOB_PLANNING || job->attempt != attempt) {
    return nullptr;
  }
  return job;
}

void JobDriver::Fail(const std::string& job_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (Job* job = jobs_.Get(job_id)) {
    events_.Transition(*job, JobEvent::kFailed, reason);
  }
}

void JobDriver::Restart(const std::string& job_id, int attempt,
                        const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (Job* job = PlanningLocked(job_id, attempt)) events_.Probe(*job, reason);
}

bool JobDriver::ReadInput(const std::string& job_id, Input* in) {
  absl::MutexLock lock(&mu_);
  const Job* job = jobs_.Get(job_id);
  if (events_.ShuttingDown() || job == nullptr ||
      job->state != v1::JOB_PLANNING) {
    return false;
  }
  in->attempt = job->attempt;
  in->ready_plans = job->ready_plans;
  if (const v1::CheckpointManifest* restore = RestorePoint(*job)) {
    in->restore = *restore;
  }
  in->spec = job->spec;
  in->has_profile = job->has_profile;
  in->profile = job->profile;
  in->reserved = job->reserved;
  for (const std::string& w : in->reserved) {
    auto status = registry_.Get(w);
    in->addresses.push_back(status.ok() ? status->info().address() : "");
    in->memory_bytes.push_back(
        status.ok() ? status->info().device().memory_bytes() : 0);
    in->link_probe_ports.push_back(
        status.ok() ? status->info().link_probe_port() : 0);
    HostShare share;
    v1::DeviceInfo device;
    if (status.ok()) {
      device = status->info().device();
      share = {status->info().host(), device.threads(), device.host_cores()};
    }
    in->shares.push_back(share);
    in->devices.push_back(device);
  }
  in->speeds = SpeedsOf(in->spec, in->devices);
  return true;
}

void JobDriver::ReorderWorkers(const std::vector<int>& order, Input& in) {
  Reorder(in.reserved, order);
  Reorder(in.addresses, order);
  Reorder(in.memory_bytes, order);
  Reorder(in.link_probe_ports, order);
  Reorder(in.shares, order);
  Reorder(in.devices, order);
  if (!in.speeds.empty()) Reorder(in.speeds, order);
}

// Each kind of device among the reserved workers profiles the model once
// (or the cache gives its earlier profile), and the plan takes each
// layer's slowest figure: a stage runs as fast as its slowest worker.
absl::Status JobDriver::Profile(Input& in) {
  // Key -> its first worker (its fastest when speeds differ: the plan
  // takes the profile as the fastest worker's).
  std::map<std::string, size_t> kinds;
  for (size_t i = 0; i < in.reserved.size(); ++i) {
    auto [it, added] =
        kinds.emplace(ProfileCache::KeyOf(in.spec, in.devices[i]), i);
    if (!added && !in.speeds.empty() && in.speeds[i] > in.speeds[it->second]) {
      it->second = i;
    }
  }
  std::optional<ModelProfile> slowest;
  for (const auto& [key, i] : kinds) {
    ASSIGN_OR_RETURN(ModelProfile profile, ProfileOn(in, i));
    slowest = slowest ? SlowestOf(*slowest, profile) : std::move(profile);
  }
  if (kinds.size() > 1) {
    AQ_LOG_INFO("planning on the slowest of {} kinds of worker's profiles",
                kinds.size());
  }
  if (slowest) in.profile = *std::move(slowest);
  return absl::OkStatus();
}

absl::StatusOr<ModelProfile> JobDriver::ProfileOn(const Input& in, size_t i) {
  const std::string key = ProfileCache::KeyOf(in.spec, in.devices[i]);
  if (options_.reuse_profiles) {
    if (std::optional<ModelProfile> known = profiles_.Find(key)) {
      AQ_LOG_INFO(
          "using the profile measured for an earlier job of this model on "
          "a {}",
          in.devices[i].name());
      return *std::move(known);
    }
  }
  auto measured = worker_clients_(in.addresses[i])
                      ->Profile(in.spec, options_.profile_timeout);
  if (!measured.ok()) {
    return absl::Status(
        measured.status().code(),
        absl::StrCat("profiling the model on worker ", in.reserved[i],
                     " failed: ", measured.status().message()));
  }
  profiles_.Put(key, *measured);
  return measured;
}

absl::StatusOr<PartitionPlan> JobDriver::ProfileAndPlan(Input& in) {
  if (!in.has_profile) RETURN_IF_ERROR(Profile(in));
  const int workers = static_cast<int>(in.reserved.size());
  // Plans made ahead are flat: a measured plan is made for the links of the
  // workers it runs on.
  if (workers > 1 && MeasuresTopology(in.spec)) return PlanOnMeasuredLinks(in);
  if (!in.speeds.empty()) {
    // Fastest first: a stage's replicas are then of like speed.
    ReorderWorkers(FastestFirst(in.speeds), in);
    AQ_LOG_INFO("workers of unequal speed (relative to the fastest): {}",
                DescribeSpeeds(in.reserved, in.speeds));
  }
  // Plans made ahead are for equally fast workers.
  auto ready =
      in.speeds.empty() ? in.ready_plans.find(workers) : in.ready_plans.end();
  if (ready != in.ready_plans.end()) {
    AQ_LOG_INFO("using the plan made ahead for {} worker(s)", workers);
    return ready->second;
  }
  int64_t smallest = 0;
  for (int64_t bytes : in.memory_bytes) {
    if (bytes > 0 && (smallest == 0 || bytes < smallest)) smallest = bytes;
  }
  return PlanOn(in.spec, in.profile, workers, {}, smallest,
                StepLatencyOf(in.shares), in.speeds);
}

absl::StatusOr<PartitionPlan> JobDriver::PlanFor(const JobSpec& spec,
                                                 const ModelProfile& profile,
                                                 int workers,
                                                 int64_t worker_memory,
                                                 double step_latency_s) {
  return PlanOn(spec, profile, workers, {}, worker_memory, step_latency_s);
}

absl::StatusOr<PartitionPlan> JobDriver::PlanOnMeasuredLinks(Input& in) {
  const int n = static_cast<int>(in.reserved.size());
  std::vector<SurveyWorker> survey;
  std::vector<std::string> hosts;
  for (int i = 0; i < n; ++i) {
    survey.push_back({in.reserved[i], in.addresses[i], in.link_probe_ports[i]});
    hosts.push_back(HostOfAddress(in.addresses[i]));
  }
  const absl::Time start = MonotonicNow();
  auto links = SurveyLinks(survey, worker_clients_);
  const double seconds = absl::ToDoubleSeconds(MonotonicNow() - start);
  absl::StatusOr<WorkerTopology> topology =
      links.ok() ? GroupWorkers(*links, hosts) : links.status();
  if (!topology.ok()) {
    // The job still runs, planned as "flat" would plan it; the plan says
    // why (aq plan JOB).
    AQ_LOG_WARN("measuring the links of {} worker(s) failed, planning flat: {}",
                n, topology.status().ToString());
    if (!in.speeds.empty()) ReorderWorkers(FastestFirst(in.speeds), in);
    auto plan = PlanOn(in.spec, in.profile, n, {}, 0, StepLatencyOf(in.shares),
                       in.speeds);
    if (plan.ok()) {
      plan->mutable_topology()->set_kind("flat");
      plan->mutable_topology()->set_probe_seconds(seconds);
      plan->mutable_topology()->set_note(absl::StrCat(
          "measuring the links failed: ", topology.status().message()));
    }
    return plan;
  }
  const v1::PlanTopology described =
      DescribeTopology(*topology, in.reserved, *links, seconds);
  // Plan rank r runs on reserved worker r (RecordPlan): group by group,
  // fastest first within a group when speeds differ.
  ReorderWorkers(topology->order, in);
  v1::PlanTopology shown = described;
  if (!in.speeds.empty()) {
    std::vector<int> sizes;
    for (const v1::WorkerGroup& group : shown.groups()) {
      sizes.push_back(group.worker_ids_size());
    }
    ReorderWorkers(FastestFirst(in.speeds, sizes), in);
    for (v1::WorkerGroup& group : *shown.mutable_groups()) {
      for (int k = 0; k < group.worker_ids_size(); ++k) {
        group.set_worker_ids(k, in.reserved[group.first_rank() + k]);
      }
    }
  }
  AQ_LOG_INFO("measured the links of {} worker(s) in {:.2f} s: {} group(s)", n,
              seconds, topology->groups.size());
  auto plan = PlanOn(in.spec, in.profile, n, topology->levels, 0,
                     StepLatencyOf(in.shares), in.speeds);
  if (plan.ok()) *plan->mutable_topology() = shown;
  return plan;
}

void JobDriver::PlanAhead(const std::string& job_id, const Input& in) {
  // A measured plan is made when the job restarts, for its new workers.
  if (MeasuresTopology(in.spec)) return;
  std::map<int, PartitionPlan> plans;
  for (int n = static_cast<int>(in.reserved.size()) - 1; n >= 1; --n) {
    if (in.ready_plans.count(n) > 0) continue;
    auto plan = PlanFor(in.spec, in.profile, n, 0, StepLatencyOf(in.shares));
    if (plan.ok()) plans.emplace(n, *std::move(plan));
  }
  absl::MutexLock lock(&mu_);
  if (Job* job = jobs_.Get(job_id)) job->ready_plans.merge(plans);
}

bool JobDriver::RecordPlan(const std::string& job_id, const Input& in,
                           const PartitionPlan& plan,
                           Assignments* assignments) {
  absl::MutexLock lock(&mu_);
  Job* planning = PlanningLocked(job_id, in.attempt);
  if (planning == nullptr) return false;
  Job& job = *planning;
  job.plan = plan;
  job.has_plan = true;
  // Restarts re-plan from the same measurements.
  job.profile = in.profile;
  job.has_profile = true;
  job.stage_workers.assign(plan.stages_size(), {});
  std::vector<v1::StagePeers> peers(plan.stages_size());
  std::vector<bool> used(in.reserved.size(), false);
  for (int st = 0; st < plan.stages_size(); ++st) {
    for (int rank : plan.stages(st).worker_ranks()) {
      job.stage_workers[st].push_back(in.reserved[rank]);
      peers[st].add_worker_ids(in.reserved[rank]);
      peers[st].add_addresses(in.addresses[rank]);
      used[rank] = true;
    }
  }
  // One assignment per worker, of the first stage it holds (a worker with
  // several chunks finds the others in the plan).
  std::vector<bool> assigned(in.reserved.size(), false);
  for (int st = 0; st < plan.stages_size(); ++st) {
    for (int r = 0; r < plan.stages(st).worker_ranks_size(); ++r) {
      const int rank = plan.stages(st).worker_ranks(r);
      if (assigned[rank]) continue;
      assigned[rank] = true;
      registry_.Assign(in.reserved[rank], job_id, st, r);
      StageAssignment a;
      a.set_job_id(job_id);
      *a.mutable_spec() = in.spec;
      *a.mutable_plan() = plan;
      a.set_stage(st);
      a.set_replica(r);
      *a.mutable_peers() = {peers.begin(), peers.end()};
      a.set_rendezvous_key(
          absl::StrCat("jobs/", job_id, "/a", in.attempt, "/"));
      a.set_rank(rank);
      a.set_world_size(plan.workers_used());
      a.set_attempt(in.attempt);
      if (in.restore.version() > 0) *a.mutable_restore() = in.restore;
      assignments->emplace_back(in.addresses[rank], std::move(a));
    }
  }
  // Workers the plan leaves idle go back to the pool.
  job.reserved.clear();
  for (size_t i = 0; i < in.reserved.size(); ++i) {
    if (used[i]) {
      job.reserved.push_back(in.reserved[i]);
    } else {
      registry_.Release(in.reserved[i], job_id);
    }
  }
  ++job.version;
  return true;
}

absl::Status JobDriver::AssignAndStart(const std::string& job_id, int attempt,
                                       const Assignments& assignments) {
  for (const auto& [address, a] : assignments) {
    const absl::Status s = AssignUnlessStillBusy(*worker_clients_(address), a,
                                                 options_.worker_rpc_timeout,
                                                 options_.worker_rpc_timeout);
    if (!s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("assigning stage ", a.stage(), " replica ", a.replica(),
                       " to worker at ", address, " failed: ", s.message()));
    }
  }
  for (const auto& [address, a] : assignments) {
    {
      absl::MutexLock lock(&mu_);
      if (PlanningLocked(job_id, attempt) == nullptr) return absl::OkStatus();
    }
    const absl::Status s =
        worker_clients_(address)->StartJob(job_id, options_.worker_rpc_timeout);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("starting the job on worker at ", address,
                                 " failed: ", s.message()));
    }
  }
  return absl::OkStatus();
}

void JobDriver::Drive(const std::string& job_id) {
  Input in;
  if (!ReadInput(job_id, &in)) return;
  auto plan = ProfileAndPlan(in);
  if (!plan.ok()) return Fail(job_id, std::string(plan.status().message()));
  // A plan its workers cannot hold fails here, naming the stage, rather
  // than on a worker that cannot allocate it.
  if (absl::Status fits = CheckPlanFits(*plan, in.memory_bytes, in.reserved);
      !fits.ok()) {
    return Fail(job_id, std::string(fits.message()));
  }
  Assignments assignments;
  if (!RecordPlan(job_id, in, *plan, &assignments)) return;
  if (absl::Status s = AssignAndStart(job_id, in.attempt, assignments);
      !s.ok()) {
    return Restart(job_id, in.attempt, std::string(s.message()));
  }
  MarkRunning(job_id, in);
}

void JobDriver::MarkRunning(const std::string& job_id, const Input& in) {
  {
    absl::MutexLock lock(&mu_);
    Job* job = PlanningLocked(job_id, in.attempt);
    if (job == nullptr || !events_.Transition(*job, JobEvent::kStarted, "")) {
      return;
    }
    AQ_LOG_INFO("job {} attempt {} running on {} stage(s) from version {}",
                job_id, in.attempt, job->plan.stages_size(),
                in.restore.version());
    if (!job->restarts.empty()) {
      job->restarts.back().set_workers(job->plan.workers_used());
    }
    if (const std::shared_ptr<JobJournal> journal = journal_()) {
      journal->AppendAsync(StartRecord(*job));
    }
  }
  // The plans a restart onto fewer workers needs, made while the job
  // trains (milliseconds each), so that recovery does not wait for them.
  if (absl::Status s =
          executor_.Submit([this, job_id, in] { PlanAhead(job_id, in); });
      !s.ok()) {
    AQ_LOG_DEBUG("job {}: {}", job_id, s.ToString());
  }
}

}  // namespace aqueduct
