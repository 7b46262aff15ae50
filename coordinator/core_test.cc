// The coordinator's job state machine and ledger with a fake clock and fake
// worker clients.
#include "coordinator/core.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/checkpoint.h"
#include "gtest/gtest.h"
#include "pipeline/failure.h"
#include "pipeline/spec.h"

namespace aqueduct {
namespace {

constexpr char kSpec[] = R"pb(
  name: "tiny"
  model {
    layers { flatten {} }
    layers { linear { in_features: 8 out_features: 4 } }
    layers { relu {} }
    layers { linear { in_features: 4 out_features: 2 } }
  }
  data {
    synthetic {
      sample_shape: [ 8 ]
      num_classes: 2
      train_samples: 64
      seed: 1
    }
  }
  optimizer { sgd { lr: 0.1 } }
  batch_size: 8
  epochs: 2
)pb";

struct Calls {
  absl::Mutex mu;
  std::vector<std::string> log ABSL_GUARDED_BY(mu);
  // Set by the test while the driver's threads call the fake workers.
  absl::Notification* block_profile ABSL_GUARDED_BY(mu) = nullptr;
  absl::Status assign_status ABSL_GUARDED_BY(mu);
  void SetBlockProfile(absl::Notification* n) {
    absl::MutexLock lock(&mu);
    block_profile = n;
  }
  absl::Notification* BlockProfile() {
    absl::MutexLock lock(&mu);
    return block_profile;
  }
  void SetAssignStatus(absl::Status s) {
    absl::MutexLock lock(&mu);
    assign_status = std::move(s);
  }
  absl::Status AssignStatus() {
    absl::MutexLock lock(&mu);
    return assign_status;
  }
  // The next this many assignments are refused as a worker still ending an
  // earlier attempt refuses them.
  int busy_refusals ABSL_GUARDED_BY(mu) = 0;
  void SetBusyRefusals(int n) {
    absl::MutexLock lock(&mu);
    busy_refusals = n;
  }
  bool TakeBusyRefusal() {
    absl::MutexLock lock(&mu);
    if (busy_refusals == 0) return false;
    --busy_refusals;
    return true;
  }
  // Workers whose process is gone: GetStatus is refused.
  std::set<std::string> dead ABSL_GUARDED_BY(mu);
  void SetDead(const std::string& address) {
    absl::MutexLock lock(&mu);
    dead.insert(address);
  }
  bool Dead(const std::string& address) {
    absl::MutexLock lock(&mu);
    return dead.count(address) > 0;
  }
  void Add(const std::string& s) {
    absl::MutexLock lock(&mu);
    log.push_back(s);
  }
  bool Has(const std::string& s) {
    absl::MutexLock lock(&mu);
    return std::find(log.begin(), log.end(), s) != log.end();
  }
};

class FakeWorkerClient : public WorkerClient {
 public:
  FakeWorkerClient(std::string address, Calls* calls)
      : address_(std::move(address)), calls_(calls) {}
  absl::Status AssignStage(const StageAssignment& a, absl::Duration) override {
    calls_->Add(absl::StrCat("assign ", address_, " stage ", a.stage()));
    calls_->Add(absl::StrCat("assign ", address_, " attempt ", a.attempt(),
                             " from v", a.restore().version()));
    if (calls_->TakeBusyRefusal()) {
      v1::StageFailure busy;
      busy.set_cause(v1::FAILURE_BUSY_WITH_EARLIER_ATTEMPT);
      busy.set_job_id(a.job_id());
      return WithFailure(absl::FailedPreconditionError(absl::StrCat(
                             "this worker is busy with job ", a.job_id())),
                         busy);
    }
    return calls_->AssignStatus();
  }
  absl::StatusOr<WorkerRuntimeStatus> GetStatus(absl::Duration) override {
    if (calls_->Dead(address_)) {
      return absl::UnavailableError("connection refused");
    }
    return WorkerRuntimeStatus();
  }
  absl::Status StartJob(const std::string& job, absl::Duration) override {
    calls_->Add(absl::StrCat("start ", address_, " ", job));
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string& job, const std::string&,
                       absl::Duration, std::optional<int>) override {
    calls_->Add(absl::StrCat("stop ", address_, " ", job));
    return absl::OkStatus();
  }
  absl::StatusOr<ModelProfile> Profile(const JobSpec& spec,
                                       absl::Duration) override {
    calls_->Add(absl::StrCat("profile ", address_));
    if (absl::Notification* block = calls_->BlockProfile()) {
      block->WaitForNotificationWithTimeout(absl::Seconds(10));
    }
    ModelProfile p;
    for (int i = 0; i < spec.model().layers_size(); ++i) {
      LayerProfile* n = p.add_nodes();
      n->set_id(absl::StrCat("layer", i));
      n->set_forward_ms(1 + i);
      n->set_backward_ms(2 + i);
      n->set_activation_bytes(1000);
      n->set_parameter_bytes(i % 2 ? 4000 : 0);
      n->set_layer_index(i);
      if (i > 0) {
        v1::ProfileEdge* e = p.add_edges();
        e->set_from(absl::StrCat("layer", i - 1));
        e->set_to(absl::StrCat("layer", i));
      }
    }
    return p;
  }

 private:
  std::string address_;
  Calls* calls_;
};

// The test's temporary directory: the coordinator's --checkpoint_root.
PathRoots TestRoots() {
  const char* dir = std::getenv("TEST_TMPDIR");
  auto roots = PathRoots::Make("the coordinator's --checkpoint_root",
                               {dir != nullptr ? dir : "/tmp"});
  EXPECT_TRUE(roots.ok()) << roots.status();
  return roots.ok() ? *roots : PathRoots();
}

class CoreTest : public ::testing::Test {
 protected:
  CoreTest() {
    CoordinatorOptions o;
    o.registry.version = "0.1.0";
    o.registry.stall_after = absl::InfiniteDuration();  // Clock jumps.
    o.default_wait_for_workers = absl::Seconds(30);
    o.checkpoint_roots = TestRoots();
    core_ = std::make_unique<CoordinatorCore>(
        o, &clock_, [this](const std::string& address) {
          return std::make_unique<FakeWorkerClient>(address, &calls_);
        });
    spec_ = *ParseJobSpec(kSpec, "test");
  }

  void AddWorker(const std::string& id, const v1::StageClaim* claim = nullptr) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_incarnation("inc-" + id);
    info.set_version("0.1.0");
    info.set_address(id + ":1");
    ASSERT_TRUE(core_->RegisterWorker(info, claim).ok());
  }

  void RunTwoJobsThenRestartKeepingNone(const std::string& path,
                                        std::string* first,
                                        std::string* second);

  // A fresh coordinator with `o` over the same clock and fake workers.
  void RestartWith(CoordinatorOptions o) {
    core_.reset();
    o.registry.version = "0.1.0";
    o.registry.stall_after = absl::InfiniteDuration();  // Clock jumps.
    core_ = std::make_unique<CoordinatorCore>(
        o, &clock_, [this](const std::string& address) {
          return std::make_unique<FakeWorkerClient>(address, &calls_);
        });
  }

  // `seconds` of the fake clock, one at a time, with every worker of
  // `workers` heartbeating and the coordinator ticking.
  void Beat(int seconds, const std::vector<std::string>& workers) {
    std::vector<std::string> stop;
    for (int i = 0; i < seconds; ++i) {
      clock_.Advance(absl::Seconds(1));
      for (const std::string& w : workers) {
        ASSERT_TRUE(Beat(w, "inc-" + w, "", &stop).ok()) << w;
      }
      core_->Tick();
    }
  }

  // A fresh coordinator over the same clock and fake workers.
  void Restart() {
    core_.reset();
    CoordinatorOptions o;
    o.registry.version = "0.1.0";
    o.registry.stall_after = absl::InfiniteDuration();  // Clock jumps.
    o.checkpoint_roots = TestRoots();
    core_ = std::make_unique<CoordinatorCore>(
        o, &clock_, [this](const std::string& address) {
          return std::make_unique<FakeWorkerClient>(address, &calls_);
        });
  }

  std::string TempPath(const std::string& name) {
    const char* dir = std::getenv("TEST_TMPDIR");
    return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  }

  // Waits (real time, bounded) for the job to reach `state`.
  JobStatus WaitFor(const std::string& job, JobState state) {
    int64_t version = -1;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      auto s = core_->WaitForJob(job, version, deadline);
      EXPECT_TRUE(s.ok());
      if (!s.ok() || s->first.state() == state) return s->first;
      version = s->second;
    }
    ADD_FAILURE() << "job " << job << " never reached state " << state;
    return *core_->GetJob(job);
  }

  StageProgress Progress(const std::string& job, int64_t done, bool finished) {
    StageProgress p;
    p.set_job_id(job);
    p.set_stage(0);
    p.set_replica(0);
    p.set_minibatches_done(done);
    p.set_committed_version(done);
    p.add_step_ms(5);
    p.add_step_ms(7);
    LossPoint* l = p.add_losses();
    l->set_minibatch(done - 1);
    l->set_loss(0.5);
    p.set_finished(finished);
    if (finished) p.set_test_accuracy(0.75);
    return p;
  }

  // A heartbeat, its reply into `stop` (and `checkpoint_at`).
  absl::Status Beat(const std::string& worker, const std::string& incarnation,
                    const std::string& job, std::vector<std::string>* stop,
                    int attempt = 0, int64_t* checkpoint_at = nullptr) {
    auto reply = core_->Heartbeat(worker, incarnation, job, attempt);
    if (!reply.ok()) return reply.status();
    *stop = reply->stop_jobs;
    if (checkpoint_at != nullptr) *checkpoint_at = reply->checkpoint_at;
    return absl::OkStatus();
  }

  FakeClock clock_;
  Calls calls_;
  std::unique_ptr<CoordinatorCore> core_;
  JobSpec spec_;
};

