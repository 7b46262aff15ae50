#include "coordinator/handler.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/status.h"
#include "common/version.h"
#include "coordinator/core.h"
#include "coordinator/input_checks.h"
#include "coordinator/kv_store.h"
#include "coordinator/model_store.h"
#include "coordinator/progress_checks.h"

namespace aqueduct {

namespace {

// ListWorkers' pages: workers by default and at most, and bytes at most
// (under gRPC's default 4 MiB receive limit, whatever the client).
constexpr int kDefaultWorkersPage = 500;
constexpr int kMaxWorkersPage = 5000;
constexpr size_t kMaxWorkersPageBytes = size_t{3} << 20;
// A workers' page token: "w:<last worker id>" in web-safe base64.
constexpr char kWorkersTokenPrefix[] = "w:";

std::string WorkersPageToken(const std::string& last_id) {
  return absl::WebSafeBase64Escape(absl::StrCat(kWorkersTokenPrefix, last_id));
}

// The worker id a token names ("" for the first page).
absl::StatusOr<std::string> WorkerAfter(const std::string& token) {
  if (token.empty()) return std::string();
  std::string decoded;
  absl::string_view id;
  if (token.size() <= 4 * kMaxWorkerIdBytes &&
      absl::WebSafeBase64Unescape(token, &decoded) &&
      absl::StartsWith(decoded, kWorkersTokenPrefix)) {
    id = absl::string_view(decoded).substr(sizeof(kWorkersTokenPrefix) - 1);
    if (CheckName("", id, kMaxWorkerIdBytes).ok()) return std::string(id);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("ListWorkersRequest.page_token=", Quoted(token),
                   " is not a token this coordinator gave"));
}

// Calls that wait hold a gRPC server thread each: at most `limit` at once,
// and at most half of them (at least one) for one group: the store waits
// of one job ("job <id>"), watches ("watches") or log follows ("log
// follows"). So one job's workers cannot refuse every other job's
// rendezvous, nor users' watches. And at most a quarter (at least one) for
// one caller (issue 22, item 10: one user's 64 watches and log follows
// refused every other user's `aq submit --wait`); an anonymous caller ("",
// authentication off) has no share of its own: everyone is anonymous then.
class WaitingCalls {
 public:
  explicit WaitingCalls(int limit)
      : limit_(limit),
        group_limit_(std::max(1, limit / 2)),
        caller_limit_(std::max(1, limit / 4)) {}
  // OK and a slot held until Leave(group, caller), or RESOURCE_EXHAUSTED.
  absl::Status Enter(const std::string& group, const std::string& caller) {
    absl::MutexLock lock(&mu_);
    if (held_ >= limit_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("too many waiting calls (limit ", limit_,
                       ", --max_waiting_calls); try again later"));
    }
    int& mine = groups_[group];
    if (mine >= group_limit_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many waiting calls of ", group, " (limit ", group_limit_,
          ", half of --max_waiting_calls); try again later"));
    }
    if (!caller.empty() && callers_[caller] >= caller_limit_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("too many waiting calls of caller ", Shown(caller),
                       " (limit ", caller_limit_,
                       ", a quarter of --max_waiting_calls); try again "
                       "later"));
    }
    ++mine;
    if (!caller.empty()) ++callers_[caller];
    ++held_;
    return absl::OkStatus();
  }
  void Leave(const std::string& group, const std::string& caller) {
    absl::MutexLock lock(&mu_);
    --held_;
    Release(groups_, group);
    if (!caller.empty()) Release(callers_, caller);
  }

 private:
  static void Release(std::map<std::string, int>& counts,
                      const std::string& key) {
    auto it = counts.find(key);
    if (it != counts.end() && --it->second == 0) counts.erase(it);
  }

  const int limit_;
  const int group_limit_;
  const int caller_limit_;
  absl::Mutex mu_;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> groups_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> callers_ ABSL_GUARDED_BY(mu_);
};

