// The coordinator's job state machine and ledger with a fake clock and fake
// worker clients.
#include "coordinator/core.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/synchronization/notification.h"
#include "common/checkpoint.h"
#include "gtest/gtest.h"
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

class CoreTest : public ::testing::Test {
 protected:
  CoreTest() {
    CoordinatorOptions o;
    o.registry.version = "0.1.0";
    o.default_wait_for_workers = absl::Seconds(30);
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

  // A fresh coordinator over the same clock and fake workers.
  void Restart() {
    core_.reset();
    CoordinatorOptions o;
    o.registry.version = "0.1.0";
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

  FakeClock clock_;
  Calls calls_;
  std::unique_ptr<CoordinatorCore> core_;
  JobSpec spec_;
};

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
  const std::vector<JobStatus> jobs = core_->ListJobs();
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
  ASSERT_TRUE(core_->Heartbeat("w1", "inc-w1", *running, &stop).ok());
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
  // Compacted to each job's submission, start and final status.
  auto contents = JobJournal::Read(path);
  ASSERT_TRUE(contents.ok());
  EXPECT_EQ(contents->records.size(), 9u);
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
    ASSERT_TRUE(core_->Heartbeat("w2", "inc-w2", "", &stop).ok());
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
  ASSERT_TRUE(core_->Heartbeat("w2", "inc-w2", *id, &stop).ok());
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
  auto written = WriteCheckpointFile(version_dir, StageFileName(0, 0), file, 0,
                                     0, spec_.model().layers_size());
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
  auto manifest = ReadManifest(version_dir);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->version(), 4);
  // w1 dies: w2 takes its place from version 4; the ledger rolls back.
  std::vector<std::string> stop;
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(core_->Heartbeat("w2", "inc-w2", "", &stop).ok());
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
  ASSERT_TRUE(core_->Heartbeat("w1", "inc-w1", *id, &stop, 0, &at).ok());
  EXPECT_EQ(at, 0);  // Nothing asked yet.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(core_->Heartbeat("w1", "inc-w1", *id, &stop, 0, &at).ok());
    ASSERT_TRUE(core_
                    ->ReportProgress("w1", "inc-w1",
                                     {Progress(*id, 10 * (i + 1), false)})
                    .ok());
    core_->Tick();
  }
  ASSERT_TRUE(core_->Heartbeat("w1", "inc-w1", *id, &stop, 0, &at).ok());
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

TEST_F(CoreTest, CancelInEachState) {
  // PENDING.
  auto pending = core_->SubmitJob(spec_, nullptr);
  EXPECT_EQ(*core_->CancelJob(*pending), v1::JOB_CANCELLED);
  // PLANNING: the profile call blocks until released.
  absl::Notification release;
  calls_.SetBlockProfile(&release);
  auto planning = core_->SubmitJob(spec_, nullptr);
  AddWorker("w1");
  WaitFor(*planning, v1::JOB_PLANNING);
  EXPECT_EQ(*core_->CancelJob(*planning), v1::JOB_CANCELLED);
  release.Notify();
  calls_.SetBlockProfile(nullptr);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(core_->GetJob(*planning)->state(), v1::JOB_CANCELLED)
      << "the driver must not revive a cancelled job";
  // RUNNING: the worker is told to stop.
  auto running = core_->SubmitJob(spec_, nullptr);
  WaitFor(*running, v1::JOB_RUNNING);
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
  ASSERT_TRUE(core_->Heartbeat("w1", "inc-w1", "", &stop).ok());
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(core_->Heartbeat("w1", "inc-w1", "", &stop).ok());
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
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(wrong.message(),
            "worker w2 reports progress for stage 0 replica 0 of job " + *id +
                ", which is not its assignment");
  EXPECT_EQ(core_->ReportProgress("w1", "stale", {}).code(),
            absl::StatusCode::kFailedPrecondition);
  StageProgress unknown = Progress("job-none", 1, false);
  EXPECT_EQ(core_->ReportProgress("w1", "inc-w1", {unknown}).code(),
            absl::StatusCode::kNotFound);
  // The job is unharmed.
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_RUNNING);
  // A non-finite loss fails it (the default policy) with the reason.
  StageProgress error = Progress(*id, 2, false);
  error.set_error("non-finite loss at step 2: the loss became nan");
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
            "job " + *id + " has no committed checkpoint");
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

TEST_F(CoreTest, HeartbeatTellsWorkersToStopFinishedJobs) {
  AddWorker("w1");
  std::vector<std::string> stop;
  ASSERT_TRUE(core_->Heartbeat("w1", "inc-w1", "job-gone", &stop).ok());
  EXPECT_EQ(stop, std::vector<std::string>{"job-gone"});
  EXPECT_EQ(core_->Heartbeat("w1", "other", "", &stop).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace aqueduct