// A 15 KB job id comes back quoted, at most 64 bytes of it (issue 22, item
// 14): the whole of it made the status too large for gRPC's client.
TEST_F(CoreTest, AnUnknownJobIdIsQuotedShort) {
  const std::string id(15000, 'j');
  const std::string want =
      "job '" + std::string(64, 'j') + "...' (15000 bytes) does not exist";
  const absl::Status statuses[] = {
      core_->GetJob(id).status(),
      core_->CancelJob(id).status(),
      core_->GetPlan(id).status(),
  };
  for (const absl::Status& s : statuses) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_EQ(s.message(), want);
  }
}

TEST_F(CoreTest, JobRunsToSuccess) {
  auto id = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_PENDING);
  EXPECT_EQ(core_->GetJob(*id)->total_steps(), 16);
  AddWorker("w1");
  JobStatus running = WaitFor(*id, v1::JOB_RUNNING);
  EXPECT_TRUE(calls_.Has("profile w1:1"));
  EXPECT_TRUE(calls_.Has("assign w1:1 stage 0"));
  EXPECT_TRUE(calls_.Has("start w1:1 " + *id));
  ASSERT_EQ(running.stages_size(), 1);
  EXPECT_EQ(running.stages(0).workers(0), "w1");
  EXPECT_EQ(running.stages(0).worker_states(0), v1::WORKER_HEALTHY);
  EXPECT_TRUE(core_->GetPlan(*id).ok());
  EXPECT_EQ(core_->ListWorkers()[0].job_id(), *id);

  ASSERT_TRUE(
      core_->ReportProgress("w1", "inc-w1", {Progress(*id, 8, false)}).ok());
  JobStatus mid = *core_->GetJob(*id);
  EXPECT_EQ(mid.step(), 8);
  EXPECT_EQ(mid.stages(0).committed_version(), 8);
  EXPECT_EQ(mid.stages(0).step_ms_p50(), 5);
  EXPECT_EQ(mid.stages(0).step_ms_p99(), 7);
  EXPECT_EQ(mid.loss_curve_size(), 1);
  ASSERT_TRUE(
      core_->ReportProgress("w1", "inc-w1", {Progress(*id, 16, true)}).ok());
  JobStatus done = *core_->GetJob(*id);
  EXPECT_EQ(done.state(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(done.test_accuracy(), 0.75);
  EXPECT_TRUE(core_->ListWorkers()[0].job_id().empty()) << "released";
  // Cancelling a finished job changes nothing.
  EXPECT_EQ(*core_->CancelJob(*id), v1::JOB_SUCCEEDED);
}

// With a journal, a restarted coordinator still knows every job: finished
// ones as they ended (plan, losses, accuracy), unfinished ones as FAILED
// with the reason; new ids do not repeat old ones; the journal is compacted.
TEST_F(CoreTest, JournalKeepsJobsAcrossRestarts) {
  const std::string path = TempPath("core_test.journal");
  std::remove(path.c_str());
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  AddWorker("w1");
  auto done = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(done.ok());
  WaitFor(*done, v1::JOB_RUNNING);
  ASSERT_TRUE(
      core_->ReportProgress("w1", "inc-w1", {Progress(*done, 16, true)}).ok());
  const JobStatus before = *core_->GetJob(*done);
  ASSERT_EQ(before.state(), v1::JOB_SUCCEEDED);
  auto cancelled = core_->SubmitJob(spec_, nullptr);
  WaitFor(*cancelled, v1::JOB_RUNNING);
  ASSERT_EQ(*core_->CancelJob(*cancelled), v1::JOB_CANCELLED);
  // Left running when the coordinator goes away, and one still waiting.
  auto running = core_->SubmitJob(spec_, nullptr);
  WaitFor(*running, v1::JOB_RUNNING);
  JobSpec two = spec_;
  two.mutable_pipeline()->set_workers(2);
  auto pending = core_->SubmitJob(two, nullptr);
  Restart();
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  const std::vector<JobStatus> jobs = core_->ListJobs(0, "")->jobs;
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(jobs[0].job_id(), *done);
  EXPECT_EQ(jobs[0].SerializeAsString(), before.SerializeAsString());
  EXPECT_TRUE(core_->GetPlan(*done).ok());
  EXPECT_EQ(jobs[1].state(), v1::JOB_CANCELLED);
  EXPECT_EQ(jobs[1].reason(), "cancelled by a client");
  // The running job is taken back: its worker, still training, registers
  // again claiming its stage, and carries on.
  EXPECT_EQ(jobs[2].state(), v1::JOB_RUNNING);
  EXPECT_TRUE(core_->GetPlan(*running).ok());
  EXPECT_EQ(jobs[3].state(), v1::JOB_PENDING);
  v1::StageClaim claim;
  claim.set_job_id(*running);
  claim.set_stage(0);
  AddWorker("w1", &claim);
  std::vector<std::string> stop;
  ASSERT_TRUE(Beat("w1", "inc-w1", *running, &stop).ok());
  EXPECT_TRUE(stop.empty());
  ASSERT_TRUE(
      core_->ReportProgress("w1", "inc-w1", {Progress(*running, 16, true)})
          .ok());
  EXPECT_EQ(core_->GetJob(*running)->state(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(core_->GetJob(*running)->step(), 16);
  // Same clock, same id prefix: the next id continues after the old ones.
  auto next = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(next.ok());
  for (const auto& old : {*done, *cancelled, *running, *pending}) {
    EXPECT_NE(*next, old);
  }
  // Compacted to each job's submission, start and final status. The next
  // job starts on w1 past the pending 2-worker job (backfill): its start
  // is journaled when its driver gets there, so it is not counted.
  auto contents = JobJournal::Read(path);
  ASSERT_TRUE(contents.ok());
  int kept = 0;
  for (const v1::JournalRecord& r : contents->records) {
    if (!r.has_started() || r.started().job_id() != *next) ++kept;
  }
  EXPECT_EQ(kept, 9);
}

// A damaged journal never brings a job back to a state it had left: a
// CANCELLED job whose records are intact stays CANCELLED; one whose final
// status is damaged comes back FAILED, naming the damaged record, never
// PENDING, and stays so after the next restart (the journal is rewritten
// with it); an unfinished job whose records are intact is PENDING again.
TEST_F(CoreTest, AJobWhoseFinalRecordIsDamagedComesBackFailedNotPending) {
  const std::string path = TempPath("core_test_damaged.journal");
  std::remove(path.c_str());
  auto submitted = [this](const std::string& id) {
    v1::JournalRecord r;
    r.mutable_submitted()->set_job_id(id);
    *r.mutable_submitted()->mutable_spec() = spec_;
    return r;
  };
  auto cancelled = [](const std::string& id) {
    v1::JournalRecord r;
    r.mutable_finished()->set_job_id(id);
    r.mutable_finished()->set_state(v1::JOB_CANCELLED);
    r.mutable_finished()->set_reason("cancelled by a client");
    return r;
  };
  ASSERT_TRUE(
      JobJournal::Create(
          path, {submitted("intact"), cancelled("intact"), submitted("damaged"),
                 cancelled("damaged"), submitted("waiting")})
          .ok());
  const int64_t at = JobJournal::Read(path)->offsets[3];
  const int64_t end = JobJournal::Read(path)->offsets[4];
  std::string bytes = *DefaultFileSystem()->ReadFile(path);
  for (int64_t i = end - 6; i < end - 2; ++i) bytes[i] ^= 0x5a;  // Its body.
  ASSERT_TRUE(WriteFileAtomically(DefaultFileSystem(), path, bytes).ok());
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  EXPECT_EQ(core_->GetJob("intact")->state(), v1::JOB_CANCELLED);
  EXPECT_EQ(core_->GetJob("intact")->reason(), "cancelled by a client");
  const JobStatus damaged = *core_->GetJob("damaged");
  EXPECT_EQ(damaged.state(), v1::JOB_FAILED);
  EXPECT_EQ(damaged.reason().find(absl::StrCat("its journal record at byte ",
                                               at, " of ", path, ".corrupt-")),
            0u)
      << damaged.reason();
  EXPECT_EQ(core_->GetJob("waiting")->state(), v1::JOB_PENDING);
  Restart();
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  EXPECT_EQ(core_->GetJob("intact")->state(), v1::JOB_CANCELLED);
  EXPECT_EQ(core_->GetJob("damaged")->state(), v1::JOB_FAILED);
  EXPECT_EQ(core_->GetJob("damaged")->reason(), damaged.reason());
  EXPECT_EQ(core_->GetJob("waiting")->state(), v1::JOB_PENDING);
}

TEST_F(CoreTest, ARunningJobWhoseWorkerDoesNotComeBackRestarts) {
  const std::string path = TempPath("core_test_adopt.journal");
  std::remove(path.c_str());
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  AddWorker("w1");
  auto running = core_->SubmitJob(spec_, nullptr);
  WaitFor(*running, v1::JOB_RUNNING);
  Restart();
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  // w1 never comes back; w2, a stranger to the job, is there.
  AddWorker("w2");
  std::vector<std::string> stop;
  for (int i = 0; i < 16; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(Beat("w2", "inc-w2", "", &stop).ok());
    core_->Tick();
  }
  const JobStatus restarted = WaitFor(*running, v1::JOB_RUNNING);
  EXPECT_EQ(restarted.attempt(), 1);
  ASSERT_EQ(restarted.restarts_size(), 1);
  EXPECT_EQ(restarted.restarts(0).reason(),
            "worker(s) w1 did not register again within 15.0 s of the "
            "coordinator's restart");
  EXPECT_TRUE(calls_.Has("assign w2:1 attempt 1 from v0"));
}

TEST_F(CoreTest, AWorkerBackWithoutItsStageRestartsTheJobAtOnce) {
  const std::string path = TempPath("core_test_adopt2.journal");
  std::remove(path.c_str());
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  AddWorker("w1");
  auto running = core_->SubmitJob(spec_, nullptr);
  WaitFor(*running, v1::JOB_RUNNING);
  Restart();
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  // w1 comes back as a new process, claiming nothing: its stage is gone.
  AddWorker("w1");
  const JobStatus restarted = WaitFor(*running, v1::JOB_RUNNING);
  EXPECT_EQ(restarted.attempt(), 1);
  ASSERT_EQ(restarted.restarts_size(), 1);
  EXPECT_EQ(restarted.restarts(0).reason(),
            "worker w1 (stage 0, replica 0) came back without its stage: its "
            "process was restarted while the coordinator was down");
  EXPECT_TRUE(calls_.Has("assign w1:1 attempt 1 from v0"));
}

// Jobs on w1 and on w2, RUNNING under a journal at `path`, with no
// restarts allowed; then the coordinator restarts keeping no finished job
// and takes them back from the journal.
void CoreTest::RunTwoJobsThenRestartKeepingNone(const std::string& path,
                                                std::string* first,
                                                std::string* second) {
  std::remove(path.c_str());
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  spec_.mutable_fault_tolerance()->set_max_restarts(0);
  AddWorker("w1");
  *first = *core_->SubmitJob(spec_, nullptr);
  WaitFor(*first, v1::JOB_RUNNING);
  AddWorker("w2");
  *second = *core_->SubmitJob(spec_, nullptr);
  WaitFor(*second, v1::JOB_RUNNING);
  CoordinatorOptions o;
  o.max_finished_jobs = 0;
  RestartWith(o);
  ASSERT_TRUE(core_->OpenJournal(path).ok());
}

// A job failed by the adoption check is trimmed at once (no finished job
// is kept): the check goes on to the next job all the same, in the same
// Tick (it used to iterate over the table's order while the trim erased
// from it, and skipped the job after the one it failed).
TEST_F(CoreTest, EveryJobWhoseWorkersDoNotComeBackFailsInOneTick) {
  const std::string path = TempPath("core_test_adopt_trim.journal");
  std::string first, second;
  ASSERT_NO_FATAL_FAILURE(
      RunTwoJobsThenRestartKeepingNone(path, &first, &second));
  // Neither worker comes back: one Tick past the grace ends both jobs.
  clock_.Advance(absl::Seconds(16));
  core_->Tick();
  EXPECT_EQ(core_->GetJob(first).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->GetJob(second).status().code(), absl::StatusCode::kNotFound);
}

// The same for a worker back without its stage: its job fails and is
// trimmed inside the loop over the table (a use after free under ASan
// before the ids were collected first).
TEST_F(CoreTest, AJobFailedAndTrimmedWhenItsWorkerComesBackWithoutItsStage) {
  const std::string path = TempPath("core_test_adopt_trim2.journal");
  std::string first, second;
  ASSERT_NO_FATAL_FAILURE(
      RunTwoJobsThenRestartKeepingNone(path, &first, &second));
  AddWorker("w1");  // A new process: its stage is gone.
  EXPECT_EQ(core_->GetJob(first).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->GetJob(second)->state(), v1::JOB_RUNNING);
  AddWorker("w2");
  EXPECT_EQ(core_->GetJob(second).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoreTest, WorkerDeathRestartsTheJobNamingWorkerAndStage) {
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  clock_.Advance(absl::Seconds(11));
  core_->Tick();
  JobStatus restarted = *core_->GetJob(*id);
  EXPECT_EQ(restarted.state(), v1::JOB_PENDING);  // No worker left yet.
  ASSERT_EQ(restarted.restarts_size(), 1);
  EXPECT_EQ(restarted.restarts(0).reason(),
            "worker w1 (stage 0, replica 0) is DEAD: no heartbeat for 11.0 s");
  EXPECT_EQ(core_->ListWorkers()[0].state(), v1::WORKER_DEAD);
  AddWorker("w2");
  WaitFor(*id, v1::JOB_RUNNING);  // The restarted job takes w2.
  // With recovery off, the same death fails the job.
  JobSpec once = spec_;
  once.mutable_fault_tolerance()->set_max_restarts(0);
  AddWorker("w3");
  auto other = core_->SubmitJob(once, nullptr);
  WaitFor(*other, v1::JOB_RUNNING);
  std::vector<std::string> stop;
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Beat("w2", "inc-w2", *id, &stop).ok());
  clock_.Advance(absl::Seconds(5));
  core_->Tick();
  EXPECT_EQ(core_->GetJob(*other)->state(), v1::JOB_FAILED);
  EXPECT_EQ(core_->GetJob(*other)->reason(),
            "worker w3 (stage 0, replica 0) is DEAD: no heartbeat for 11.0 s");
}

TEST_F(CoreTest, RestartTakesASpareAndRollsBackToTheLatestCheckpoint) {
  const std::string dir = TempPath("core_test_checkpoints");
  std::filesystem::remove_all(dir);
  spec_.mutable_checkpoint()->set_dir(dir);
  spec_.mutable_checkpoint()->set_every_steps(4);
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  AddWorker("w2");  // The spare.
  // w1 made its file of version 4 durable: the coordinator commits it.
  const std::string version_dir = CheckpointVersionDir(dir, *id, 4);
  SafetensorsFile file;
  file.metadata["optimizer_steps"] = "4";
  auto written =
      WriteCheckpointFile(TestRoots(), version_dir, StageFileName(0, 0), file,
                          0, 0, spec_.model().layers_size());
  ASSERT_TRUE(written.ok()) << written.status();
  StageProgress p = Progress(*id, 6, false);
  CheckpointWritten* w = p.add_checkpoints();
  w->set_version(4);
  *w->mutable_file() = *written;
  w->set_dir(version_dir);
  ASSERT_TRUE(core_->ReportProgress("w1", "inc-w1", {p}).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (core_->GetJob(*id)->checkpoint_version() != 4 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(core_->GetJob(*id)->checkpoint_version(), 4);
  auto listed = core_->ListCheckpoints(*id);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  auto manifest = ReadManifest(TestRoots(), version_dir);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->version(), 4);
  // w1 dies: w2 takes its place from version 4; the ledger rolls back.
  std::vector<std::string> stop;
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(Beat("w2", "inc-w2", "", &stop).ok());
  }
  core_->Tick();
  const JobStatus s = WaitFor(*id, v1::JOB_RUNNING);
  EXPECT_EQ(s.attempt(), 1);
  ASSERT_EQ(s.restarts_size(), 1);
  EXPECT_EQ(s.restarts(0).rolled_back_to(), 4);
  EXPECT_EQ(s.restarts(0).step_at_failure(), 6);
  EXPECT_EQ(s.step(), 4);  // Back to the checkpoint.
  for (const LossPoint& l : s.loss_curve()) EXPECT_LT(l.minibatch(), 4);
  EXPECT_TRUE(calls_.Has("assign w2:1 attempt 1 from v4"));
  // A late report of the ended attempt changes nothing.
  StageProgress late = Progress(*id, 7, false);
  ASSERT_TRUE(core_->ReportProgress("w2", "inc-w2", {late}).ok());
  EXPECT_EQ(core_->GetJob(*id)->step(), 4);
  StageProgress now = Progress(*id, 5, false);
  now.set_attempt(1);
  ASSERT_TRUE(core_->ReportProgress("w2", "inc-w2", {now}).ok());
  EXPECT_EQ(core_->GetJob(*id)->step(), 5);
  // The checkpoint turns out damaged when a stage loads it: it is
  // forgotten and the next attempt starts further back (here: the start).
  StageProgress damaged = Progress(*id, 5, false);
  damaged.set_attempt(1);
  damaged.set_error("restoring the checkpoint: " + version_dir +
                    "/stage-0-a0.safetensors: CRC-32 differs");
  damaged.set_error_code(static_cast<int>(absl::StatusCode::kDataLoss));
  damaged.mutable_failure()->set_cause(v1::FAILURE_CHECKPOINT_UNLOADABLE);
  damaged.mutable_failure()->set_checkpoint_version(4);
  ASSERT_TRUE(core_->ReportProgress("w2", "inc-w2", {damaged}).ok());
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (core_->GetJob(*id)->attempt() < 2 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const JobStatus again = WaitFor(*id, v1::JOB_RUNNING);
  ASSERT_EQ(again.restarts_size(), 2);
  EXPECT_EQ(again.restarts(1).rolled_back_to(), 0);
  EXPECT_EQ(again.checkpoint_version(), 0);
  EXPECT_TRUE(calls_.Has("assign w2:1 attempt 2 from v0"));
}

// Nothing outside --checkpoint_root: a spec's checkpoint.dir, a --resume
// manifest, a directory a worker reports.
TEST_F(CoreTest, CheckpointsOutsideTheRootAreRefused) {
  JobSpec outside = spec_;
  outside.mutable_checkpoint()->set_dir("/etc/aqueduct-ck");
  outside.mutable_checkpoint()->set_every_steps(4);
  auto refused = core_->SubmitJob(outside, nullptr);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find(
                "checkpoint.dir: '/etc/aqueduct-ck' is outside the "
                "coordinator's --checkpoint_root ("),
            std::string::npos)
      << refused.status();
  outside.mutable_checkpoint()->set_dir(TempPath("../../../../../../tmp/x"));
  EXPECT_EQ(core_->SubmitJob(outside, nullptr).status().code(),
            absl::StatusCode::kPermissionDenied);

  // --resume: whether the path exists or not, nothing of it is revealed.
  for (const std::string path :
       {"/etc/shadow", "/etc", "/no/such/dir/v00000001", "/dev/zero"}) {
    auto resume = core_->SubmitJob(spec_, nullptr, path);
    EXPECT_EQ(resume.status().code(), absl::StatusCode::kPermissionDenied)
        << path << ": " << resume.status();
    EXPECT_NE(resume.status().message().find("is outside the coordinator's "
                                             "--checkpoint_root"),
              std::string::npos)
        << resume.status();
    EXPECT_EQ(resume.status().message().find("root:"), std::string::npos);
  }
  // A FIFO inside the root answers at once (it is not read).
  const std::string fifo = TempPath("core_test_fifo");
  std::filesystem::remove_all(fifo);
  ASSERT_EQ(std::filesystem::create_directories(fifo), true);
  ASSERT_EQ(mkfifo((fifo + "/manifest.json").c_str(), 0600), 0);
  auto blocked = core_->SubmitJob(spec_, nullptr, fifo);
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kDataLoss)
      << blocked.status();
  EXPECT_NE(blocked.status().message().find("is a FIFO"), std::string::npos);

  // A coordinator with no --checkpoint_root accepts no checkpoint.dir.
  CoordinatorOptions none;
  RestartWith(none);
  JobSpec inside = spec_;
  inside.mutable_checkpoint()->set_dir(TempPath("core_test_ck"));
  inside.mutable_checkpoint()->set_every_steps(4);
  auto unset = core_->SubmitJob(inside, nullptr);
  EXPECT_EQ(unset.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(unset.status().message().find("(none set)"), std::string::npos)
      << unset.status();
}

TEST_F(CoreTest, AReportedDirectoryOutsideTheRootIsNotCommitted) {
  const std::string dir = TempPath("core_test_reported");
  std::filesystem::remove_all(dir);
  spec_.mutable_checkpoint()->set_dir(dir);
  spec_.mutable_checkpoint()->set_every_steps(4);
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  WaitFor(*id, v1::JOB_RUNNING);
  // A directory outside the root (the test's temporary directory), with a
  // file of its own that must survive.
  char outside_template[] = "/tmp/aqueduct-core-test-XXXXXX";
  ASSERT_NE(mkdtemp(outside_template), nullptr);
  const std::string outside = outside_template;
  struct RemovedAtTheEnd {  // Also when an assertion ends the test early.
    std::string path;
    ~RemovedAtTheEnd() { std::filesystem::remove_all(path); }
  } removed{outside};
  FILE* keep = std::fopen((outside + "/keep").c_str(), "w");
  ASSERT_NE(keep, nullptr);
  std::fclose(keep);
  // w1 reports its file of `version` in `at`.
  auto report = [&](int64_t version, const std::string& at) {
    StageProgress p = Progress(*id, version + 2, false);
    CheckpointWritten* w = p.add_checkpoints();
    w->set_version(version);
    w->mutable_file()->set_name(StageFileName(0, 0));
    w->mutable_file()->set_layer_end(spec_.model().layers_size());
    w->set_dir(at);
    return core_->ReportProgress("w1", "inc-w1", {p});
  };
  // A directory named outside is refused with the report
  // (progress_checks.h): it is not the job's directory of that version.
  const std::string v4 = CheckpointVersionDir(dir, *id, 4);
  const absl::Status named = report(4, outside + "/v00000004");
  EXPECT_EQ(named.code(), absl::StatusCode::kInvalidArgument) << named;
  EXPECT_NE(named.message().find(".checkpoints[0].dir='" + outside +
                                 "/v00000004' is not "),
            std::string::npos)
      << named;
  EXPECT_NE(named.message().find("the job's directory of that version"),
            std::string::npos)
      << named;
  // The job's own directory of version 4, a symbolic link that leads
  // outside: the report's values pass, and the committer must refuse the
  // directory it resolves to.
  ASSERT_TRUE(std::filesystem::create_directories(DirName(v4)));
  std::filesystem::create_directory_symlink(outside, v4);
  const absl::Status linked = report(4, v4);
  ASSERT_TRUE(linked.ok()) << linked;
  // Version 8 in a real directory of the job: the one committer thread
  // takes the versions in order, so once 8 is committed, 4 was decided.
  const absl::Status real = report(8, CheckpointVersionDir(dir, *id, 8));
  ASSERT_TRUE(real.ok()) << real;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (core_->GetJob(*id)->checkpoint_version() != 8 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(core_->GetJob(*id)->checkpoint_version(), 8);
  auto listed = core_->ListCheckpoints(*id);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u) << "version 4 was committed outside the root";
  EXPECT_EQ((*listed)[0].version(), 8);
  EXPECT_FALSE(std::filesystem::exists(outside + "/manifest.json"));
  EXPECT_TRUE(std::filesystem::exists(outside + "/keep"));
  EXPECT_FALSE(std::filesystem::exists(outside + "/v00000004"));
}

TEST_F(CoreTest, EverySecondsAsksForAVersionAheadOfTheStages) {
  spec_.mutable_checkpoint()->set_dir(TempPath("core_test_every_seconds"));
  spec_.mutable_checkpoint()->set_every_seconds(10);
  spec_.set_epochs(0);
  spec_.set_max_steps(1000);
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  std::vector<std::string> stop;
  int64_t at = -1;
  ASSERT_TRUE(Beat("w1", "inc-w1", *id, &stop, 0, &at).ok());
  EXPECT_EQ(at, 0);  // Nothing asked yet.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(Beat("w1", "inc-w1", *id, &stop, 0, &at).ok());
    ASSERT_TRUE(core_
                    ->ReportProgress("w1", "inc-w1",
                                     {Progress(*id, 10 * (i + 1), false)})
                    .ok());
    core_->Tick();
  }
  ASSERT_TRUE(Beat("w1", "inc-w1", *id, &stop, 0, &at).ok());
  // Ahead of the stage's version 100 by its steps in two heartbeats, plus
  // the pipeline's depth.
  EXPECT_GT(at, 100);
  EXPECT_LT(at, 1000);
  EXPECT_TRUE(stop.empty());
}

TEST_F(CoreTest, AFailedStageIsBlamedOnTheWorkerThatDied) {
  spec_.mutable_pipeline()->set_workers(2);
  AddWorker("w1");
  AddWorker("w2");
  auto id = core_->SubmitJob(spec_, nullptr);
  const JobStatus running = WaitFor(*id, v1::JOB_RUNNING);
  ASSERT_EQ(running.plan().stages_size(), 2);
  // w2's process is gone; w1 notices first and reports its error.
  calls_.SetDead("w2:1");
  StageProgress error = Progress(*id, 2, false);
  error.set_error("rank 1 closed the connection");
  ASSERT_TRUE(core_->ReportProgress("w1", "inc-w1", {error}).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (core_->GetJob(*id)->attempt() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const JobStatus s = WaitFor(*id, v1::JOB_RUNNING);
  ASSERT_EQ(s.restarts_size(), 1);
  EXPECT_EQ(s.restarts(0).reason(),
            "worker w2 (stage 1, replica 0) is DEAD: it does not answer "
            "(connection refused)");
  // Re-planned onto the one worker left.
  EXPECT_EQ(s.plan().stages_size(), 1);
  EXPECT_EQ(s.attempt(), 1);
}

// A stage cut off from its peer (both alive: a partition between them)
// says so; the restart and the final failure name the pair and their hosts.
TEST_F(CoreTest, APeerThatCouldNotBeReachedNamesThePair) {
  spec_.mutable_pipeline()->set_workers(2);
  spec_.mutable_fault_tolerance()->set_max_restarts(0);
  AddWorker("w1");
  AddWorker("w2");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  StageProgress error = Progress(*id, 2, false);
  error.set_error(
      "could not reach stage 1 on worker w2 (w2): timed out receiving tag 3 "
      "from rank 1: Timed out; TCP to w2:1: no answer within 1s");
  error.set_error_code(static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  error.mutable_failure()->set_cause(v1::FAILURE_PEER_UNREACHABLE);
  error.mutable_failure()->set_peer_worker_id("w2");
  ASSERT_TRUE(core_->ReportProgress("w1", "inc-w1", {error}).ok());
  const JobStatus s = WaitFor(*id, v1::JOB_FAILED);
  EXPECT_EQ(s.reason(),
            "stage 0 on worker w1 (w1) could not reach stage 1 on worker w2 "
            "(w2): timed out receiving tag 3 from rank 1: Timed out; TCP to "
            "w2:1: no answer within 1s");
}

// A partition between two workers: the restart takes the spare before the
// worker the stage could not reach, so the pair is not put together again.
TEST_F(CoreTest, ARestartAfterAPeerPartitionTakesTheSpareFirst) {
  spec_.mutable_pipeline()->set_workers(2);
  spec_.mutable_fault_tolerance()->set_max_restarts(1);
  AddWorker("w1");
  AddWorker("w2");
  AddWorker("w3");  // The spare, last in registration order.
  auto id = core_->SubmitJob(spec_, nullptr);
  const JobStatus running = WaitFor(*id, v1::JOB_RUNNING);
  const std::string reporter = running.stages(0).workers(0);
  const std::string peer = running.stages(1).workers(0);
  ASSERT_NE(peer, "w3");
  StageProgress error = Progress(*id, 2, false);
  error.set_error(absl::StrCat("could not reach stage 1 on worker ", peer, " (",
                               peer, "): timed out; TCP to ", peer,
                               ":1: no answer within 1s"));
  error.set_error_code(static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  error.mutable_failure()->set_cause(v1::FAILURE_PEER_UNREACHABLE);
  error.mutable_failure()->set_peer_worker_id(peer);
  ASSERT_TRUE(core_->ReportProgress(reporter, "inc-" + reporter, {error}).ok());
  const absl::Time until = absl::Now() + absl::Seconds(10);
  JobStatus s = *core_->GetJob(*id);
  while ((s.attempt() < 1 || s.state() != v1::JOB_RUNNING) &&
         absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
    s = *core_->GetJob(*id);
  }
  ASSERT_EQ(s.attempt(), 1) << s.ShortDebugString();
  ASSERT_EQ(s.state(), v1::JOB_RUNNING);
  std::set<std::string> used;
  for (const auto& stage : s.stages()) used.insert(stage.workers(0));
  EXPECT_EQ(used, (std::set<std::string>{reporter, "w3"}));
}

// A worker cut off from the coordinator while its pipeline keeps training
// (its peer's committed versions advance) is UNREACHABLE, not DEAD: the
// job goes on at attempt 0, and the worker is HEALTHY at its next
// heartbeat. When the job stops progressing too, the lease ends as
// before: DEAD, and the job restarts naming the worker.
TEST_F(CoreTest, ASilentWorkerWhoseJobProgressesIsUnreachableNotDead) {
  spec_.mutable_pipeline()->set_workers(2);
  AddWorker("w1");
  AddWorker("w2");
  auto id = core_->SubmitJob(spec_, nullptr);
  const JobStatus running = WaitFor(*id, v1::JOB_RUNNING);
  ASSERT_EQ(running.plan().stages_size(), 2);
  const std::string first = running.stages(0).workers(0);
  const std::string cut = running.stages(1).workers(0);
  auto state_of = [&](const std::string& w) {
    for (const WorkerStatus& status : core_->ListWorkers()) {
      if (status.info().worker_id() == w) return status.state();
    }
    return v1::WORKER_STATE_UNSPECIFIED;
  };
  std::vector<std::string> stop;
  // 14 s without a word from `cut` while stage 0 commits a version a second.
  for (int second = 1; second <= 14; ++second) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(Beat(first, "inc-" + first, *id, &stop).ok());
    ASSERT_TRUE(core_
                    ->ReportProgress(first, "inc-" + first,
                                     {Progress(*id, second, false)})
                    .ok());
    core_->Tick();
    if (second == 5) {
      EXPECT_EQ(state_of(cut), v1::WORKER_SUSPECT);
    }
  }
  EXPECT_EQ(state_of(cut), v1::WORKER_UNREACHABLE);
  JobStatus s = *core_->GetJob(*id);
  EXPECT_EQ(s.state(), v1::JOB_RUNNING);
  EXPECT_EQ(s.attempt(), 0);
  EXPECT_EQ(s.restarts_size(), 0);
  EXPECT_EQ(s.stages(1).worker_states(0), v1::WORKER_UNREACHABLE);
  // The partition heals: its heartbeat is accepted, and it is HEALTHY.
  ASSERT_TRUE(Beat(cut, "inc-" + cut, *id, &stop).ok());
  EXPECT_TRUE(stop.empty());
  EXPECT_EQ(state_of(cut), v1::WORKER_HEALTHY);
  // Cut again, and now the job stalls too (stage 0 reports no new
  // version): once the last step is a lease old, the worker is DEAD.
  for (int second = 1; second <= 9; ++second) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(Beat(first, "inc-" + first, *id, &stop).ok());
    ASSERT_TRUE(
        core_->ReportProgress(first, "inc-" + first, {Progress(*id, 14, false)})
            .ok());
    core_->Tick();
  }
  EXPECT_EQ(core_->GetJob(*id)->attempt(), 0);
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  EXPECT_EQ(state_of(cut), v1::WORKER_DEAD);
  s = *core_->GetJob(*id);
  ASSERT_EQ(s.restarts_size(), 1);
  EXPECT_EQ(s.restarts(0).reason(),
            "worker " + cut +
                " (stage 1, replica 0) is DEAD: no heartbeat for 10.0 s, and "
                "its job has committed no step for 10.0 s");
}

TEST_F(CoreTest, CancelInEachState) {
  // One driver thread: jobs are driven one after the other, so once a job
  // submitted later is RUNNING, the driver is done with the earlier ones.
  CoordinatorOptions serial;
  serial.default_wait_for_workers = absl::Seconds(30);
  serial.checkpoint_roots = TestRoots();
  serial.driver_threads = 1;
  RestartWith(serial);
  // PENDING.
  auto pending = core_->SubmitJob(spec_, nullptr);
  EXPECT_EQ(*core_->CancelJob(*pending), v1::JOB_CANCELLED);
  // PLANNING: the profile call blocks until released.
  absl::Notification release;
  calls_.SetBlockProfile(&release);
  auto planning = core_->SubmitJob(spec_, nullptr);
  AddWorker("w1");
  WaitFor(*planning, v1::JOB_PLANNING);
  // Cancelled while the driver is inside the profile call (the fake logs
  // it on entry), not before the driver took the job up.
  const absl::Time profiling = absl::Now() + absl::Seconds(10);
  while (!calls_.Has("profile w1:1") && absl::Now() < profiling) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(calls_.Has("profile w1:1"));
  EXPECT_EQ(*core_->CancelJob(*planning), v1::JOB_CANCELLED);
  release.Notify();
  calls_.SetBlockProfile(nullptr);
  // RUNNING: the worker is told to stop.
  auto running = core_->SubmitJob(spec_, nullptr);
  WaitFor(*running, v1::JOB_RUNNING);
  // The driver ended its work on the cancelled job before it took this
  // one up: it must not have revived it, planned it or started it.
  const JobStatus cancelled = *core_->GetJob(*planning);
  EXPECT_EQ(cancelled.state(), v1::JOB_CANCELLED)
      << "the driver must not revive a cancelled job";
  EXPECT_EQ(cancelled.plan().stages_size(), 0) << cancelled.ShortDebugString();
  EXPECT_FALSE(calls_.Has("start w1:1 " + *planning));
  EXPECT_EQ(*core_->CancelJob(*running), v1::JOB_CANCELLED);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!calls_.Has("stop w1:1 " + *running) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(calls_.Has("stop w1:1 " + *running));
  EXPECT_EQ(core_->CancelJob("job-nope").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CoreTest, WaitingForWorkersTimesOut) {
  spec_.mutable_pipeline()->set_workers(2);
  spec_.mutable_pipeline()->set_wait_for_workers_ms(5000);
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  std::vector<std::string> stop;
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Beat("w1", "inc-w1", "", &stop).ok());
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Beat("w1", "inc-w1", "", &stop).ok());
  core_->Tick();
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_PENDING);
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  EXPECT_EQ(core_->GetJob(*id)->reason(),
            "timed out after 5.0 s waiting for 2 healthy idle worker(s) (1 "
            "available)");
}

TEST_F(CoreTest, BadInputGetsPreciseErrors) {
  JobSpec bad = spec_;
  bad.mutable_model()->mutable_layers(3)->mutable_linear()->set_in_features(5);
  auto rejected = core_->SubmitJob(bad, nullptr);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rejected.status().message(),
            "invalid job spec: model.layers[3].linear.in_features=5 does not "
            "match the previous layer's output 4");
  JobSpec schedule = spec_;
  schedule.mutable_pipeline()->set_schedule("zigzag");
  EXPECT_NE(core_->SubmitJob(schedule, nullptr)
                .status()
                .message()
                .find("pipeline.schedule='zigzag'"),
            std::string::npos);
  JobSpec transport = spec_;
  transport.mutable_pipeline()->set_transport("infiniband");
  EXPECT_EQ(core_->SubmitJob(transport, nullptr).status().message(),
            "invalid job spec: pipeline.transport='infiniband' is not one of: "
            "gloo, nccl");
  EXPECT_EQ(core_->GetJob("job-x").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->GetPlan("job-x").status().code(),
            absl::StatusCode::kNotFound);

  AddWorker("w1");
  AddWorker("w2");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  // w2 is not in the job.
  const absl::Status wrong =
      core_->ReportProgress("w2", "inc-w2", {Progress(*id, 1, false)});
  EXPECT_EQ(wrong.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(wrong.message(), "worker w2 reports progress for job " + *id +
                                 ", which it is not assigned to");
  EXPECT_EQ(core_->ReportProgress("w1", "stale", {}).code(),
            absl::StatusCode::kPermissionDenied);
  StageProgress unknown = Progress("job-none", 1, false);
  EXPECT_EQ(core_->ReportProgress("w1", "inc-w1", {unknown}).code(),
            absl::StatusCode::kNotFound);
  // The job is unharmed.
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_RUNNING);
  // A non-finite loss fails it (the default policy) with the reason.
  StageProgress error = Progress(*id, 2, false);
  error.set_error("non-finite loss at step 2: the loss became nan");
  error.mutable_failure()->set_cause(v1::FAILURE_NONFINITE_LOSS);
  ASSERT_TRUE(core_->ReportProgress("w1", "inc-w1", {error}).ok());
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_FAILED);
  EXPECT_EQ(core_->GetJob(*id)->reason(),
            "stage 0 replica 0 on worker w1 failed: non-finite loss at step 2: "
            "the loss became nan");
  // Resuming from what is not a checkpoint is refused, naming it.
  auto resume = core_->SubmitJob(spec_, nullptr, TempPath("no-such-ckpt"));
  EXPECT_EQ(resume.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(resume.status().message().find("no-such-ckpt"), std::string::npos)
      << resume.status();
  EXPECT_EQ(core_->SubmitJob(spec_, nullptr, *id).status().message(),
            "job '" + *id + "' has no committed checkpoint");
  JobSpec bad_checkpoint = spec_;
  bad_checkpoint.mutable_checkpoint()->set_every_steps(10);
  EXPECT_EQ(core_->SubmitJob(bad_checkpoint, nullptr).status().message(),
            "invalid job spec: checkpoint.every_steps is set but "
            "checkpoint.dir is not: say where the checkpoints go");
}

// The coordinator does not open data files: a job whose data lives only on
// the workers' hosts is accepted, and its length comes from the workers.
TEST_F(CoreTest, DataOnlyOnTheWorkersIsNotOpenedHere) {
  JobSpec spec = spec_;
  spec.mutable_data()->Clear();
  spec.mutable_data()->set_fashion_mnist_dir("/exists/only/on/the/workers");
  spec.set_max_steps(0);
  spec.set_epochs(1);
  spec.mutable_model()->mutable_layers(1)->mutable_linear()->set_in_features(
      784);
  auto id = core_->SubmitJob(spec, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(core_->GetJob(*id)->total_steps(), 0);  // Not known yet.
  AddWorker("w1");
  WaitFor(*id, v1::JOB_RUNNING);
  StageProgress p = Progress(*id, 1, false);
  p.set_total_steps(937);
  ASSERT_TRUE(core_->ReportProgress("w1", "inc-w1", {p}).ok());
  EXPECT_EQ(core_->GetJob(*id)->total_steps(), 937);
}

TEST_F(CoreTest, AssignFailureFailsTheJobOnceNoRestartsAreLeft) {
  calls_.SetAssignStatus(absl::UnavailableError("connection refused"));
  AddWorker("w1");
  spec_.mutable_fault_tolerance()->set_max_restarts(0);
  auto id = core_->SubmitJob(spec_, nullptr);
  JobStatus s = WaitFor(*id, v1::JOB_FAILED);
  EXPECT_EQ(s.reason(),
            "assigning stage 0 replica 0 to worker at w1:1 failed: "
            "connection refused");
  EXPECT_TRUE(core_->ListWorkers()[0].job_id().empty());
  spec_.mutable_fault_tolerance()->set_max_restarts(2);
  auto again = core_->SubmitJob(spec_, nullptr);
  s = WaitFor(*again, v1::JOB_FAILED);
  EXPECT_EQ(s.restarts_size(), 2);
  EXPECT_EQ(s.reason(),
            "assigning stage 0 replica 0 to worker at w1:1 failed: "
            "connection refused (after 2 restart(s), the most "
            "fault_tolerance.max_restarts allows)");
}

// A worker still ending an earlier attempt of the job refuses the new
// one as busy: asked again, it takes it, and no restart is spent on that;
// one that stays busy past worker_rpc_timeout fails the attempt as before.
TEST_F(CoreTest, AnAssignmentRefusedAsBusyIsAskedAgain) {
  calls_.SetBusyRefusals(3);
  AddWorker("w1");
  spec_.mutable_fault_tolerance()->set_max_restarts(0);
  auto id = core_->SubmitJob(spec_, nullptr);
  const JobStatus s = WaitFor(*id, v1::JOB_RUNNING);
  EXPECT_EQ(s.restarts_size(), 0);
  EXPECT_TRUE(calls_.Has("start w1:1 " + *id));
  ASSERT_TRUE(
      core_->ReportProgress("w1", "inc-w1", {Progress(*id, 16, true)}).ok());

  CoordinatorOptions o;
  o.default_wait_for_workers = absl::Seconds(30);
  o.checkpoint_roots = TestRoots();
  o.worker_rpc_timeout = absl::Milliseconds(400);
  RestartWith(o);
  AddWorker("w1");
  calls_.SetBusyRefusals(1000);
  const absl::Time start = absl::Now();
  auto busy = core_->SubmitJob(spec_, nullptr);
  const JobStatus failed = WaitFor(*busy, v1::JOB_FAILED);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(failed.reason(),
            absl::StrCat("assigning stage 0 replica 0 to worker at w1:1 "
                         "failed: this worker is busy with job ",
                         *busy));
}

TEST_F(CoreTest, HeartbeatTellsWorkersToStopFinishedJobs) {
  AddWorker("w1");
  std::vector<std::string> stop;
  ASSERT_TRUE(Beat("w1", "inc-w1", "job-gone", &stop).ok());
  EXPECT_EQ(stop, std::vector<std::string>{"job-gone"});
  EXPECT_EQ(Beat("w1", "other", "", &stop).code(),
            absl::StatusCode::kFailedPrecondition);
}

// ---- The queue: ids, owners, limits, fairness, pages (jobs/queue.h) ----

TEST_F(CoreTest, JobIdsCarrySixtyFourRandomBits) {
  auto first = core_->SubmitJob(spec_, nullptr);
  auto second = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(first.ok() && second.ok());
  const std::regex form("job-[0-9a-f]+-([0-9]+)-[0-9a-f]{16}");
  std::smatch m1, m2;
  ASSERT_TRUE(std::regex_match(*first, m1, form)) << *first;
  ASSERT_TRUE(std::regex_match(*second, m2, form)) << *second;
  EXPECT_EQ(std::stoi(m2[1]), std::stoi(m1[1]) + 1) << "readable order";
  // Another coordinator started at the same second numbers its jobs the
  // same: only the random part tells them apart.
  Restart();
  auto again = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->substr(0, again->size() - 16),
            first->substr(0, first->size() - 16));
  EXPECT_NE(*again, *first);
}

// The owner is shown in the job's status and kept by the journal, for
// finished and unfinished jobs, and counts against the per-user limit
// after a restart.
TEST_F(CoreTest, OwnersAreShownAndJournaled) {
  const std::string path = TempPath("core_test_owner.journal");
  std::remove(path.c_str());
  CoordinatorOptions o;
  o.max_jobs_per_user = 1;
  RestartWith(o);
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  auto alice = core_->SubmitJob(spec_, nullptr, "", "alice");
  auto bob = core_->SubmitJob(spec_, nullptr, "", "bob");
  ASSERT_TRUE(alice.ok() && bob.ok());
  ASSERT_EQ(*core_->CancelJob(*bob), v1::JOB_CANCELLED);
  EXPECT_EQ(core_->GetJob(*alice)->owner(), "alice");
  EXPECT_EQ(core_->GetJob(*bob)->owner(), "bob");
  RestartWith(o);
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  EXPECT_EQ(core_->GetJob(*alice)->state(), v1::JOB_PENDING);
  EXPECT_EQ(core_->GetJob(*alice)->owner(), "alice");
  EXPECT_EQ(core_->GetJob(*bob)->owner(), "bob");
  EXPECT_EQ(core_->SubmitJob(spec_, nullptr, "", "alice").status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(core_->SubmitJob(spec_, nullptr, "", "bob").ok());
}

TEST_F(CoreTest, TheQueueIsBoundedInAllAndPerUser) {
  CoordinatorOptions o;
  o.max_pending_jobs = 5;
  o.max_jobs_per_user = 2;
  RestartWith(o);
  auto a1 = core_->SubmitJob(spec_, nullptr, "", "alice");
  ASSERT_TRUE(a1.ok());
  ASSERT_TRUE(core_->SubmitJob(spec_, nullptr, "", "alice").ok());
  const absl::Status third =
      core_->SubmitJob(spec_, nullptr, "", "alice").status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.message(),
            "user 'alice' has 2 unfinished jobs, the most one user may have "
            "(--max_jobs_per_user); submit again once some have finished or "
            "cancel some");
  // A finished job no longer counts.
  ASSERT_EQ(*core_->CancelJob(*a1), v1::JOB_CANCELLED);
  EXPECT_TRUE(core_->SubmitJob(spec_, nullptr, "", "alice").ok());
  // Callers without a credential share one allowance.
  ASSERT_TRUE(core_->SubmitJob(spec_, nullptr).ok());
  ASSERT_TRUE(core_->SubmitJob(spec_, nullptr).ok());
  EXPECT_EQ(core_->SubmitJob(spec_, nullptr).status().code(),
            absl::StatusCode::kResourceExhausted);
  // 4 pending: bob gets the fifth place, carol finds the queue full.
  ASSERT_TRUE(core_->SubmitJob(spec_, nullptr, "", "bob").ok());
  const absl::Status full =
      core_->SubmitJob(spec_, nullptr, "", "carol").status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(),
            "the queue is full: 5 jobs are pending, the most the coordinator "
            "accepts (--max_pending_jobs); submit again once some have "
            "started");
  // Jobs that leave the queue for workers make room.
  AddWorker("w1");
  const std::string started = core_->ListWorkers()[0].job_id();
  ASSERT_FALSE(started.empty());
  WaitFor(started, v1::JOB_RUNNING);
  EXPECT_TRUE(core_->SubmitJob(spec_, nullptr, "", "carol").ok());
}