// A worker's error becomes its job's reason, shown in every status and
// written to the coordinator's log and the job's: its control characters
// are escaped as those of its log lines are (the core keeps 4 KB of it).
constexpr size_t kMaxEscapedErrorBytes = 16 << 10;

void EscapeWorkerText(StageProgress* p) {
  EscapeLogLines(p);
  if (FindControl(p->error(), /*allow_tab=*/true) != absl::string_view::npos) {
    p->set_error(EscapeControls(p->error(), kMaxEscapedErrorBytes));
  }
}

// "JOB_RUNNING" -> "RUNNING".
std::string StateName(v1::JobState state) {
  return v1::JobState_Name(state).substr(4);
}

// INVALID_ARGUMENT unless `chunk` belongs to the upload `first` began.
absl::Status SameUpload(const v1::UploadModelChunk& first,
                        const v1::UploadModelChunk& chunk) {
  if (chunk.job_id() == first.job_id() &&
      chunk.worker_id() == first.worker_id() &&
      chunk.incarnation() == first.incarnation() &&
      chunk.attempt() == first.attempt() &&
      chunk.total_bytes() == first.total_bytes() &&
      chunk.crc32() == first.crc32()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model upload of job ", first.job_id(), ": the chunk at offset ",
      chunk.offset(),
      " does not carry the first chunk's job, worker, incarnation, attempt, "
      "size and CRC-32"));
}

class CoreHandler final : public CoordinatorHandler {
 public:
  CoreHandler(CoordinatorCore* core, ModelStore* models)
      : core_(core),
        models_(models),
        waiting_(core->options().max_waiting_calls) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override {
    if (absl::Status s = core_->RegisterWorker(
            request.info(),
            request.has_running() ? &request.running() : nullptr);
        !s.ok()) {
      return s;
    }
    const RegistryOptions& r = core_->options().registry;
    v1::RegisterWorkerResponse response;
    response.set_heartbeat_interval_ms(
        absl::ToInt64Milliseconds(r.heartbeat_interval));
    response.set_lease_ms(absl::ToInt64Milliseconds(r.dead_after));
    response.set_coordinator_version(kVersion);
    return response;
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    ASSIGN_OR_RETURN(
        CoordinatorCore::HeartbeatReply reply,
        core_->Heartbeat(request.worker_id(), request.incarnation(),
                         request.job_id(), request.attempt()));
    v1::HeartbeatResponse response;
    response.set_checkpoint_at(reply.checkpoint_at);
    for (std::string& j : reply.stop_jobs) {
      response.add_stop_jobs(std::move(j));
    }
    return response;
  }

