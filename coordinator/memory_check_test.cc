// The coordinator's side of issue 14's "validation that cannot overflow":
// specs and supplied profiles checked at submit against the largest
// registered worker's memory, and a plan that its workers cannot hold
// failing the job with the stage and the numbers, before any worker is
// assigned. Fake workers, fake clock.
#include <atomic>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/core.h"
#include "gtest/gtest.h"
#include "pipeline/spec.h"

namespace aqueduct {
namespace {

// Records what the coordinator asks of the workers; everything succeeds.
class FakeWorker : public WorkerClient {
 public:
  explicit FakeWorker(std::atomic<int>* assigned) : assigned_(assigned) {}
  absl::Status AssignStage(const StageAssignment&, absl::Duration) override {
    ++*assigned_;
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
  absl::StatusOr<ModelProfile> Profile(const JobSpec&,
                                       absl::Duration) override {
    return absl::UnavailableError("the tests supply their profiles");
  }

 private:
  std::atomic<int>* assigned_;
};

class MemoryCheckTest : public ::testing::Test {
 protected:
  MemoryCheckTest() {
    CoordinatorOptions o;
    o.registry.version = "0.1.0";
    core_ = std::make_unique<CoordinatorCore>(
        o, &clock_,
        [this](const std::string&) -> std::unique_ptr<WorkerClient> {
          return std::make_unique<FakeWorker>(&assigned_);
        });
  }

  void AddWorker(const std::string& id, int64_t memory_bytes) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_incarnation("inc-" + id);
    info.set_version("0.1.0");
    info.set_address(id + ":1");
    info.mutable_device()->set_memory_bytes(memory_bytes);
    ASSERT_TRUE(core_->RegisterWorker(info, nullptr).ok());
  }

  static JobSpec Spec(const std::string& text) {
    auto spec = ParseJobSpec(text, "test");
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }

  // The error SubmitJob gives `spec` (and `profile`); "" when accepted.
  std::string Refusal(const JobSpec& spec,
                      const ModelProfile* profile = nullptr) {
    auto id = core_->SubmitJob(spec, profile);
    if (id.ok()) return "";
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(id.status().message());
  }

  JobStatus WaitForFinal(const std::string& job) {
    int64_t version = -1;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      auto s = core_->WaitForJob(job, version, deadline);
      EXPECT_TRUE(s.ok());
      if (!s.ok() || s->first.state() == v1::JOB_FAILED ||
          s->first.state() == v1::JOB_RUNNING) {
        return s.ok() ? s->first : JobStatus();
      }
      version = s->second;
    }
    ADD_FAILURE() << "job " << job << " never left PENDING/PLANNING";
    return *core_->GetJob(job);
  }