// The issue's attack: one job asking for 100,000 workers with a huge wait
// blocked every job after it. Now the 1-worker job behind it starts at
// once, and the big one's wait is capped.
TEST_F(CoreTest, AJobAskingForMoreWorkersThanExistBlocksNoOne) {
  CoordinatorOptions o;
  o.max_wait_for_workers = absl::Seconds(20);
  o.reserve_after = absl::Seconds(5);
  RestartWith(o);
  AddWorker("w1");
  AddWorker("w2");
  JobSpec huge = spec_;
  huge.mutable_pipeline()->set_workers(100000);
  huge.mutable_pipeline()->set_wait_for_workers_ms(int64_t{7} * 86400000);
  auto big = core_->SubmitJob(huge, nullptr);
  ASSERT_TRUE(big.ok()) << big.status();
  auto small = core_->SubmitJob(spec_, nullptr);
  WaitFor(*small, v1::JOB_RUNNING);
  // Long past reserve_after it holds nothing: it could never run here.
  Beat(10, {"w1", "w2"});
  auto later = core_->SubmitJob(spec_, nullptr);
  WaitFor(*later, v1::JOB_RUNNING);
  EXPECT_EQ(core_->GetJob(*big)->state(), v1::JOB_PENDING);
  Beat(10, {"w1", "w2"});
  const JobStatus failed = *core_->GetJob(*big);
  EXPECT_EQ(failed.state(), v1::JOB_FAILED);
  EXPECT_EQ(failed.reason(),
            "timed out after 20.0 s waiting for 100000 healthy idle "
            "worker(s) (0 available)");
}

