// The driver's "measured" topology (driver.cc PlanOnMeasuredLinks) through
// CoordinatorCore with fake workers that report measured links: the plan's
// levels, its ranks laid out group by group, and the flat fallback.
#include <map>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "coordinator/core.h"
#include "gtest/gtest.h"
#include "pipeline/spec.h"

namespace aqueduct {
namespace {

constexpr char kSpec[] = R"pb(
  name: "chain"
  model {
    layers { flatten {} }
    layers { linear { in_features: 8 out_features: 8 } }
    layers { relu {} }
    layers { linear { in_features: 8 out_features: 8 } }
    layers { relu {} }
    layers { linear { in_features: 8 out_features: 2 } }
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
  epochs: 1
  pipeline { workers: 4 }
)pb";

// Hosts 10.0.0.1 and 10.0.0.3 share a fast switch, as do .2 and .4; links
// between the pairs are slow.
double Bandwidth(const std::string& from, const std::string& to) {
  const int a = from.back() - '0', b = to.back() - '0';
  return a % 2 == b % 2 ? 2e9 : 1e7;
}

struct Log {
  absl::Mutex mu;
  std::multiset<std::string> measured ABSL_GUARDED_BY(mu);
  std::map<std::string, int> stage_of ABSL_GUARDED_BY(mu);
};

class FakeWorker : public WorkerClient {
 public:
  FakeWorker(std::string address, Log* log)
      : address_(std::move(address)), log_(log) {}
  absl::Status AssignStage(const StageAssignment& a, absl::Duration) override {
    absl::MutexLock lock(&log_->mu);
    log_->stage_of[address_] = a.stage();
    return absl::OkStatus();
  }
  absl::Status StartJob(const std::string&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string&, const std::string&, absl::Duration,
                       std::optional<int>) override {
    return absl::OkStatus();
  }
  absl::StatusOr<WorkerRuntimeStatus> GetStatus(absl::Duration) override {
    return WorkerRuntimeStatus();
  }
  absl::StatusOr<ModelProfile> Profile(const JobSpec& spec,
                                       absl::Duration) override {
    ModelProfile p;
    for (int i = 0; i < spec.model().layers_size(); ++i) {
      LayerProfile* n = p.add_nodes();
      n->set_id(absl::StrCat("layer", i));
      n->set_forward_ms(5);
      n->set_backward_ms(10);
      n->set_activation_bytes(1 << 20);
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
      const v1::MeasureLinksRequest& request, absl::Duration) override {
    v1::MeasureLinksResponse response;
    for (const v1::LinkTarget& t : request.targets()) {
      {
        absl::MutexLock lock(&log_->mu);
        log_->measured.insert(address_ + " -> " + t.host());
      }
      v1::LinkResult* r = response.add_results();
      r->set_worker_id(t.worker_id());
      r->set_bytes_per_second(Bandwidth(address_.substr(0, 8), t.host()));
    }
    return response;
  }

 private:
  std::string address_;
  Log* log_;
};

class TopologyDriverTest : public ::testing::Test {
 protected:
  TopologyDriverTest() {
    CoordinatorOptions o;
    o.registry.version = "0.1.0";
    core_ = std::make_unique<CoordinatorCore>(
        o, &clock_, [this](const std::string& address) {
          return std::make_unique<FakeWorker>(address, &log_);
        });
    spec_ = *ParseJobSpec(kSpec, "test");
  }

  // Workers w1..w4 on hosts 10.0.0.1..4, each with a probe port unless
  // `no_probe` names it.
  void AddWorkers(const std::string& no_probe = "") {
    for (int i = 1; i <= 4; ++i) {
      WorkerInfo info;
      info.set_worker_id(absl::StrCat("w", i));
      info.set_incarnation(absl::StrCat("inc", i));
      info.set_version("0.1.0");
      info.set_address(absl::StrCat("10.0.0.", i, ":1"));
      if (info.worker_id() != no_probe) info.set_link_probe_port(7000 + i);
      ASSERT_TRUE(core_->RegisterWorker(info).ok());
    }
  }

