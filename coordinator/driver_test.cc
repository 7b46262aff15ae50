#include "coordinator/driver.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/fake_job_events.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

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
  pipeline { workers: 2 }
)pb";

// What the fake workers were asked, in order ("profile A", "assign A
// stage S", "start A").
struct Calls {
  absl::Mutex mu;
  std::vector<std::string> log ABSL_GUARDED_BY(mu);
  absl::Status assign_status ABSL_GUARDED_BY(mu);
  void Add(std::string s) {
    absl::MutexLock lock(&mu);
    log.push_back(std::move(s));
  }
  std::vector<std::string> Log() {
    absl::MutexLock lock(&mu);
    return log;
  }
};

class FakeWorkerClient : public WorkerClient {
 public:
  FakeWorkerClient(std::string address, Calls* calls)
      : address_(std::move(address)), calls_(calls) {}
  absl::Status AssignStage(const StageAssignment& a, absl::Duration) override {
    calls_->Add(absl::StrCat("assign ", address_, " stage ", a.stage()));
    absl::MutexLock lock(&calls_->mu);
    return calls_->assign_status;
  }
  absl::StatusOr<WorkerRuntimeStatus> GetStatus(absl::Duration) override {
    return WorkerRuntimeStatus();
  }
  absl::Status StartJob(const std::string&, absl::Duration) override {
    calls_->Add(absl::StrCat("start ", address_));
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string&, const std::string&, absl::Duration,
                       std::optional<int>) override {
    return absl::OkStatus();
  }
  absl::StatusOr<ModelProfile> Profile(const JobSpec& spec,
                                       absl::Duration) override {
    calls_->Add(absl::StrCat("profile ", address_));
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
  absl::StatusOr<v1::MeasureLinksResponse> MeasureLinks(
      const v1::MeasureLinksRequest&, absl::Duration) override {
    return absl::UnimplementedError("no links here");
  }

 private:
  std::string address_;
  Calls* calls_;
};

class DriverTest : public ::testing::Test {
 protected:
  DriverTest()
      : registry_(options_.registry, &clock_),
        jobs_("tag", 1),
        worker_clients_([this](const std::string& address) {
          return std::make_unique<FakeWorkerClient>(address, &calls_);
        }),
        executor_(std::make_unique<BoundedExecutor>("the driver", 1, 10)),
        driver_(
            options_, mu_, registry_, jobs_, events_, worker_clients_,
            [] { return nullptr; }, *executor_) {
    Job job;
    job.id = "j1";
    job.state = v1::JOB_PLANNING;
    EXPECT_TRUE(
        google::protobuf::TextFormat::ParseFromString(kSpec, &job.spec));
    for (const std::string w : {"w1", "w2"}) {
      WorkerInfo info;
      info.set_worker_id(w);
      info.set_incarnation("i1");
      info.set_address(w + ":1");
      std::vector<WorkerTransition> changes;
      EXPECT_TRUE(registry_.Register(info, &changes).ok());
      registry_.Assign(w, "j1", -1, -1);
      job.reserved.push_back(w);
    }
    jobs_.Add(std::move(job));
  }
  // Drives j1, then waits for the plans made ahead.
  void Drive() {
    driver_.Drive("j1");
    executor_.reset();
  }
  Job& TheJob() { return jobs_.At("j1"); }

  CoordinatorOptions options_;
  FakeClock clock_;
  absl::Mutex mu_;
  Registry registry_;
  JobTable jobs_;
  FakeJobEvents events_;
  Calls calls_;
  WorkerClientFactory worker_clients_;
  std::unique_ptr<BoundedExecutor> executor_;
  JobDriver driver_;
};

// The profile calls in a fake's log.
int Profiles(const std::vector<std::string>& log) {
  return static_cast<int>(std::count_if(log.begin(), log.end(), [](auto& s) {
    return s.rfind("profile ", 0) == 0;
  }));
}

TEST_F(DriverTest, ProfilesPlansAssignsAndStarts) {
  Drive();
  EXPECT_EQ(TheJob().state, v1::JOB_RUNNING);
  EXPECT_TRUE(TheJob().has_plan);
  EXPECT_TRUE(TheJob().has_profile);
  const std::vector<std::string> log = calls_.Log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.front(), "profile w1:1");
  EXPECT_EQ(Profiles(log), 1);
  EXPECT_EQ(log.back().rfind("start ", 0), 0u);
  int stages = 0;
  for (const auto& workers : TheJob().stage_workers) {
    stages += static_cast<int>(workers.size());
  }
  EXPECT_EQ(stages, TheJob().plan.workers_used());
  // The plan for one worker, made ahead for a restart without a spare.
  EXPECT_EQ(TheJob().ready_plans.count(1), 1u);
  EXPECT_EQ(events_.calls, (std::vector<std::string>{"transition j1 RUNNING"}));
  // Each worker holds its stage in the registry.
  for (size_t st = 0; st < TheJob().stage_workers.size(); ++st) {
    for (const std::string& w : TheJob().stage_workers[st]) {
      EXPECT_EQ(registry_.Get(w)->stage(), static_cast<int>(st)) << w;
    }
  }
}