// Backfill, and the hold that keeps a big job from starving: once it has
// waited reserve_after, later small jobs no longer take the idle workers
// it needs, and it starts when the busy ones free up.
TEST_F(CoreTest, ALongWaitingJobHoldsTheWorkersItNeeds) {
  CoordinatorOptions o;
  o.reserve_after = absl::Seconds(5);
  o.default_wait_for_workers = absl::Seconds(60);
  RestartWith(o);
  const std::vector<std::string> all = {"w1", "w2", "w3"};
  for (const std::string& w : all) AddWorker(w);
  auto first = core_->SubmitJob(spec_, nullptr);
  WaitFor(*first, v1::JOB_RUNNING);  // On w1.
  JobSpec three = spec_;
  three.mutable_pipeline()->set_workers(3);
  auto big = core_->SubmitJob(three, nullptr);
  // Young, the big job lets a later one start on an idle worker.
  auto backfilled = core_->SubmitJob(spec_, nullptr);
  WaitFor(*backfilled, v1::JOB_RUNNING);  // On w2.
  EXPECT_EQ(core_->GetJob(*big)->state(), v1::JOB_PENDING);
  Beat(6, all);
  // Past reserve_after it holds the idle w3: a new job waits behind it.
  auto held = core_->SubmitJob(spec_, nullptr);
  Beat(1, all);
  EXPECT_EQ(core_->GetJob(*held)->state(), v1::JOB_PENDING);
  ASSERT_TRUE(
      core_->ReportProgress("w1", "inc-w1", {Progress(*first, 16, true)}).ok());
  ASSERT_TRUE(
      core_->ReportProgress("w2", "inc-w2", {Progress(*backfilled, 16, true)})
          .ok());
  // Every worker is free: the big job takes them, the new one still waits.
  const JobStatus started = WaitFor(*big, v1::JOB_RUNNING);
  EXPECT_EQ(started.workers(), 3);
  EXPECT_EQ(core_->GetJob(*held)->state(), v1::JOB_PENDING);
}