  absl::StatusOr<v1::DeregisterWorkerResponse> DeregisterWorker(
      const v1::DeregisterWorkerRequest& request) override {
    absl::Status s =
        core_->DeregisterWorker(request.worker_id(), request.incarnation());
    if (!s.ok()) return s;
    return v1::DeregisterWorkerResponse();
  }

  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request) override {
    std::vector<StageProgress> stages(request.stages().begin(),
                                      request.stages().end());
    for (StageProgress& p : stages) EscapeWorkerText(&p);
    absl::Status s = core_->ReportProgress(request.worker_id(),
                                           request.incarnation(), stages);
    if (!s.ok()) return s;
    return v1::ReportProgressResponse();
  }

  absl::StatusOr<v1::SubmitJobResponse> SubmitJob(
      const v1::SubmitJobRequest& request) override {
    // The spec's and profile's strings are checked by the core
    // (jobs/field_limits.h); `resume` is quoted in its errors.
    if (FindControl(request.resume(), /*allow_tab=*/false) !=
        absl::string_view::npos) {
      return CheckText("resume", request.resume(),
                       std::numeric_limits<size_t>::max());
    }
    // request.owner is the caller's credential's name: the gRPC adapter
    // sets it, overwriting what the client sent.
    auto id = core_->SubmitJob(
        request.spec(), request.has_profile() ? &request.profile() : nullptr,
        request.resume(), request.owner(), request.owner_role());
    if (!id.ok()) return id.status();
    v1::SubmitJobResponse response;
    response.set_job_id(*id);
    return response;
  }

  absl::StatusOr<v1::JobStatus> GetJob(
      const v1::GetJobRequest& request) override {
    return core_->GetJob(request.job_id());
  }

  absl::StatusOr<v1::ListJobsResponse> ListJobs(
      const v1::ListJobsRequest& request) override {
    ASSIGN_OR_RETURN(JobPage page, core_->ListJobs(request.page_size(),
                                                   request.page_token()));
    v1::ListJobsResponse response;
    response.mutable_jobs()->Reserve(static_cast<int>(page.jobs.size()));
    for (JobStatus& j : page.jobs) response.add_jobs()->Swap(&j);
    response.set_next_page_token(std::move(page.next_page_token));
    return response;
  }

  absl::Status WatchJob(
      const std::string& caller, const v1::WatchJobRequest& request,
      absl::Time deadline, const std::function<bool()>& cancelled,
      const std::function<bool(const v1::JobStatus&)>& write) override;

  absl::StatusOr<v1::CancelJobResponse> CancelJob(
      const v1::CancelJobRequest& request) override {
    auto state = core_->CancelJob(request.job_id());
    if (!state.ok()) return state.status();
    v1::CancelJobResponse response;
    response.set_state(*state);
    return response;
  }

  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) override;

  absl::StatusOr<v1::PartitionPlan> GetPlan(
      const v1::GetPlanRequest& request) override {
    return core_->GetPlan(request.job_id());
  }

  absl::StatusOr<v1::GetTraceResponse> GetTrace(
      const v1::GetTraceRequest& request) override {
    return core_->GetTrace(request.job_id());
  }

  absl::Status StreamLogs(
      const std::string& caller, const v1::StreamLogsRequest& request,
      absl::Time deadline, const std::function<bool()>& cancelled,
      const std::function<bool(const v1::LogLine&)>& write) override;

  absl::StatusOr<v1::StoreSetResponse> StoreSet(
      const v1::StoreSetRequest& request) override {
    RETURN_IF_ERROR(core_->StoreSet(request.key(), request.value()));
    return v1::StoreSetResponse();
  }

  absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& request, absl::Time deadline) override;

  absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& request) override {
    ASSIGN_OR_RETURN(const int64_t value,
                     core_->StoreAdd(request.key(), request.delta()));
    v1::StoreAddResponse response;
    response.set_value(value);
    return response;
  }

  absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(
      const v1::ListCheckpointsRequest& request) override {
    ASSIGN_OR_RETURN(std::vector<v1::CheckpointManifest> checkpoints,
                     core_->ListCheckpoints(request.job_id()));
    v1::ListCheckpointsResponse response;
    for (v1::CheckpointManifest& m : checkpoints) {
      response.add_checkpoints()->Swap(&m);
    }
    return response;
  }

  absl::Status GetModel(
      const v1::GetModelRequest& request,
      const std::function<bool()>& cancelled,
      const std::function<bool(const v1::ModelChunk&)>& write) override;

  absl::StatusOr<v1::UploadModelResponse> UploadModel(
      const std::function<bool(v1::UploadModelChunk*)>& read) override;

 private:
  absl::Status NeedModels() const {
    if (models_ != nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError(
        "this coordinator keeps no trained models");
  }
  // Writes the upload that begins with `first` (the rest comes from
  // `read`) to the store and commits it.
  absl::StatusOr<StoredModel> Receive(
      v1::UploadModelChunk& first,
      const std::function<bool(v1::UploadModelChunk*)>& read);

  CoordinatorCore* core_;
  ModelStore* models_;
  WaitingCalls waiting_;
};