  FakeClock clock_;
  std::atomic<int> assigned_{0};
  std::unique_ptr<CoordinatorCore> core_;
};

constexpr char kSmall[] =
    "model { layers { linear { in_features: 8 out_features: 4 } } } "
    "data { synthetic { sample_shape: [8] num_classes: 4 train_samples: 64 "
    "} } optimizer { sgd { lr: 0.1 } } batch_size: 16 ";

// Every spec of issue 14 that crashed a worker is refused at submit.
TEST_F(MemoryCheckTest, TheInputsThatCrashedWorkersAreRefusedAtSubmit) {
  EXPECT_EQ(
      Refusal(Spec(std::string(kSmall) + "max_steps: 4611686018427387904")),
      "invalid job spec: max_steps=4611686018427387904 must be at most "
      "1000000000");
  JobSpec test_samples = Spec(std::string(kSmall) + "epochs: 1");
  test_samples.mutable_data()->mutable_synthetic()->set_test_samples(int64_t{1}
                                                                     << 62);
  EXPECT_NE(Refusal(test_samples)
                .find("data.synthetic.test_samples=4611686018427387904"),
            std::string::npos);
  EXPECT_EQ(Refusal(Spec(std::string(kSmall) +
                         "max_steps: 3 pipeline { workers: 2 schedule: "
                         "\"gpipe\" microbatches: -1 }")),
            "invalid job spec: pipeline.microbatches=-1 must not be negative");
  EXPECT_NE(Refusal(Spec(std::string(kSmall) +
                         "max_steps: 3 pipeline { bandwidth_bytes_per_s: nan "
                         "}"))
                .find("pipeline.bandwidth_bytes_per_s=nan"),
            std::string::npos);
  // The 1e6 x 1e6 Linear with a supplied profile.
  ModelProfile profile;
  LayerProfile* node = profile.add_nodes();
  node->set_id("layer0");
  node->set_layer_index(0);
  node->set_parameter_bytes(4.000004e12);
  EXPECT_NE(Refusal(Spec("model { layers { linear { in_features: 1000000 "
                         "out_features: 1000000 } } } data { synthetic { "
                         "sample_shape: [1000000] num_classes: 4 "
                         "train_samples: 64 } } optimizer { sgd { lr: 0.1 } } "
                         "batch_size: 16 max_steps: 3"),
                    &profile)
                .find("model.layers[0].linear: the weight [out_features, "
                      "in_features] = [1000000, 1000000] has 1000000000000 "
                      "parameters (4.0 TB)"),
            std::string::npos);
  EXPECT_EQ(assigned_.load(), 0);
}

TEST_F(MemoryCheckTest, SpecsAreCheckedAgainstTheLargestRegisteredWorker) {
  // 268 M parameters under Adam: 4.3 GB. Accepted while no worker's
  // memory is known (the default limit), refused once the workers are
  // known to be smaller, accepted when a larger one registers.
  const JobSpec spec = Spec(
      "model { layers { linear { in_features: 16384 out_features: 16384 } } "
      "} data { synthetic { sample_shape: [16384] num_classes: 4 "
      "train_samples: 64 } } optimizer { adam { lr: 0.001 } } batch_size: 16 "
      "max_steps: 2");
  EXPECT_EQ(Refusal(spec), "");
  AddWorker("small", 2000000000);
  EXPECT_EQ(Refusal(spec),
            "invalid job spec: model.layers[0].linear needs at least 4.3 GB: "
            "268451840 parameters with their gradients and optimizer state "
            "(4.3 GB) and the activations of a microbatch of 16 samples (2.1 "
            "MB), more than the largest registered worker's memory (2.0 GB)");
  AddWorker("large", 64000000000);
  EXPECT_EQ(Refusal(spec), "");
}

TEST_F(MemoryCheckTest, ASuppliedProfileIsCheckedAtSubmit) {
  AddWorker("w1", 1000000000);
  ModelProfile profile;
  LayerProfile* node = profile.add_nodes();
  node->set_id("layer0");
  node->set_layer_index(0);
  node->set_parameter_bytes(1e9);  // A lie, but one that cannot fit.
  EXPECT_EQ(Refusal(Spec(std::string(kSmall) + "max_steps: 3"), &profile),
            "invalid profile: profile node 'layer0' (model.layers[0]) needs "
            "at least 2.0 GB on any worker: parameter_bytes=1000000000 with "
            "gradients and optimizer state, and saved_bytes=0 in flight; more "
            "than the largest registered worker's memory (1.0 GB)");
  node->set_saved_bytes(NAN);
  EXPECT_NE(Refusal(Spec(std::string(kSmall) + "max_steps: 3"), &profile)
                .find("saved_bytes=nan must be finite"),
            std::string::npos);
}

// Each node fits a 100 MB worker alone, but the first stage of the
// straight pipeline keeps a second weight version (1F1B with stashing):
// the job fails naming the stage before any stage is assigned.
TEST_F(MemoryCheckTest, APlanItsWorkersCannotHoldFailsTheJob) {
  AddWorker("w1", 100000000);
  AddWorker("w2", 100000000);
  ModelProfile profile;
  for (int i = 0; i < 2; ++i) {
    LayerProfile* node = profile.add_nodes();
    node->set_id(absl::StrCat("layer", i));
    node->set_layer_index(i);
    node->set_forward_ms(1);
    node->set_backward_ms(2);
    node->set_activation_bytes(1e6);
    node->set_parameter_bytes(4e7);
  }
  v1::ProfileEdge* edge = profile.add_edges();
  edge->set_from("layer0");
  edge->set_to("layer1");
  const JobSpec spec = Spec(
      "model { layers { linear { in_features: 8 out_features: 8 } } "
      "layers { linear { in_features: 8 out_features: 4 } } } "
      "data { synthetic { sample_shape: [8] num_classes: 4 train_samples: 64 "
      "} } optimizer { sgd { lr: 0.1 } } batch_size: 16 max_steps: 3 "
      "pipeline { workers: 2 }");
  auto id = core_->SubmitJob(spec, &profile);
  ASSERT_TRUE(id.ok()) << id.status();
  const JobStatus failed = WaitForFinal(*id);
  EXPECT_EQ(failed.state(), v1::JOB_FAILED);
  // 2 versions, gradients (plain SGD: no state) of 40 MB; 2 minibatches of
  // 1 MB in flight.
  EXPECT_EQ(failed.reason(),
            "stage 0 (model.layers[0, 1)) is predicted to need 122.0 MB "
            "(122000000 bytes) per worker, more than the 100.0 MB (100000000 "
            "bytes) of worker w1 it was assigned to; run it on more workers "
            "or on workers with more memory");
  EXPECT_EQ(assigned_.load(), 0);
}

}  // namespace
}  // namespace aqueduct