// Pages hold every job exactly once, in submission order, while jobs are
// submitted between the pages.
TEST_F(CoreTest, ListJobsPagesThroughEveryJobOnceWhileJobsAreAdded) {
  std::vector<std::string> submitted;
  auto submit = [&] {
    auto id = core_->SubmitJob(spec_, nullptr);
    ASSERT_TRUE(id.ok()) << id.status();
    submitted.push_back(*id);
  };
  for (int i = 0; i < 23; ++i) submit();
  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    auto page = core_->ListJobs(7, token);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_LE(page->jobs.size(), 7u);
    for (const JobStatus& j : page->jobs) listed.push_back(j.job_id());
    token = page->next_page_token;
    if (++pages <= 3) {
      submit();
      submit();
    }
  } while (!token.empty() && pages < 100);
  EXPECT_EQ(listed, submitted);
  EXPECT_EQ(pages, 5);  // 29 jobs, 7 a page.
  // The default page holds them all; a last page has no token.
  auto all = core_->ListJobs(0, "");
  EXPECT_EQ(all->jobs.size(), submitted.size());
  EXPECT_EQ(all->next_page_token, "");
}

// Pages are cut by bytes too (statuses with loss curves are large): each
// holds at least one job, and every job is listed once.
TEST_F(CoreTest, ListJobsPagesStayUnderTheirByteLimit) {
  CoordinatorOptions o;
  o.max_jobs_page_bytes = 2000;
  RestartWith(o);
  JobSpec named = spec_;
  named.set_name(std::string(250, 'n'));
  std::vector<std::string> submitted;
  for (int i = 0; i < 12; ++i) {
    submitted.push_back(*core_->SubmitJob(named, nullptr));
  }
  const size_t one = core_->GetJob(submitted[0])->ByteSizeLong();
  ASSERT_GT(one, 300u);
  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    ++pages;
    auto page = core_->ListJobs(1000, token);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_FALSE(page->jobs.empty());
    size_t bytes = 0;
    for (const JobStatus& j : page->jobs) {
      listed.push_back(j.job_id());
      bytes += j.ByteSizeLong();
    }
    EXPECT_LE(bytes, 2000u);
    token = page->next_page_token;
  } while (!token.empty() && pages < 100);
  EXPECT_EQ(listed, submitted);
  EXPECT_GE(pages, 2) << "12 statuses of " << one << " bytes in 2000";
  // One job larger than the limit still gets its page.
  o.max_jobs_page_bytes = 10;
  RestartWith(o);
  ASSERT_TRUE(core_->SubmitJob(named, nullptr).ok());
  ASSERT_TRUE(core_->SubmitJob(named, nullptr).ok());
  auto first = core_->ListJobs(0, "");
  EXPECT_EQ(first->jobs.size(), 1u);
  EXPECT_EQ(core_->ListJobs(0, first->next_page_token)->jobs.size(), 1u);
}

