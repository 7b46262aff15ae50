#include "coordinator/journal_keeper.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "pipeline/spec.h"

namespace aqueduct {

namespace {

constexpr absl::Duration kRetryEvery = absl::Seconds(5);

// Reads the journal at `path`; when damaged, copies it aside and fails the
// jobs that lost a record (none comes back PENDING or RUNNING: it may have
// finished since).
absl::StatusOr<JournalContents> ReadJournal(const std::string& path,
                                            absl::Time now) {
  ASSIGN_OR_RETURN(JournalContents contents, JobJournal::Read(path));
  if (contents.damaged.empty()) return contents;
  const std::string copy =
      absl::StrCat(path, ".corrupt-", absl::ToUnixSeconds(now));
  std::error_code ec;
  std::filesystem::copy_file(path, copy, ec);
  const LostJobs lost = FailJobsWithLostRecords(&contents, ec ? path : copy);
  AQ_LOG_ERROR("journal {}: {} (the file as it was is kept as {}{})", path,
               DescribeDamage(contents, lost), copy,
               ec ? absl::StrCat(": copy failed: ", ec.message()) : "");
  return contents;
}

}  // namespace

JournalKeeper::JournalKeeper(const Clock* clock, absl::Mutex& mu,
                             JobTable& jobs, JobEvents& events)
    : clock_(clock), mu_(mu), jobs_(jobs), events_(events) {}

std::shared_ptr<JobJournal> JournalKeeper::Journal() const {
  absl::MutexLock lock(&journal_mu_);
  return journal_;
}

void JournalKeeper::SetJournal(std::shared_ptr<JobJournal> journal) {
  absl::MutexLock lock(&journal_mu_);
  journal_ = std::move(journal);
}

absl::Status JournalKeeper::AppendSubmission(const Job& job) {
  const std::shared_ptr<JobJournal> journal = Journal();
  if (journal == nullptr) return absl::OkStatus();
  if (absl::Status s = journal->Append(SubmissionRecord(job)); !s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the job was not accepted: cannot record it: ", s.message()));
  }
  return absl::OkStatus();
}

std::string JournalKeeper::ErrorLocked() const {
  mu_.AssertHeld();
  return error_;
}

bool JournalKeeper::RetryDueLocked(absl::Time now) const {
  mu_.AssertHeld();
  return !error_.empty() && now >= retry_at_;
}

void JournalKeeper::AppendFinishedLocked(const Job& job) {
  mu_.AssertHeld();
  if (const std::shared_ptr<JobJournal> journal = Journal()) {
    v1::JournalRecord record;
    *record.mutable_finished() = events_.StatusOf(job);
    journal->AppendAsync(std::move(record));
  }
}

void JournalKeeper::RestoreLocked(JournalIndex& index, int* adopted,
                                  int* requeued) {
  const absl::Time now = clock_->Now();
  for (const RestoreStep& step : PlanRestore(index)) {
    const std::string& id = step.job_id;
    if (jobs_.Contains(id)) continue;
    const v1::JobSubmitted& sub = index.submitted[id];
    Job* job = nullptr;
    switch (step.how) {
      case Restore::kFinished:
        job = &jobs_.Add(FinishedJob(sub, index.finished.at(id)));
        break;
      case Restore::kAdopt:
        job = &jobs_.Add(
            AdoptedJob(JobFromSubmission(sub, now), index.started.at(id), now));
        ++*adopted;
        break;
      case Restore::kRequeue:
        job = &jobs_.Add(JobFromSubmission(sub, now));
        ++*requeued;
        break;
    }
    auto& committed = index.checkpoints[id];
    KeepNewestCheckpoints(CheckpointsKept(sub.spec()), &committed);
    job->checkpoints = std::move(committed);
  }
}

absl::Status JournalKeeper::Open(const std::string& path) {
  ASSIGN_OR_RETURN(JournalContents contents, ReadJournal(path, clock_->Now()));
  JournalIndex index = IndexJournal(contents.records);
  std::vector<v1::JournalRecord> kept;
  int adopted = 0, requeued = 0;
  {
    absl::MutexLock lock(&mu_);
    RestoreLocked(index, &adopted, &requeued);
    events_.TrimFinished();
    kept = jobs_.Compaction(index);
  }
  const size_t jobs = index.order.size();
  auto journal = JobJournal::Create(path, kept);
  absl::MutexLock lock(&mu_);
  if (journal.ok()) {
    SetJournal(*std::move(journal));
  } else {
    // The file is as it was (the rewrite goes through a temporary file).
    KeepFailureLocked(path, journal.status(), std::move(index));
  }
  AQ_LOG_INFO("journal {}: {} job(s); {} running taken back, {} pending again",
              path, jobs, adopted, requeued);
  events_.Schedule();
  return absl::OkStatus();
}

void JournalKeeper::KeepFailureLocked(const std::string& path,
                                      const absl::Status& why,
                                      JournalIndex index) {
  error_ = std::string(why.message());
  path_ = path;
  index_ = std::make_unique<JournalIndex>(std::move(index));
  retry_at_ = clock_->Now() + kRetryEvery;
  AQ_LOG_ERROR(
      "journal {}: {}; serving without recording: new jobs are "
      "refused until there is room (tried again every 5 s)",
      path, error_);
}

std::vector<v1::JournalRecord> JournalKeeper::RecordsNowLocked(
    std::set<std::string>* ended) const {
  std::vector<v1::JournalRecord> records = jobs_.Compaction(*index_);
  for (const std::string& id : jobs_.order()) {
    const Job& job = jobs_.At(id);
    if (job.restored || !IsFinal(job.state)) continue;
    v1::JournalRecord fin;
    *fin.mutable_finished() = events_.StatusOf(job);
    records.push_back(std::move(fin));
    ended->insert(id);
  }
  return records;
}

void JournalKeeper::Retry() {
  std::string path;
  std::vector<v1::JournalRecord> records;
  std::set<std::string> ended;
  {
    absl::MutexLock lock(&mu_);
    if (error_.empty() || index_ == nullptr) return;
    retry_at_ = clock_->Now() + kRetryEvery;
    path = path_;
    records = RecordsNowLocked(&ended);
  }
  auto journal = JobJournal::Create(path, records);  // The disk, unlocked.
  absl::MutexLock lock(&mu_);
  if (!journal.ok()) {
    error_ = std::string(journal.status().message());
    AQ_LOG_DEBUG("journal {}: still cannot write it: {}", path, error_);
    return;
  }
  std::shared_ptr<JobJournal> opened = *std::move(journal);
  SetJournal(opened);
  // Jobs that ended while the file was written.
  for (const std::string& id : jobs_.order()) {
    const Job& job = jobs_.At(id);
    if (job.restored || !IsFinal(job.state) || ended.count(id) > 0) continue;
    v1::JournalRecord fin;
    *fin.mutable_finished() = events_.StatusOf(job);
    opened->AppendAsync(std::move(fin));
  }
  error_.clear();
  index_.reset();
  AQ_LOG_INFO("journal {}: written again ({} records); new jobs are accepted",
              path, records.size());
}

}  // namespace aqueduct