absl::StatusOr<v1::ListWorkersResponse> CoreHandler::ListWorkers(
    const v1::ListWorkersRequest& request) {
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ListWorkersRequest.page_size=", request.page_size(),
                     " must not be negative"));
  }
  const int size = request.page_size() == 0
                       ? kDefaultWorkersPage
                       : std::min(request.page_size(), kMaxWorkersPage);
  ASSIGN_OR_RETURN(const std::string after, WorkerAfter(request.page_token()));
  bool more = false;
  std::vector<WorkerStatus> workers =
      core_->ListWorkersPage(after, size, kMaxWorkersPageBytes, &more);
  v1::ListWorkersResponse response;
  response.mutable_workers()->Reserve(static_cast<int>(workers.size()));
  for (WorkerStatus& w : workers) {
    // A worker's incarnation proves its calls; nobody else is shown it.
    w.mutable_info()->clear_incarnation();
    response.add_workers()->Swap(&w);
  }
  if (more && response.workers_size() > 0) {
    response.set_next_page_token(WorkersPageToken(
        response.workers(response.workers_size() - 1).info().worker_id()));
  }
  return response;
}

absl::StatusOr<v1::StoreGetResponse> CoreHandler::StoreGet(
    const v1::StoreGetRequest& request, absl::Time deadline) {
  if (request.wait_ms() < 0) {
    return absl::InvalidArgumentError("StoreGet.wait_ms must not be negative");
  }
  v1::StoreGetResponse response;
  // A key already there (or a call that does not wait) takes no slot.
  absl::StatusOr<std::string> value =
      core_->StoreGet(request.key(), absl::InfinitePast());
  if (!value.ok() && absl::IsDeadlineExceeded(value.status()) &&
      request.wait_ms() > 0) {
    // StoreGet refused malformed keys above; the fallback is not reached.
    absl::StatusOr<StoreKey> key = KvStore::ParseKey(request.key());
    const std::string group =
        absl::StrCat("job ", key.ok() ? key->job_id : request.key());
    // Workers' waits are bounded per job, not per caller.
    RETURN_IF_ERROR(waiting_.Enter(group, ""));
    absl::Cleanup leave = [this, &group] { waiting_.Leave(group, ""); };
    const absl::Time now = MonotonicNow();
    const absl::Time until =
        std::min({deadline, now + core_->options().max_store_wait,
                  now + absl::Milliseconds(request.wait_ms())});
    value = core_->StoreGet(request.key(), until);
  }
  if (!value.ok()) return value.status();
  response.set_value(*std::move(value));
  return response;
}

absl::Status CoreHandler::WatchJob(
    const std::string& caller, const v1::WatchJobRequest& request,
    absl::Time deadline, const std::function<bool()>& cancelled,
    const std::function<bool(const v1::JobStatus&)>& write) {
  static const std::string kWatches = "watches";
  RETURN_IF_ERROR(waiting_.Enter(kWatches, caller));
  absl::Cleanup leave = [this, &caller] { waiting_.Leave(kWatches, caller); };
  const double rate =
      request.max_rate_hz() > 0 ? std::min(request.max_rate_hz(), 50.0) : 4.0;
  const absl::Duration min_gap = absl::Seconds(1.0 / rate);
  int64_t seen = -1;
  while (!cancelled()) {
    // Wake at least every second to notice a client that went away.
    const absl::Time wake =
        std::min(deadline, MonotonicNow() + absl::Seconds(1));
    auto update = core_->WaitForJob(request.job_id(), seen, wake);
    if (!update.ok()) return update.status();
    if (update->second != seen) {
      seen = update->second;
      if (!write(update->first)) return absl::OkStatus();
      if (IsFinal(update->first.state())) return absl::OkStatus();
      absl::SleepFor(min_gap);
    }
    if (deadline <= MonotonicNow()) {
      return absl::DeadlineExceededError("watch deadline reached");
    }
  }
  return absl::CancelledError("the client went away");
}