TEST_F(CoreTest, ListJobsRefusesBadPageSizesAndTokens) {
  ASSERT_TRUE(core_->SubmitJob(spec_, nullptr).ok());
  ASSERT_TRUE(core_->SubmitJob(spec_, nullptr).ok());
  const auto negative = core_->ListJobs(-1, "");
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.status().message(),
            "ListJobsRequest.page_size=-1 must not be negative");
  const auto garbage = core_->ListJobs(1, "job-1");
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(garbage.status().message().rfind("ListJobsRequest.page_token ", 0),
            0u);
  // A token of an earlier run of the coordinator.
  const std::string token = core_->ListJobs(1, "")->next_page_token;
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(core_->ListJobs(1, token)->jobs.size(), 1u);
  Restart();
  EXPECT_EQ(core_->ListJobs(1, token).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoreTest, OversizedStringsAreRefusedNamingTheField) {
  JobSpec named = spec_;
  named.set_name(std::string(100 << 10, 'x'));
  const absl::Status s = core_->SubmitJob(named, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "invalid job spec: name is 102400 bytes, more than the 256 "
            "allowed");
  EXPECT_EQ(core_->SubmitJob(spec_, nullptr, std::string(5000, 'r'))
                .status()
                .message(),
            "resume is 5000 bytes, more than the 4096 allowed");
  EXPECT_EQ(core_->SubmitJob(spec_, nullptr, "", std::string(300, 'o'))
                .status()
                .message(),
            "owner is 300 bytes, more than the 256 allowed");
  EXPECT_TRUE(core_->ListJobs(0, "")->jobs.empty());
}

