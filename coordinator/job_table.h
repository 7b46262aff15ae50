// The coordinator's job table (issue 22): its jobs by id and in submission
// order, the counters that draw new ids and admit submissions (the queue's
// limits, jobs/queue.h), the trimming of finished jobs and the pages of
// ListJobs. Like LevelDB's VersionSet under DBImpl's mutex, it holds no
// lock of its own.
//
// Thread-safety: not thread-safe; requires the core's mutex (the core holds
// it ABSL_GUARDED_BY that mutex, and so do the components that use it).
#ifndef AQUEDUCT_COORDINATOR_JOB_TABLE_H_
#define AQUEDUCT_COORDINATOR_JOB_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/jobs/job.h"
#include "coordinator/jobs/queue.h"
#include "coordinator/journal_restore.h"
#include "proto/service_types.h"

namespace aqueduct {

// A page of ListJobs: jobs in submission order, and the token of the next
// page ("" after the last).
struct JobPage {
  std::vector<JobStatus> jobs;
  std::string next_page_token;
};

class JobTable {
 public:
  using Map = std::map<std::string, Job>;

  // `start_tag`: this start's part of the ids drawn (jobs/job_id.h);
  // `run`: this run's tag in page tokens (jobs/pages.h).
  JobTable(std::string start_tag, uint64_t run);

  // The job of `job_id`, or of the one id it is a prefix of (8 characters
  // or more); NOT_FOUND naming it (quoted short) when there is none,
  // INVALID_ARGUMENT listing some when the prefix is not unique. The one
  // lookup for ids that callers give.
  absl::StatusOr<Job*> Find(const std::string& job_id);
  absl::StatusOr<const Job*> Find(const std::string& job_id) const;
  // The job of an id the coordinator holds (a task's, a worker's): null
  // when it is gone (trimmed) or was never here.
  Job* Get(const std::string& job_id);
  const Job* Get(const std::string& job_id) const;
  // The job of an id from order(): always there.
  Job& At(const std::string& job_id) { return jobs_.at(job_id); }
  const Job& At(const std::string& job_id) const { return jobs_.at(job_id); }
  bool Contains(const std::string& job_id) const {
    return jobs_.count(job_id) > 0;
  }

  // Ids in submission order; and the jobs by id (range-for).
  const std::vector<std::string>& order() const { return order_; }
  Map::iterator begin() { return jobs_.begin(); }
  Map::iterator end() { return jobs_.end(); }
  Map::const_iterator begin() const { return jobs_.begin(); }
  Map::const_iterator end() const { return jobs_.end(); }
  size_t size() const { return jobs_.size(); }

  // Admits a submission of `owner` within `limits` (counting the
  // admissions not added yet) and draws its id: RESOURCE_EXHAUSTED naming
  // the limit, UNAVAILABLE when no id can be drawn. The caller Add()s the
  // job or calls EndAdmission, then EndAdmission either way.
  absl::StatusOr<std::string> Admit(const std::string& owner,
                                    const QueueLimits& limits);
  void EndAdmission(const std::string& owner);

  // Adds `job` last in submission order (its seq is set here); ids drawn
  // later by this start follow any restored id of this start's tag.
  Job& Add(Job job);

  // Removes the oldest finished jobs beyond `max_finished`; their ids.
  std::vector<std::string> TrimFinished(int max_finished);

  // The page of ListJobs after `page_token`, `page_size` jobs at most
  // (jobs/pages.h's defaults) and about `max_bytes` of statuses (at least
  // one job): INVALID_ARGUMENT naming page_size or page_token.
  absl::StatusOr<JobPage> Page(
      int64_t page_size, const std::string& page_token, size_t max_bytes,
      const std::function<JobStatus(const Job&)>& status_of) const;

  // The journal's records for the jobs kept: each one's submission in
  // `index`, its attempts' starts (unless it finished), its committed
  // checkpoints, and its final status if it was restored finished.
  std::vector<v1::JournalRecord> Compaction(const JournalIndex& index) const;

 private:
  const std::string start_tag_;
  const uint64_t run_;
  Map jobs_;
  std::vector<std::string> order_;
  int64_t next_job_ = 1;
  // The next job's place in submission order (Job::seq).
  int64_t next_seq_ = 0;
  // Submissions admitted and not in the table yet (being journaled), in
  // all and by owner: the queue's limits count them.
  int admitting_ = 0;
  std::map<std::string, int> admitting_by_owner_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOB_TABLE_H_
