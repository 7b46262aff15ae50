#include "coordinator/dashboard/dashboard.h"

#include <unistd.h>

#include <iterator>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/version.h"
#include "coordinator/dashboard/json.h"

namespace aqueduct {
namespace {

constexpr char kJson[] = "application/json; charset=utf-8";
// ListJobs pages read for /api/jobs at most (each up to 1000 jobs): more
// than the coordinator keeps (options.max_finished_jobs plus the queue).
constexpr int kMaxJobPages = 16;
// The longest job id accepted in a query (ids are ~40 bytes).
constexpr size_t kMaxIdBytes = 256;

bool HasEvents(const v1::GetTraceResponse& trace) {
  for (const v1::StageTrace& stage : trace.stages()) {
    if (stage.events_size() > 0) return true;
  }
  return false;
}

HttpResponse Json(std::string body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.content_type = kJson;
  r.body = std::move(body);
  return r;
}

HttpResponse Error(int status, const std::string& message) {
  return Json(ErrorJson(message), status);
}

// The HTTP status of a failed core call.
int HttpStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    default:
      return 500;
  }
}

// The job id in ?id=, or why not.
absl::StatusOr<std::string> JobIdParam(const HttpRequest& req) {
  auto it = req.params.find("id");
  if (it == req.params.end() || it->second.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.path, " needs the parameter id (a job id)"));
  }
  if (it->second.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter id is ", it->second.size(),
                     " bytes, more than the ", kMaxIdBytes, " allowed"));
  }
  return it->second;
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

// Every job the coordinator keeps, in submission order; `status` set when
// a page could not be read.
std::vector<JobStatus> AllJobs(const CoordinatorCore& core,
                               absl::Status* status) {
  std::vector<JobStatus> jobs;
  std::string token;
  for (int page = 0; page < kMaxJobPages; ++page) {
    absl::StatusOr<JobPage> p = core.ListJobs(1000, token);
    if (!p.ok()) {
      *status = p.status();
      break;
    }
    for (JobStatus& j : p->jobs) jobs.push_back(std::move(j));
    token = p->next_page_token;
    if (token.empty()) break;
  }
  return jobs;
}

// Timeline documents by (job, window), kept for kTimelineTtl: GetTrace
// reads every event the job has (from its trace file when the coordinator
// keeps them), so pages polling the same job share one read a period
// rather than one each.
class TimelineCache {
 public:
  static constexpr absl::Duration kTtl = absl::Milliseconds(500);
  static constexpr size_t kMaxEntries = 32;

  bool Get(const std::string& key, absl::Time now, std::string* body) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || now - it->second.first >= kTtl) return false;
    *body = it->second.second;
    return true;
  }
  void Put(const std::string& key, absl::Time now, const std::string& body) {
    absl::MutexLock lock(&mu_);
    if (entries_.size() >= kMaxEntries) {
      // Expired entries first; if none, all (a burst of distinct keys).
      for (auto it = entries_.begin(); it != entries_.end();) {
        it =
            now - it->second.first >= kTtl ? entries_.erase(it) : std::next(it);
      }
      if (entries_.size() >= kMaxEntries) entries_.clear();
    }
    entries_[key] = {now, body};
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::pair<absl::Time, std::string>> entries_
      ABSL_GUARDED_BY(mu_);
};

struct Dashboard {
  CoordinatorCore* core = nullptr;
  std::string grpc_address;
  ViewLimits limits;
  TimelineCache timelines;

  HttpResponse Info() const {
    JsonWriter j;
    j.BeginObject();
    j.Key("version").String(kVersion);
    // "host:0" names no port: the one chosen is in --port_file, not here.
    j.Key("grpc_address")
        .String(absl::EndsWith(grpc_address, ":0") ? "" : grpc_address);
    j.Key("host").String(HostName());
    j.Key("now_ms").Int(absl::ToUnixMillis(absl::Now()));
    j.EndObject();
    return Json(j.str());
  }

  HttpResponse Workers() const {
    return Json(WorkersJson(core->ListWorkers(), absl::Now(), limits));
  }

  HttpResponse Jobs() {
    absl::Status status;
    std::vector<JobStatus> jobs = AllJobs(*core, &status);
    if (!status.ok() && jobs.empty()) {
      return Error(HttpStatusOf(status), status.ToString());
    }
    return Json(JobsJson(jobs, absl::Now(), limits));
  }

  HttpResponse Job(const HttpRequest& req) {
    absl::StatusOr<std::string> id = JobIdParam(req);
    if (!id.ok()) return Error(400, std::string(id.status().message()));
    absl::StatusOr<JobStatus> job = core->GetJob(*id);
    if (!job.ok()) {
      return Error(HttpStatusOf(job.status()),
                   std::string(job.status().message()));
    }
    // Not planned yet (or a plan that never was): the page says so.
    absl::StatusOr<PartitionPlan> plan = core->GetPlan(*id);
    return Json(
        JobJson(*job, plan.ok() ? &*plan : nullptr, absl::Now(), limits));
  }

  HttpResponse Timeline(const HttpRequest& req) {
    absl::StatusOr<std::string> id = JobIdParam(req);
    if (!id.ok()) return Error(400, std::string(id.status().message()));
    ViewLimits window = limits;
    auto w = req.params.find("window_ms");
    if (w != req.params.end()) {
      int64_t ms = 0;
      if (!absl::SimpleAtoi(w->second, &ms) || ms < 100 || ms > 60000) {
        return Error(400, absl::StrCat("parameter window_ms=", w->second,
                                       " is not a number of milliseconds "
                                       "from 100 to 60000"));
      }
      window.timeline_window = absl::Milliseconds(ms);
    }
    const std::string key = absl::StrCat(
        absl::ToInt64Milliseconds(window.timeline_window), " ", *id);
    std::string body;
    if (timelines.Get(key, absl::Now(), &body)) return Json(std::move(body));
    // The live tail from memory; the job's whole trace (its file) only
    // when memory has none (a job that ended before a coordinator restart).
    absl::StatusOr<v1::GetTraceResponse> trace =
        core->GetTraceTail(*id, window.timeline_window);
    if (trace.ok() && !HasEvents(*trace)) trace = core->GetTrace(*id);
    if (!trace.ok()) {
      return Error(HttpStatusOf(trace.status()),
                   std::string(trace.status().message()));
    }
    body = TimelineJson(*id, *trace, window);
    timelines.Put(key, absl::Now(), body);
    return Json(std::move(body));
  }
};

}  // namespace

void AddDashboardRoutes(CoordinatorCore* core, HttpServer* server,
                        const std::string& grpc_address,
                        const ViewLimits& limits) {
  // Shared by the handlers, which the server keeps as long as it lives.
  auto d = std::make_shared<Dashboard>();
  d->core = core;
  d->grpc_address = grpc_address;
  d->limits = limits;
  server->Handle("/", [](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.body = kDashboardPage;
    return r;
  });
  server->Handle("/api/info", [d](const HttpRequest&) { return d->Info(); });
  server->Handle("/api/workers",
                 [d](const HttpRequest&) { return d->Workers(); });
  server->Handle("/api/jobs", [d](const HttpRequest&) { return d->Jobs(); });
  server->Handle("/api/job",
                 [d](const HttpRequest& req) { return d->Job(req); });
  server->Handle("/api/timeline",
                 [d](const HttpRequest& req) { return d->Timeline(req); });
}

}  // namespace aqueduct