// ---- Issue 14: who may report progress and use the store ----

// The issue's regression: a forged ReportProgress marked a 3000-step job
// SUCCEEDED with accuracy 0.999. Only the incarnation registered for the
// worker, reporting for the stage it runs, with values in range, counts.
TEST_F(CoreTest, ForgedProgressIsRefusedAndTheJobUnharmed) {
  spec_.set_epochs(0);
  spec_.set_max_steps(3000);
  AddWorker("w1");
  AddWorker("w2");
  auto id = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  WaitFor(*id, v1::JOB_RUNNING);
  StageProgress forged = Progress(*id, 3000, true);
  forged.set_test_accuracy(0.999);
  struct Case {
    std::string worker, incarnation;
    std::function<void(StageProgress*)> change;
    absl::StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {"w1", "guessed", [](StageProgress*) {},
       absl::StatusCode::kPermissionDenied,
       "worker w1 reports progress as incarnation guessed, which is not its "
       "registered incarnation"},
      {"w2", "inc-w2", [](StageProgress*) {},
       absl::StatusCode::kPermissionDenied,
       "worker w2 reports progress for job " + *id +
           ", which it is not assigned to"},
      {"w1", "inc-w1", [](StageProgress* p) { p->set_stage(1); },
       absl::StatusCode::kPermissionDenied,
       "worker w1 reports progress for stage 1 replica 0 of job " + *id +
           "; it runs stage 0 replica 0"},
      {"w1", "inc-w1", [](StageProgress* p) { p->set_replica(3); },
       absl::StatusCode::kPermissionDenied,
       "worker w1 reports progress for stage 0 replica 3 of job " + *id +
           "; it runs stage 0 replica 0"},
      {"w1", "inc-w1", [](StageProgress* p) { p->set_attempt(7); },
       absl::StatusCode::kPermissionDenied,
       "worker w1 reports progress for attempt 7 of job " + *id +
           ", which has not started (it runs attempt 0)"},
      {"w1", "inc-w1",
       [](StageProgress* p) {
         p->set_committed_version(std::numeric_limits<int64_t>::max());
       },
       absl::StatusCode::kInvalidArgument,
       "stages[0].committed_version=9223372036854775807 is outside [0, 3000] "
       "(the job's total steps)"},
      {"w1", "inc-w1",
       [](StageProgress* p) {
         p->set_utilization(-std::numeric_limits<double>::infinity());
       },
       absl::StatusCode::kInvalidArgument,
       "stages[0].utilization=-inf is not a finite number in [0, 1.05]"},
      // Finished at step 170 of 3000, with a final accuracy (issue 22,
      // item 8): refused, so the job's figures cannot be fixed early.
      {"w1", "inc-w1",
       [](StageProgress* p) {
         p->set_committed_version(170);
         p->set_minibatches_done(170);
       },
       absl::StatusCode::kInvalidArgument,
       "stages[0].finished is true at committed_version 170; a stage "
       "finishes only at the final version, 3000 (the job's total steps)"},
      {"ghost", "x", [](StageProgress*) {}, absl::StatusCode::kNotFound,
       "worker ghost is not registered"},
      {std::string(4096, 'w'), "x", [](StageProgress*) {},
       absl::StatusCode::kInvalidArgument, ""},
  };
  for (const Case& c : cases) {
    StageProgress p = forged;
    c.change(&p);
    const absl::Status s = core_->ReportProgress(c.worker, c.incarnation, {p});
    EXPECT_EQ(s.code(), c.code) << s;
    if (!c.message.empty()) {
      EXPECT_EQ(s.message(), c.message);
    }
  }
  // All or nothing: a good report next to a forged one changes nothing.
  StageProgress bad_stage = forged;
  bad_stage.set_stage(1);
  EXPECT_EQ(core_
                ->ReportProgress("w1", "inc-w1",
                                 {Progress(*id, 10, false), bad_stage})
                .code(),
            absl::StatusCode::kPermissionDenied);
  JobStatus unharmed = *core_->GetJob(*id);
  EXPECT_EQ(unharmed.state(), v1::JOB_RUNNING);
  EXPECT_EQ(unharmed.step(), 0);
  EXPECT_EQ(unharmed.test_accuracy(), 0);
  // The worker itself reports as ever, and the job ends as it says.
  ASSERT_TRUE(
      core_->ReportProgress("w1", "inc-w1", {Progress(*id, 3000, true)}).ok());
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(core_->GetJob(*id)->test_accuracy(), 0.75);
}