// Workers of one kind profile the model once; a second kind of device
// profiles it again, and the plan takes the slower figures.
TEST_F(DriverTest, EachKindOfWorkerProfilesOnce) {
  WorkerInfo info;
  info.set_worker_id("w2");
  info.set_incarnation("i2");
  info.set_address("w2:1");
  info.mutable_device()->set_kind("cpu");
  info.mutable_device()->set_name("cpu (OpenBLAS 1 threads)");
  std::vector<WorkerTransition> changes;
  ASSERT_TRUE(registry_.Register(info, &changes).ok());
  registry_.Assign("w2", "j1", -1, -1);
  Drive();
  const std::vector<std::string> log = calls_.Log();
  EXPECT_EQ(Profiles(log), 2);
  EXPECT_NE(std::find(log.begin(), log.end(), "profile w2:1"), log.end());
  EXPECT_EQ(TheJob().state, v1::JOB_RUNNING);
}

// Workers of one kind and unequal speed (issue 28): the model is profiled
// on the fastest, which the plan lays out first, and the plan lists each
// worker's speed relative to it.
TEST_F(DriverTest, WorkersOfUnequalSpeedAreProfiledOnTheFastestAndPlaced) {
  for (const auto& [w, gflops] :
       std::vector<std::pair<std::string, double>>{{"w1", 50}, {"w2", 100}}) {
    WorkerInfo info;
    info.set_worker_id(w);
    info.set_incarnation("i2");
    info.set_address(w + ":1");
    info.mutable_device()->set_kind("cpu");
    info.mutable_device()->set_name("cpu (OpenBLAS 2 threads)");
    info.mutable_device()->set_gemm_gflops(gflops);
    std::vector<WorkerTransition> changes;
    ASSERT_TRUE(registry_.Register(info, &changes).ok());
    registry_.Assign(w, "j1", -1, -1);
  }
  Drive();
  ASSERT_EQ(TheJob().state, v1::JOB_RUNNING) << TheJob().reason;
  const std::vector<std::string> log = calls_.Log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.front(), "profile w2:1");
  EXPECT_EQ(Profiles(log), 1);
  const PartitionPlan& plan = TheJob().plan;
  ASSERT_EQ(plan.stages_size(), 2);
  EXPECT_EQ(TheJob().stage_workers[0], std::vector<std::string>{"w2"});
  EXPECT_EQ(TheJob().stage_workers[1], std::vector<std::string>{"w1"});
  ASSERT_EQ(plan.worker_speeds_size(), 2);
  EXPECT_DOUBLE_EQ(plan.worker_speeds(0), 1);
  EXPECT_DOUBLE_EQ(plan.worker_speeds(1), 0.5);
  EXPECT_DOUBLE_EQ(plan.stages(1).worker_speed(), 0.5);
  // The slow worker holds the fewer layers.
  EXPECT_LT(plan.stages(1).end_layer() - plan.stages(1).first_layer(),
            plan.stages(0).end_layer() - plan.stages(0).first_layer());
}

// Equally fast workers (probes within noise) plan as before: no speeds.
TEST_F(DriverTest, EquallyFastWorkersPlanWithoutSpeeds) {
  for (const auto& [w, gflops] :
       std::vector<std::pair<std::string, double>>{{"w1", 90}, {"w2", 100}}) {
    WorkerInfo info;
    info.set_worker_id(w);
    info.set_incarnation("i2");
    info.set_address(w + ":1");
    info.mutable_device()->set_gemm_gflops(gflops);
    std::vector<WorkerTransition> changes;
    ASSERT_TRUE(registry_.Register(info, &changes).ok());
    registry_.Assign(w, "j1", -1, -1);
  }
  Drive();
  ASSERT_EQ(TheJob().state, v1::JOB_RUNNING) << TheJob().reason;
  EXPECT_EQ(calls_.Log().front(), "profile w1:1");
  EXPECT_EQ(TheJob().plan.worker_speeds_size(), 0);
  EXPECT_EQ(TheJob().stage_workers[0], std::vector<std::string>{"w1"});
  JobSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kSpec, &spec));
  auto homogeneous = JobDriver::PlanFor(spec, TheJob().profile, 2);
  ASSERT_TRUE(homogeneous.ok()) << homogeneous.status();
  EXPECT_EQ(TheJob().plan.SerializeAsString(),
            homogeneous->SerializeAsString());
}

TEST_F(DriverTest, LeavesAJobThatIsNoLongerPlanning) {
  TheJob().state = v1::JOB_CANCELLED;
  Drive();
  EXPECT_TRUE(calls_.Log().empty());
  EXPECT_TRUE(events_.calls.empty());
}

TEST_F(DriverTest, AFailedAssignmentProbesTheJob) {
  {
    absl::MutexLock lock(&calls_.mu);
    calls_.assign_status = absl::UnavailableError("connection refused");
  }
  Drive();
  ASSERT_EQ(events_.calls.size(), 1u);
  EXPECT_EQ(events_.calls[0].rfind("probe j1 assigning stage 0 replica 0", 0),
            0u)
      << events_.calls[0];
  EXPECT_EQ(TheJob().state, v1::JOB_PLANNING);
}

TEST_F(DriverTest, ABadProfileFailsTheJob) {
  TheJob().has_profile = true;  // An empty one.
  Drive();
  EXPECT_EQ(TheJob().state, v1::JOB_FAILED);
  EXPECT_EQ(TheJob().reason.rfind("the profile is invalid", 0), 0u)
      << TheJob().reason;
}

TEST(PlanForTest, PlansForTheWorkersGiven) {
  JobSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kSpec, &spec));
  EXPECT_FALSE(JobDriver::PlanFor(spec, ModelProfile(), 2).ok());
}

}  // namespace
}  // namespace aqueduct