absl::Status CoreHandler::StreamLogs(
    const std::string& caller, const v1::StreamLogsRequest& request,
    absl::Time deadline, const std::function<bool()>& cancelled,
    const std::function<bool(const v1::LogLine&)>& write) {
  static const std::string kFollows = "log follows";
  constexpr size_t kBatch = 1000;
  // The whole id (the request may give a unique prefix of it): the log
  // store knows jobs by their ids.
  ASSIGN_OR_RETURN(const JobStatus status, core_->GetJob(request.job_id()));
  const std::string& job = status.job_id();
  std::optional<int> stage;
  if (request.has_stage()) stage = request.stage();
  bool waiting = false;
  absl::Cleanup leave = [&] {
    if (waiting) waiting_.Leave(kFollows, caller);
  };
  int64_t seen = std::max<int64_t>(0, request.since_seq());
  while (!cancelled()) {
    // Final before the read: the final state's own line is in the log by
    // then (written under the same lock), so an empty read after it means
    // the log is drained.
    ASSIGN_OR_RETURN(const bool final, core_->JobIsFinal(job));
    const std::vector<v1::LogLine> lines =
        core_->logs()->Read(job, seen, stage, kBatch, &seen);
    for (const v1::LogLine& line : lines) {
      if (!write(line)) return absl::OkStatus();
    }
    if (!lines.empty()) continue;
    if (!request.follow() || final) return absl::OkStatus();
    if (!waiting) {
      RETURN_IF_ERROR(waiting_.Enter(kFollows, caller));
      waiting = true;
    }
    if (deadline <= MonotonicNow()) {
      return absl::DeadlineExceededError("log follow deadline reached");
    }
    // Wake at least every second to notice the job's end and a client
    // that went away.
    core_->logs()->WaitForLines(
        job, seen, std::min(deadline, MonotonicNow() + absl::Seconds(1)));
  }
  return absl::CancelledError("the client went away");
}

absl::Status CoreHandler::GetModel(
    const v1::GetModelRequest& request, const std::function<bool()>& cancelled,
    const std::function<bool(const v1::ModelChunk&)>& write) {
  RETURN_IF_ERROR(NeedModels());
  ASSIGN_OR_RETURN(JobStatus job, core_->GetJob(request.job_id()));
  if (job.model_path().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " has no trained model (it is ",
                     StateName(job.state()), ")"));
  }
  return models_->Read(job.model_path(), cancelled, write);
}

absl::StatusOr<v1::UploadModelResponse> CoreHandler::UploadModel(
    const std::function<bool(v1::UploadModelChunk*)>& read) {
  RETURN_IF_ERROR(NeedModels());
  v1::UploadModelChunk first;
  if (!read(&first)) {
    return absl::InvalidArgumentError("model upload without a chunk");
  }
  RETURN_IF_ERROR(core_->CheckModelUpload(
      first.worker_id(), first.incarnation(), first.job_id(), first.attempt()));
  ASSIGN_OR_RETURN(StoredModel model, Receive(first, read));
  RETURN_IF_ERROR(core_->RecordModel(first.job_id(), model.path, model.bytes));
  v1::UploadModelResponse response;
  response.set_path(model.path);
  return response;
}

absl::StatusOr<StoredModel> CoreHandler::Receive(
    v1::UploadModelChunk& first,
    const std::function<bool(v1::UploadModelChunk*)>& read) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<ModelUpload> upload,
      models_->BeginUpload(first.job_id(), first.total_bytes(), first.crc32()));
  RETURN_IF_ERROR(upload->Append(first.offset(), first.data()));
  first.clear_data();
  v1::UploadModelChunk chunk;
  while (read(&chunk)) {
    RETURN_IF_ERROR(SameUpload(first, chunk));
    RETURN_IF_ERROR(upload->Append(chunk.offset(), chunk.data()));
  }
  return upload->Commit();
}

}  // namespace

std::unique_ptr<CoordinatorHandler> NewCoordinatorHandler(CoordinatorCore* core,
                                                          ModelStore* models) {
  return std::make_unique<CoreHandler>(core, models);
}

}  // namespace aqueduct