// The final figures are taken once, from the first finished report of the
// output stage: a second one (a retry, or a forgery) changes nothing.
TEST_F(CoreTest, FinalFiguresAreTakenOnce) {
  spec_.set_epochs(0);
  spec_.set_max_steps(16);
  spec_.mutable_pipeline()->set_workers(2);
  AddWorker("w1");
  AddWorker("w2");
  auto id = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  WaitFor(*id, v1::JOB_RUNNING);
  const JobStatus running = *core_->GetJob(*id);
  ASSERT_EQ(running.stages_size(), 2);
  const std::string out = running.stages(1).workers(0);
  const std::string in = running.stages(0).workers(0);
  StageProgress last = Progress(*id, 16, true);
  last.set_stage(1);
  ASSERT_TRUE(core_->ReportProgress(out, "inc-" + out, {last}).ok());
  last.set_test_accuracy(0.999);
  ASSERT_TRUE(core_->ReportProgress(out, "inc-" + out, {last}).ok());
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_RUNNING);
  ASSERT_TRUE(
      core_->ReportProgress(in, "inc-" + in, {Progress(*id, 16, true)}).ok());
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(core_->GetJob(*id)->test_accuracy(), 0.75);
}

// A job's own worker's late report, after the job finished, is accepted
// and ignored (it was released with the job); anyone else's is refused.
TEST_F(CoreTest, LateReportsOfAFinishedJob) {
  AddWorker("w1");
  AddWorker("w2");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  ASSERT_TRUE(
      core_->ReportProgress("w1", "inc-w1", {Progress(*id, 16, true)}).ok());
  ASSERT_EQ(core_->GetJob(*id)->state(), v1::JOB_SUCCEEDED);
  StageProgress late = Progress(*id, 16, true);
  late.set_test_accuracy(0.25);
  EXPECT_TRUE(core_->ReportProgress("w1", "inc-w1", {late}).ok());
  EXPECT_EQ(core_->ReportProgress("w2", "inc-w2", {late}).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(core_->GetJob(*id)->test_accuracy(), 0.75);
}

// What a new incarnation of a running worker's id does: it fences the old
// one and the job restarts (that is how a restarted worker process takes
// its name back). Who may register an id is decided by the caller's
// credential in the gRPC adapter, so a stranger cannot do this; the job's
// status does not tell the new incarnation, and the old one's reports are
// refused.
TEST_F(CoreTest, ANewIncarnationOfARunningWorkerRestartsItsJob) {
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  WorkerInfo again;
  again.set_worker_id("w1");
  again.set_incarnation("inc-new");
  again.set_version("0.1.0");
  again.set_address("w1:1");
  ASSERT_TRUE(core_->RegisterWorker(again).ok());
  const JobStatus s = WaitFor(*id, v1::JOB_RUNNING);
  EXPECT_EQ(s.attempt(), 1);
  ASSERT_EQ(s.restarts_size(), 1);
  EXPECT_EQ(s.restarts(0).reason(),
            "worker w1 (stage 0, replica 0) is FENCED: superseded by a new "
            "incarnation");
  EXPECT_EQ(
      core_->ReportProgress("w1", "inc-w1", {Progress(*id, 1, false)}).code(),
      absl::StatusCode::kPermissionDenied);
}

TEST_F(CoreTest, RegistrationFieldsAreBoundedAndDeadWorkersForgotten) {
  WorkerInfo info;
  info.set_worker_id("w1");
  info.set_incarnation("i");
  info.set_version("0.1.0");
  info.set_address("w1:1");
  info.mutable_device()->set_name(std::string(4096, 'd'));
  const absl::Status s = core_->RegisterWorker(info);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("info.device.name has 4096 bytes; the limit is "
                             "256"),
            std::string::npos)
      << s;
  v1::StageClaim claim;
  claim.set_job_id("job/../../x");
  info.mutable_device()->clear_name();
  EXPECT_EQ(core_->RegisterWorker(info, &claim).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::string> stop;
  EXPECT_EQ(Beat("w1", "i", std::string(4096, 'j'), &stop).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(core_->ListWorkers().empty());
  // w1 runs a job and dies: the job restarts without it; ten minutes
  // later nobody lists it, and the job is untouched by its going.
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  AddWorker("w2");
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(Beat("w2", "inc-w2", "", &stop).ok());
    core_->Tick();
  }
  JobStatus restarted = WaitFor(*id, v1::JOB_RUNNING);
  ASSERT_EQ(restarted.attempt(), 1);
  EXPECT_EQ(restarted.stages(0).workers(0), "w2");
  ASSERT_EQ(core_->ListWorkers().size(), 2u);
  for (int i = 0; i < 600; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(Beat("w2", "inc-w2", *id, &stop, 1).ok());
    core_->Tick();
  }
  const std::vector<WorkerStatus> left = core_->ListWorkers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].info().worker_id(), "w2");
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_RUNNING);
  EXPECT_EQ(core_->GetJob(*id)->attempt(), 1);
  // Its id registers afresh.
  AddWorker("w1");
  EXPECT_EQ(core_->ListWorkers().size(), 2u);
}

TEST_F(CoreTest, StoreKeysBelongToTheAttemptAJobRuns) {
  AddWorker("w1");
  AddWorker("w2");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  const std::string key = "jobs/" + *id + "/a0/gloo/0";
  // The assigned worker may use the job's keys; no one else.
  EXPECT_TRUE(core_->CheckStoreAccess("w1", key).ok());
  const absl::Status other = core_->CheckStoreAccess("w2", key);
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(other.message(), "worker w2 may not use the store keys of job " +
                                 *id +
                                 ": it is not a live worker assigned to that "
                                 "job");
  EXPECT_EQ(core_->CheckStoreAccess("ghost", key).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(core_->CheckStoreAccess("w1", "jobs/job-other/a0/x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(core_->CheckStoreAccess("w1", "elsewhere").code(),
            absl::StatusCode::kInvalidArgument);
  // Writes go to the attempt running now, and nowhere else: not a job
  // that does not exist yet, nor another attempt.
  ASSERT_TRUE(core_->StoreSet(key, "10.0.0.1:5000").ok());
  EXPECT_EQ(*core_->StoreAdd("jobs/" + *id + "/a0/barrier", 1), 1);
  EXPECT_EQ(*core_->StoreGet(key, absl::Now()), "10.0.0.1:5000");
  EXPECT_EQ(core_->StoreSet("jobs/job-future/a0/gloo/0", "x").code(),
            absl::StatusCode::kNotFound);
  const absl::Status later = core_->StoreSet("jobs/" + *id + "/a1/k", "x");
  EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(later.message(), "store key 'jobs/" + *id +
                                 "/a1/k' is of attempt 1 of job " + *id +
                                 ", which is not running (the job is RUNNING "
                                 "at attempt 0)");
  EXPECT_EQ(core_->store()->keys_of_job(*id), 2u);
  // The job ends: its keys go, and no more can be set.
  ASSERT_EQ(*core_->CancelJob(*id), v1::JOB_CANCELLED);
  EXPECT_EQ(core_->store()->keys(), 0u);
  EXPECT_EQ(core_->StoreSet(key, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_->CheckStoreAccess("w1", key).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(CoreTest, ARestartDeletesTheEndedAttemptsKeys) {
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  ASSERT_TRUE(core_->StoreSet("jobs/" + *id + "/a0/gloo/0", "x").ok());
  calls_.SetDead("w1:1");
  StageProgress error = Progress(*id, 2, false);
  error.set_error("peer gone");
  ASSERT_TRUE(core_->ReportProgress("w1", "inc-w1", {error}).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (core_->GetJob(*id)->attempt() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(core_->GetJob(*id)->attempt(), 1);
  EXPECT_EQ(core_->store()->keys(), 0u);
  EXPECT_EQ(core_->StoreSet("jobs/" + *id + "/a0/gloo/0", "x").code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace aqueduct
