// The coordinator's job state machine and ledger with a fake clock and fake
// worker clients.
#include "coordinator/core.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/synchronization/notification.h"
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
    return calls_->AssignStatus();
  }
  absl::Status StartJob(const std::string& job, absl::Duration) override {
    calls_->Add(absl::StrCat("start ", address_, " ", job));
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string& job, const std::string&,
                       absl::Duration) override {
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

  void AddWorker(const std::string& id) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_incarnation("inc-" + id);
    info.set_version("0.1.0");
    info.set_address(id + ":1");
    ASSERT_TRUE(core_->RegisterWorker(info).ok());
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
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/core_test.journal";
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
  // Left running when the coordinator goes away.
  auto running = core_->SubmitJob(spec_, nullptr);
  WaitFor(*running, v1::JOB_RUNNING);
  core_.reset();

  CoordinatorOptions o;
  o.registry.version = "0.1.0";
  core_ = std::make_unique<CoordinatorCore>(
      o, &clock_, [this](const std::string& address) {
        return std::make_unique<FakeWorkerClient>(address, &calls_);
      });
  ASSERT_TRUE(core_->OpenJournal(path).ok());
  const std::vector<JobStatus> jobs = core_->ListJobs();
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].job_id(), *done);
  EXPECT_EQ(jobs[0].SerializeAsString(), before.SerializeAsString());
  EXPECT_TRUE(core_->GetPlan(*done).ok());
  EXPECT_EQ(jobs[1].state(), v1::JOB_CANCELLED);
  EXPECT_EQ(jobs[1].reason(), "cancelled by a client");
  EXPECT_EQ(jobs[2].state(), v1::JOB_FAILED);
  EXPECT_EQ(jobs[2].reason(),
            "the coordinator restarted before the job finished; submit it "
            "again");
  // A worker still running the old job is told to stop it.
  AddWorker("w1");
  std::vector<std::string> stop;
  ASSERT_TRUE(core_->Heartbeat("w1", "inc-w1", *running, &stop).ok());
  EXPECT_EQ(stop, std::vector<std::string>{*running});
  // Same clock, same id prefix: the next id continues after the old ones.
  auto next = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(next.ok());
  EXPECT_NE(*next, *done);
  EXPECT_NE(*next, *cancelled);
  EXPECT_NE(*next, *running);
  // Compacted to each job's submission and final status, plus the new one.
  auto contents = JobJournal::Read(path);
  ASSERT_TRUE(contents.ok());
  EXPECT_EQ(contents->records.size(), 7u);
}

TEST_F(CoreTest, WorkerDeathFailsTheJobNamingWorkerAndStage) {
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  WaitFor(*id, v1::JOB_RUNNING);
  clock_.Advance(absl::Seconds(11));
  core_->Tick();
  JobStatus failed = *core_->GetJob(*id);
  EXPECT_EQ(failed.state(), v1::JOB_FAILED);
  EXPECT_EQ(failed.reason(),
            "worker w1 (stage 0, replica 0) is DEAD: no heartbeat for 11.0 s");
  EXPECT_EQ(core_->ListWorkers()[0].state(), v1::WORKER_DEAD);
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
  // A stage error fails it with the reason.
  StageProgress error = Progress(*id, 2, false);
  error.set_error("loss became nan");
  ASSERT_TRUE(core_->ReportProgress("w1", "inc-w1", {error}).ok());
  EXPECT_EQ(core_->GetJob(*id)->reason(),
            "stage 0 replica 0 on worker w1 failed: loss became nan");
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

TEST_F(CoreTest, AssignFailureFailsTheJob) {
  calls_.SetAssignStatus(absl::UnavailableError("connection refused"));
  AddWorker("w1");
  auto id = core_->SubmitJob(spec_, nullptr);
  JobStatus s = WaitFor(*id, v1::JOB_FAILED);
  EXPECT_EQ(s.reason(),
            "assigning stage 0 replica 0 to worker at w1:1 failed: "
            "connection refused");
  EXPECT_TRUE(core_->ListWorkers()[0].job_id().empty());
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
