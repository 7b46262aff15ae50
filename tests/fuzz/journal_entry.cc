// The journal target: a coordinator starting on a state directory whose
// journal holds the input. JobJournal::Read parses the records; a
// CoordinatorCore replays them (OpenJournal: finished jobs restored,
// started ones taken back, the rest queued again; the file compacted), is
// ticked past the adoption grace with no worker coming back, and answers
// every query about every job. A second coordinator then replays the
// compacted file and must agree on the jobs and on every final state: the
// compaction loses nothing a client was told.
//
// The journal's checksums refuse a record the fuzzer changes (the AQJ3
// reader then looks for the next sync word, so the resynchronisation is
// fuzzed too); files without a magic are read as the older unchecksummed
// format, so the record contents are reached that way as well.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include "common/check.h"
#include "common/clock.h"
#include "common/status.h"
#include "coordinator/core.h"
#include "coordinator/jobs/job_state.h"
#include "coordinator/journal.h"
#include "tests/fuzz/entries.h"

namespace aqueduct {
namespace fuzz {

namespace {

namespace fs = std::filesystem;

// A directory of this process's own for the journal (the coordinator
// reads and rewrites a path, as it does in production), under TMPDIR,
// removed when the process exits normally (a crash leaves it for the
// post-mortem). A function-local static: built on first use, destroyed at
// exit after every input has run.
class StateDirectory {
 public:
  StateDirectory() {
    std::string pattern = fs::temp_directory_path() / "aq_fuzz_XXXXXX";
    AQ_CHECK(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~StateDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

const fs::path& StateDir() {
  static StateDirectory dir;
  return dir.path();
}

// Refuses every call: no worker is reachable from a fuzzed coordinator.
class NoWorker final : public WorkerClient {
 public:
  absl::Status AssignStage(const StageAssignment&, absl::Duration) override {
    return Refused();
  }
  absl::Status StartJob(const std::string&, absl::Duration) override {
    return Refused();
  }
  absl::Status StopJob(const std::string&, const std::string&, absl::Duration,
                       std::optional<int>) override {
    return Refused();
  }
  absl::StatusOr<WorkerRuntimeStatus> GetStatus(absl::Duration) override {
    return Refused();
  }
  absl::StatusOr<ModelProfile> Profile(const JobSpec&,
                                       absl::Duration) override {
    return Refused();
  }

 private:
  static absl::Status Refused() {
    return absl::UnavailableError("no worker in the fuzz target");
  }
};

std::unique_ptr<CoordinatorCore> NewCore(const Clock* clock) {
  CoordinatorOptions options;
  options.registry.version = "0.1.0";
  options.driver_threads = 1;
  return std::make_unique<CoordinatorCore>(
      options, clock,
      [](const std::string&) { return std::make_unique<NoWorker>(); });
}

// Every read a client can make of every job, paging through the list as
// `aq jobs` does; returns the jobs' states.
std::map<std::string, JobState> QueryAll(const CoordinatorCore& core) {
  std::map<std::string, JobState> states;
  std::string token;
  do {
    absl::StatusOr<JobPage> page = core.ListJobs(0, token);
    AQ_CHECK(page.ok());
    for (const JobStatus& job : page->jobs) {
      AQ_CHECK(core.GetJob(job.job_id()).ok());
      (void)core.GetPlan(job.job_id());
      (void)core.GetTrace(job.job_id());
      (void)core.ListCheckpoints(job.job_id());
      AQ_CHECK(states.emplace(job.job_id(), job.state()).second);
    }
    token = page->next_page_token;
  } while (!token.empty());
  return states;
}

}  // namespace

absl::Status JournalEntry(const uint8_t* data, size_t size) {
  const fs::path path = StateDir() / "jobs.journal";
  for (const auto& entry : fs::directory_iterator(StateDir())) {
    fs::remove_all(entry.path());  // Left by the previous input (files,
                                   // the logs/ and traces/ directories).
  }
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data), size);
    AQ_CHECK(out.good());
  }
  ASSIGN_OR_RETURN(const JournalContents contents, JobJournal::Read(path));
  FakeClock clock;
  std::map<std::string, JobState> before;
  {
    std::unique_ptr<CoordinatorCore> core = NewCore(&clock);
    RETURN_IF_ERROR(core->OpenJournal(path));
    QueryAll(*core);
    // Past the adoption grace and the lease: jobs taken back whose workers
    // never return are restarted, and wait in vain for workers.
    for (int i = 0; i < 4; ++i) {
      clock.Advance(absl::Seconds(30));
      core->Tick();
    }
    before = QueryAll(*core);
  }  // Joins the driver and makes the journal durable.
  // The compacted journal reads back whole, and replays to the same jobs
  // with the same final states.
  absl::StatusOr<JournalContents> compacted = JobJournal::Read(path);
  AQ_CHECK(compacted.ok());
  AQ_CHECK(compacted->ignored_bytes == 0);
  std::unique_ptr<CoordinatorCore> again = NewCore(&clock);
  AQ_CHECK(again->OpenJournal(path).ok());
  const std::map<std::string, JobState> after = QueryAll(*again);
  AQ_CHECK(after.size() == before.size());
  for (const auto& [id, state] : before) {
    auto it = after.find(id);
    AQ_CHECK(it != after.end());
    AQ_CHECK(!IsFinal(state) || it->second == state);
  }
  if (contents.ignored_bytes > 0) {
    return absl::DataLossError("the journal ends in an unreadable tail");
  }
  return absl::OkStatus();
}

}  // namespace fuzz
}  // namespace aqueduct