  JobStatus WaitForRunning(const std::string& job) {
    int64_t version = -1;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      auto s = core_->WaitForJob(job, version, deadline);
      EXPECT_TRUE(s.ok());
      if (!s.ok()) return JobStatus();
      const JobState state = s->first.state();
      if (state != v1::JOB_PLANNING && state != v1::JOB_PENDING) {
        return s->first;
      }
      version = s->second;
    }
    ADD_FAILURE() << "job " << job << " never left PLANNING";
    return JobStatus();
  }

  int MeasuredCount() {
    absl::MutexLock lock(&log_.mu);
    return static_cast<int>(log_.measured.size());
  }

  FakeClock clock_;
  Log log_;
  std::unique_ptr<CoordinatorCore> core_;
  JobSpec spec_;
};

TEST_F(TopologyDriverTest, MeasuredPlanHasTwoLevelsAndGroupContiguousRanks) {
  spec_.mutable_pipeline()->set_topology("measured");
  AddWorkers();
  auto id = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  const JobStatus running = WaitForRunning(*id);
  ASSERT_EQ(running.state(), v1::JOB_RUNNING) << running.reason();
  // Every ordered pair, once.
  EXPECT_EQ(MeasuredCount(), 12);
  auto plan = core_->GetPlan(*id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->levels_size(), 2) << plan->DebugString();
  EXPECT_EQ(plan->levels(0).workers(), 2);
  EXPECT_DOUBLE_EQ(plan->levels(0).bandwidth_bytes_per_s(), 2e9);
  EXPECT_EQ(plan->levels(1).workers(), 2);
  EXPECT_DOUBLE_EQ(plan->levels(1).bandwidth_bytes_per_s(), 1e7);
  const v1::PlanTopology& t = plan->topology();
  EXPECT_EQ(t.kind(), "measured");
  ASSERT_EQ(t.groups_size(), 2);
  EXPECT_EQ(t.links_size(), 12);
  // Ranks 0-1 and 2-3 are each one group: the stages on each pair of
  // neighbouring ranks share a host pair (1, 3) or (2, 4).
  std::map<int, int> host_of_stage;
  {
    absl::MutexLock lock(&log_.mu);
    for (const auto& [address, stage] : log_.stage_of) {
      host_of_stage[stage] = address[7] - '0';
    }
  }
  ASSERT_EQ(host_of_stage.size(), 4u);
  EXPECT_EQ(host_of_stage[0] % 2, host_of_stage[1] % 2);
  EXPECT_EQ(host_of_stage[2] % 2, host_of_stage[3] % 2);
  EXPECT_NE(host_of_stage[1] % 2, host_of_stage[2] % 2);
  // The job's status names the same workers per stage.
  ASSERT_EQ(running.stages_size(), 4);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(running.stages(s).workers(0),
              absl::StrCat("w", host_of_stage[s]));
  }
  EXPECT_EQ(t.groups(0).worker_ids(0), running.stages(0).workers(0));
}

TEST_F(TopologyDriverTest, FlatIsTheDefaultAndMeasuresNothing) {
  AddWorkers();
  auto id = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(WaitForRunning(*id).state(), v1::JOB_RUNNING);
  EXPECT_EQ(MeasuredCount(), 0);
  auto plan = core_->GetPlan(*id);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->levels_size(), 1);
  EXPECT_DOUBLE_EQ(plan->levels(0).bandwidth_bytes_per_s(), 1e9);
  EXPECT_FALSE(plan->has_topology());
}

TEST_F(TopologyDriverTest, AWorkerWithoutAProbeFallsBackToFlatSayingWhy) {
  spec_.mutable_pipeline()->set_topology("measured");
  AddWorkers("w3");
  auto id = core_->SubmitJob(spec_, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(WaitForRunning(*id).state(), v1::JOB_RUNNING);
  auto plan = core_->GetPlan(*id);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->levels_size(), 1);
  EXPECT_EQ(plan->topology().kind(), "flat");
  EXPECT_NE(plan->topology().note().find("worker w3 has no link probe"),
            std::string::npos)
      << plan->topology().note();
}

}  // namespace
}  // namespace aqueduct
