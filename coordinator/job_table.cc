#include "coordinator/job_table.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "coordinator/input_checks.h"
#include "coordinator/jobs/job_id.h"
#include "coordinator/jobs/pages.h"

namespace aqueduct {

namespace {

// ListJobs' pages: jobs by default and at most.
constexpr int kDefaultJobsPage = 100;
constexpr int kMaxJobsPage = 1000;

}  // namespace

JobTable::JobTable(std::string start_tag, uint64_t run)
    : start_tag_(std::move(start_tag)), run_(run) {}

absl::StatusOr<Job*> JobTable::Find(const std::string& job_id) {
  ASSIGN_OR_RETURN(const Job* job,
                   static_cast<const JobTable*>(this)->Find(job_id));
  return const_cast<Job*>(job);
}

absl::StatusOr<const Job*> JobTable::Find(const std::string& job_id) const {
  if (const Job* job = Get(job_id)) return job;
  // A unique prefix of an id (of at least 8 characters, beyond "job-").
  constexpr size_t kShortestPrefix = 8;
  if (job_id.size() < kShortestPrefix) return JobNotFound(job_id);
  std::vector<const Job*> matches;
  for (auto it = jobs_.lower_bound(job_id);
       it != jobs_.end() && it->first.compare(0, job_id.size(), job_id) == 0;
       ++it) {
    matches.push_back(&it->second);
    if (matches.size() > 3) break;
  }
  if (matches.empty()) return JobNotFound(job_id);
  if (matches.size() == 1) return matches[0];
  std::vector<std::string> ids;
  for (const Job* j : matches) ids.push_back(j->id);
  return absl::InvalidArgumentError(
      absl::StrCat("job id prefix ", Shown(job_id), " matches ",
                   matches.size() > 3 ? "more than 3 jobs" : "several jobs",
                   " (", absl::StrJoin(ids, ", "),
                   matches.size() > 3 ? ", ..." : "", "): give more of it"));
}

Job* JobTable::Get(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const Job* JobTable::Get(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::string> JobTable::Admit(const std::string& owner,
                                            const QueueLimits& limits) {
  int pending = admitting_;
  int owned = admitting_by_owner_[owner];
  for (const auto& [id, job] : jobs_) {
    if (job.state == v1::JOB_PENDING) ++pending;
    if (!IsFinal(job.state) && job.owner == owner) ++owned;
  }
  absl::Status admitted = AdmitJob(limits, pending, owned, owner);
  if (admitted.ok()) {
    absl::StatusOr<std::string> id = NewJobId(start_tag_, next_job_);
    if (id.ok()) {
      ++next_job_;
      ++admitting_;
      ++admitting_by_owner_[owner];
      return id;
    }
    admitted = absl::UnavailableError(id.status().message());
  }
  if (admitting_by_owner_[owner] == 0) admitting_by_owner_.erase(owner);
  return admitted;
}

void JobTable::EndAdmission(const std::string& owner) {
  --admitting_;
  if (--admitting_by_owner_[owner] <= 0) admitting_by_owner_.erase(owner);
}

Job& JobTable::Add(Job job) {
  // Ids of this start must not repeat a restored one (the random part
  // alone makes that unlikely; the numbers keep ids in order by eye).
  if (std::optional<int64_t> n = JobIdNumber(job.id, start_tag_)) {
    next_job_ = std::max(next_job_, *n + 1);
  }
  job.seq = next_seq_++;
  order_.push_back(job.id);
  const std::string id = job.id;
  return jobs_.emplace(id, std::move(job)).first->second;
}

std::vector<std::string> JobTable::TrimFinished(int max_finished) {
  int finished = 0;
  for (const auto& [id, job] : jobs_) {
    if (IsFinal(job.state)) ++finished;
  }
  std::vector<std::string> removed;
  auto it = order_.begin();
  while (finished > max_finished && it != order_.end()) {
    auto job = jobs_.find(*it);
    if (job != jobs_.end() && IsFinal(job->second.state)) {
      removed.push_back(*it);
      jobs_.erase(job);
      it = order_.erase(it);
      --finished;
    } else {
      ++it;
    }
  }
  return removed;
}

absl::StatusOr<JobPage> JobTable::Page(
    int64_t page_size, const std::string& page_token, size_t max_bytes,
    const std::function<JobStatus(const Job&)>& status_of) const {
  ASSIGN_OR_RETURN(const int max_jobs,
                   PageSize(page_size, kDefaultJobsPage, kMaxJobsPage,
                            "ListJobsRequest.page_size"));
  ASSIGN_OR_RETURN(
      const int64_t after,
      DecodePageToken(page_token, run_, "ListJobsRequest.page_token"));
  // order_ is in submission order, as are the jobs' seq.
  auto it = std::partition_point(
      order_.begin(), order_.end(),
      [&](const std::string& id) { return jobs_.at(id).seq <= after; });
  JobPage page;
  int64_t last = after;
  size_t bytes = 0;
  for (; it != order_.end() && static_cast<int>(page.jobs.size()) < max_jobs;
       ++it) {
    const Job& job = jobs_.at(*it);
    JobStatus status = status_of(job);
    bytes += status.ByteSizeLong();
    if (bytes > max_bytes && !page.jobs.empty()) break;
    page.jobs.push_back(std::move(status));
    last = job.seq;
  }
  if (it != order_.end()) page.next_page_token = EncodePageToken(run_, last);
  return page;
}

std::vector<v1::JournalRecord> JobTable::Compaction(
    const JournalIndex& index) const {
  std::vector<v1::JournalRecord> kept;
  for (const std::string& id : order_) {
    const Job& job = jobs_.at(id);
    auto sub = index.submitted.find(id);
    if (sub == index.submitted.end()) continue;
    v1::JournalRecord r;
    *r.mutable_submitted() = sub->second;
    kept.push_back(std::move(r));
    auto starts = index.started.find(id);
    if (!job.restored && starts != index.started.end()) {
      for (const v1::JobStarted& s : starts->second) {
        v1::JournalRecord started;
        *started.mutable_started() = s;
        kept.push_back(std::move(started));
      }
    }
    for (const auto& [version, m] : job.checkpoints) {
      v1::JournalRecord checkpoint;
      *checkpoint.mutable_checkpoint() = m;
      kept.push_back(std::move(checkpoint));
    }
    if (job.restored) {
      v1::JournalRecord fin;
      *fin.mutable_finished() = job.snapshot;
      kept.push_back(std::move(fin));
    }
  }
  return kept;
}

}  // namespace aqueduct
