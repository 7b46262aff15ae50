// StageRuntime: its assignment rules, and whole jobs in one process: two or
// three runtimes on threads over the in-memory data plane, meeting through
// the coordinator's rendezvous store on a fake coordinator, with this test
// playing the coordinator's part (start every stage, collect the reports,
// stop the survivors when a stage fails).
#include "worker/runtime/stage_runtime.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "common/comm/local_store.h"
#include "common/device/cpu_device.h"
#include "common/fake_coordinator_client.h"
#include "common/log_buffer.h"
#include "gtest/gtest.h"
#include "pipeline/failure.h"
#include "worker/nn/spec.h"
#include "worker/runtime/coordinator_store.h"
#include "worker/runtime/in_memory_data_plane.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {
namespace {

StageAssignment OneStage(const std::string& job) {
  StageAssignment a;
  a.set_job_id(job);
  PlanStage* s = a.mutable_plan()->add_stages();
  s->set_replicas(1);
  return a;
}

TEST(StageRuntimeTest, BusyWorkerRefusesAnotherJobAfterItsWait) {
  StageRuntimeOptions options;
  options.busy_wait = absl::Milliseconds(100);
  InMemoryDataPlaneFactory data_plane;
  LocalRendezvousStore store;
  StageRuntime runtime(options, &data_plane, &store);
  ASSERT_TRUE(runtime.Assign(OneStage("a")).ok());
  EXPECT_TRUE(runtime.Assign(OneStage("a")).ok());  // Idempotent.
  const absl::Time start = absl::Now();
  const absl::Status s = runtime.Assign(OneStage("b"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("busy with job a"), std::string::npos) << s;
  // Typed, for the coordinator: busy with (an attempt of) job a.
  EXPECT_EQ(FailureOf(s).cause(), v1::FAILURE_BUSY_WITH_EARLIER_ATTEMPT);
  EXPECT_EQ(FailureOf(s).job_id(), "a");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  EXPECT_EQ(runtime.current_job(), "a");
  EXPECT_EQ(runtime.Status().phase(), "assigned");
}

TEST(StageRuntimeTest, AssignmentWaitsForAStopInFlight) {
  StageRuntimeOptions options;
  options.busy_wait = absl::Seconds(20);
  InMemoryDataPlaneFactory data_plane;
  LocalRendezvousStore store;
  StageRuntime runtime(options, &data_plane, &store);
  ASSERT_TRUE(runtime.Assign(OneStage("a")).ok());
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(runtime.Stop("a", "test").ok());
  });
  const absl::Time start = absl::Now();
  const absl::Status s = runtime.Assign(OneStage("b"));
  stopper.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(runtime.current_job(), "b");
}

TEST(StageRuntimeTest, StartAndAssignRefuseWhatDoesNotFit) {
  InMemoryDataPlaneFactory data_plane;
  LocalRendezvousStore store;
  StageRuntime runtime(StageRuntimeOptions{}, &data_plane, &store);
  StageAssignment bad = OneStage("a");
  bad.set_replica(1);
  EXPECT_EQ(runtime.Assign(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runtime.Start("a").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(runtime.Assign(OneStage("a")).ok());
  ASSERT_TRUE(runtime.Stop("a", "test").ok());
  EXPECT_EQ(runtime.phase(), RuntimePhase::kStopped);
  const absl::Status s = runtime.Start("a");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("already stopped"), std::string::npos) << s;
}

// ---- Whole jobs in one process.

constexpr char kMlp[] = R"pb(
  model {
    layers { flatten {} }
    layers { linear { in_features: 12 out_features: 16 } }
    layers { relu {} }
    layers { dropout { p: 0.2 } }
    layers { linear { in_features: 16 out_features: 16 } }
    layers { gelu {} }
    layers { layer_norm { normalized_shape: 16 } }
    layers { linear { in_features: 16 out_features: 16 } }
    layers { relu {} }
    layers { linear { in_features: 16 out_features: 3 } }
  }
  data {
    synthetic {
      sample_shape: [ 3, 4 ]
      num_classes: 3
      train_samples: 256
      test_samples: 64
      seed: 4
    }
  }
  optimizer { sgd { lr: 0.05 momentum: 0.9 } }
  batch_size: 16
  max_steps: 12
  seed: 9
  pipeline { schedule: "1f1b_flush" microbatches: 4 }
)pb";

constexpr int kLayers = 10;

// A pipeline's plan: stage s starts at layer begin[s] and has replicas[s]
// workers, ranked stage after stage.
struct Split {
  std::vector<int> begin;
  std::vector<int> replicas;
};

// Every worker's assignment of job `job_id` under `split`.
std::vector<StageAssignment> Assignments(const std::string& job_id,
                                         const JobSpec& spec,
                                         const Split& split) {
  PartitionPlan plan;
  int world = 0;
  for (size_t s = 0; s < split.begin.size(); ++s) {
    PlanStage* st = plan.add_stages();
    st->set_first_layer(split.begin[s]);
    st->set_end_layer(s + 1 < split.begin.size() ? split.begin[s + 1]
                                                 : kLayers);
    st->set_replicas(split.replicas[s]);
    int after = 0;  // Warm-up as the planner: workers after, per replica.
    for (size_t t = s + 1; t < split.replicas.size(); ++t) {
      after += split.replicas[t];
    }
    st->set_warmup_depth((after + split.replicas[s] - 1) / split.replicas[s]);
    for (int r = 0; r < split.replicas[s]; ++r) st->add_worker_ranks(world++);
  }
  std::vector<StageAssignment> out;
  for (int s = 0; s < plan.stages_size(); ++s) {
    for (int r = 0; r < plan.stages(s).replicas(); ++r) {
      StageAssignment a;
      a.set_job_id(job_id);
      *a.mutable_spec() = spec;
      *a.mutable_plan() = plan;
      a.set_stage(s);
      a.set_replica(r);
      a.set_rank(plan.stages(s).worker_ranks(r));
      a.set_world_size(world);
      a.set_rendezvous_key(absl::StrCat("job/", job_id, "/"));
      out.push_back(a);
    }
  }
  for (StageAssignment& a : out) {
    for (int s = 0; s < plan.stages_size(); ++s) {
      v1::StagePeers* p = a.add_peers();
      for (int r : plan.stages(s).worker_ranks()) {
        p->add_worker_ids(absl::StrCat("w", r));
      }
    }
  }
  return out;
}

// What the fake coordinator saw of one worker.
struct WorkerRun {
  std::vector<StageProgress> reports;
  RuntimePhase phase = RuntimePhase::kIdle;
  bool finished = false;
  std::string error;
  std::map<int64_t, double> losses;
  double test_loss = 0;
  double test_accuracy = 0;
  int64_t total_steps = 0;
  int64_t committed_version = 0;
  int64_t minibatches_done = 0;

  void Add(const StageProgress& p) {
    reports.push_back(p);
    finished = finished || p.finished();
    if (!p.error().empty()) error = p.error();
    for (const LossPoint& l : p.losses()) losses[l.minibatch()] = l.loss();
    if (p.finished()) {
      test_loss = p.test_loss();
      test_accuracy = p.test_accuracy();
    }
    total_steps = p.total_steps();
    committed_version = p.committed_version();
    minibatches_done = p.minibatches_done();
  }
};

class InProcessJobTest : public ::testing::Test {
 protected:
  InProcessJobTest() : store_(&coordinator_) {}
  ~InProcessJobTest() override {
    for (auto& r : runtimes_) r->Shutdown();
  }

  // `n` runtimes over the in-memory data plane and the fake coordinator's
  // store. A peer deadline far beyond the tests' bounds: anything that ends
  // sooner ended because a peer closed or a stop aborted it.
  void AddRuntimes(int n, const FileAccess& files = FileAccess()) {
    StageRuntimeOptions options;
    options.files = files;
    options.peer_timeout = absl::Seconds(120);
    options.busy_wait = absl::Seconds(1);
    options.logs = logs_;
    for (int i = 0; i < n; ++i) {
      runtimes_.push_back(
          std::make_unique<StageRuntime>(options, &data_plane_, &store_));
    }
  }

  // Assigns and starts every assignment (runtime i runs assignment i).
  void Start(const std::vector<StageAssignment>& assignments) {
    ASSERT_EQ(assignments.size(), runtimes_.size());
    for (size_t i = 0; i < assignments.size(); ++i) {
      ASSERT_TRUE(runtimes_[i]->Assign(assignments[i]).ok());
    }
    for (size_t i = 0; i < assignments.size(); ++i) {
      ASSERT_TRUE(runtimes_[i]->Start(assignments[i].job_id()).ok());
    }
  }

  // Collects reports until every runtime's job has ended or `limit` has
  // passed. With `stop_on_error`, stops the others once one reports an
  // error, as the coordinator does.
  std::vector<WorkerRun> Watch(const std::string& job_id, absl::Duration limit,
                               bool stop_on_error = true) {
    std::vector<WorkerRun> runs(runtimes_.size());
    const absl::Time deadline = absl::Now() + limit;
    bool stopped = false;
    for (bool ended = false; !ended;) {
      ended = true;
      for (size_t i = 0; i < runtimes_.size(); ++i) {
        runs[i].phase = runtimes_[i]->phase();
        ended = ended && !HoldsWorker(runs[i].phase);
        for (const StageProgress& p : runtimes_[i]->TakeProgress()) {
          runs[i].Add(p);
        }
        if (stop_on_error && !stopped && !runs[i].error.empty()) {
          stopped = true;
          for (auto& r : runtimes_) (void)r->Stop(job_id, "a stage failed");
        }
      }
      if (absl::Now() > deadline) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
    for (size_t i = 0; i < runtimes_.size(); ++i) {  // The last reports.
      for (const StageProgress& p : runtimes_[i]->TakeProgress()) {
        runs[i].Add(p);
      }
    }
    return runs;
  }

  // Set by a test before AddRuntimes: where the stage threads' log lines
  // are captured.
  JobLogBuffer* logs_ = nullptr;
  FakeCoordinatorClient coordinator_;
  CoordinatorStore store_;
  InMemoryDataPlaneFactory data_plane_;
  std::vector<std::unique_ptr<StageRuntime>> runtimes_;
};

LocalTrainResult TrainLocally(const JobSpec& spec) {
  CpuDevice device(CpuDeviceOptions{1});
  auto result = TrainLocal(spec, &device, LocalTrainOptions());
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : LocalTrainResult();
}

// Every worker finished the whole job; the output stage's losses and test
// metrics are train-local's.
void ExpectTrainLocal(const std::vector<WorkerRun>& runs, int output,
                      const JobSpec& spec, const std::string& what) {
  const LocalTrainResult local = TrainLocally(spec);
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].phase, RuntimePhase::kFinished) << what << " " << i;
    EXPECT_TRUE(runs[i].finished) << what << " " << i;
    EXPECT_EQ(runs[i].error, "") << what << " " << i;
    EXPECT_EQ(runs[i].total_steps, spec.max_steps()) << what << " " << i;
    EXPECT_EQ(runs[i].committed_version, spec.max_steps()) << what;
    EXPECT_EQ(runs[i].minibatches_done, spec.max_steps()) << what;
  }
  const WorkerRun& out = runs[output];
  ASSERT_EQ(out.losses.size(), local.losses.size()) << what;
  for (size_t m = 0; m < local.losses.size(); ++m) {
    ASSERT_EQ(out.losses.count(m), 1u) << what << " minibatch " << m;
    EXPECT_NEAR(out.losses.at(m), local.losses[m], 1e-4)
        << what << " loss of minibatch " << m;
  }
  ASSERT_TRUE(local.test.has_value());
  EXPECT_NEAR(out.test_loss, local.test->loss, 1e-4) << what;
  EXPECT_NEAR(out.test_accuracy, local.test->accuracy, 1e-6) << what;
}

TEST_F(InProcessJobTest, ThreeStagesMatchTrainLocal) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  AddRuntimes(3);
  Start(Assignments("three", spec, {{0, 3, 7}, {1, 1, 1}}));
  const std::vector<WorkerRun> runs = Watch("three", absl::Seconds(120));
  ExpectTrainLocal(runs, 2, spec, "3 stages");
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(runs[i].losses.empty()) << "stage " << i << " has no loss";
  }
  EXPECT_EQ(data_plane_.channel_sends(), 0);
  EXPECT_EQ(runtimes_[0]->Status().phase(), "finished");
  EXPECT_EQ(runtimes_[0]->Status().minibatches_done(), spec.max_steps());
  EXPECT_EQ(runtimes_[0]->current_job(), "");
}

// A replicated input stage (two workers, all-reduce) and tensors on device
// channels (transport "nccl": in-memory channels here, as NCCL on GPUs).
TEST_F(InProcessJobTest, ReplicatedStageOverDeviceChannelsMatchesTrainLocal) {
  JobSpec spec = *ParseJobSpec(kMlp, "test");
  spec.mutable_pipeline()->set_transport("nccl");
  AddRuntimes(3);
  Start(Assignments("replicated", spec, {{0, 5}, {2, 1}}));
  const std::vector<WorkerRun> runs = Watch("replicated", absl::Seconds(120));
  ExpectTrainLocal(runs, 2, spec, "replicated");
  // Every activation and gradient of every microbatch.
  EXPECT_EQ(data_plane_.channel_sends(), 2 * spec.max_steps() * 4);
}

// Every receive in the trace has its send (same flow id, one "out" and one
// "in"), across replicas and microbatches; and the reports carry the stage
// threads' log lines.
TEST_F(InProcessJobTest, TraceFlowsPairEverySendWithItsReceive) {
  JobSpec spec = *ParseJobSpec(kMlp, "test");
  // The process's logger copies into this buffer for the rest of the run.
  static JobLogBuffer* const logs = [] {
    auto* buffer = new JobLogBuffer();
    InstallJobLogSink(buffer);
    return buffer;
  }();
  logs_ = logs;
  AddRuntimes(3);
  Start(Assignments("flows", spec, {{0, 5}, {2, 1}}));
  const std::vector<WorkerRun> runs = Watch("flows", absl::Seconds(120));
  std::map<uint64_t, int> outs, ins;
  std::set<int> stages_logged;
  for (const WorkerRun& run : runs) {
    ASSERT_TRUE(run.finished);
    for (const StageProgress& p : run.reports) {
      for (const TraceEvent& e : p.events()) {
        if (e.flow() == "out") ++outs[e.flow_id()];
        if (e.flow() == "in") ++ins[e.flow_id()];
        if (!e.flow().empty()) {
          EXPECT_NE(e.flow_id(), 0u) << e.name();
        }
      }
      for (const v1::LogLine& line : p.log_lines()) {
        if (line.text().find("starting") != std::string::npos) {
          stages_logged.insert(line.stage());
        }
      }
    }
  }
  // One boundary (2 stages, the first replicated): an activation and a
  // gradient per microbatch (4) of each step.
  const int64_t transfers = 2 * spec.max_steps() * 4;
  EXPECT_EQ(static_cast<int64_t>(outs.size()), transfers);
  EXPECT_EQ(outs.size(), ins.size());
  for (const auto& [id, n] : ins) {
    EXPECT_EQ(n, 1) << id;
    EXPECT_EQ(outs.count(id), 1u) << "receive " << id << " has no send";
  }
  for (const auto& [id, n] : outs) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(stages_logged, (std::set<int>{0, 1}));
}

TEST_F(InProcessJobTest, OneStageTrainsLocally) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  AddRuntimes(1);
  Start(Assignments("local", spec, {{0}, {1}}));
  const std::vector<WorkerRun> runs = Watch("local", absl::Seconds(120));
  ExpectTrainLocal(runs, 0, spec, "one stage");
}

// Stage 1 cannot load its initial weights: it fails saying so, naming the
// job's workers, and the others end too (stopped, or failed on the closed
// connection) long before their peer deadline.
void ExpectFailureEndsTheJob(const std::vector<WorkerRun>& runs,
                             absl::Duration took) {
  EXPECT_LT(took, absl::Seconds(30));
  EXPECT_EQ(runs[1].phase, RuntimePhase::kFailed);
  EXPECT_NE(runs[1].error.find("init_weights: "), std::string::npos)
      << runs[1].error;
  EXPECT_NE(runs[1].error.find("[ranks: 0=w0 (stage 0), 1=w1 (stage 1), "
                               "2=w2 (stage 2)]"),
            std::string::npos)
      << runs[1].error;
  for (int i : {0, 2}) {
    EXPECT_TRUE(runs[i].phase == RuntimePhase::kStopped ||
                runs[i].phase == RuntimePhase::kFailed)
        << i << ": " << PhaseName(runs[i].phase);
    EXPECT_FALSE(runs[i].finished) << i;
  }
}

TEST_F(InProcessJobTest, FailingStageFailsAndTheCoordinatorStopsTheOthers) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  std::vector<StageAssignment> assignments =
      Assignments("fails", spec, {{0, 3, 7}, {1, 1, 1}});
  assignments[1].mutable_spec()->set_init_weights("/nonexistent/w.safetensors");
  AddRuntimes(3);
  const absl::Time start = absl::Now();
  Start(assignments);
  const std::vector<WorkerRun> runs = Watch("fails", absl::Seconds(60));
  ExpectFailureEndsTheJob(runs, absl::Now() - start);
}

TEST_F(InProcessJobTest, FailingStagesPeersSeeItsConnectionsClose) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  std::vector<StageAssignment> assignments =
      Assignments("closes", spec, {{0, 3, 7}, {1, 1, 1}});
  assignments[1].mutable_spec()->set_init_weights("/nonexistent/w.safetensors");
  AddRuntimes(3);
  const absl::Time start = absl::Now();
  Start(assignments);
  const std::vector<WorkerRun> runs =
      Watch("closes", absl::Seconds(60), /*stop_on_error=*/false);
  ExpectFailureEndsTheJob(runs, absl::Now() - start);
  for (int i : {0, 2}) {
    EXPECT_EQ(runs[i].phase, RuntimePhase::kFailed) << i;
    EXPECT_NE(runs[i].error.find("rank 1 is gone"), std::string::npos)
        << runs[i].error;
  }
}

TEST_F(InProcessJobTest, StopEndsARunningJobPromptly) {
  JobSpec spec = *ParseJobSpec(kMlp, "test");
  spec.set_max_steps(100000);  // Far more than it runs before the stop.
  spec.set_epochs(100000);
  AddRuntimes(2);
  Start(Assignments("long", spec, {{0, 5}, {1, 1}}));
  const absl::Time limit = absl::Now() + absl::Seconds(60);
  while (runtimes_[1]->Status().minibatches_done() < 3 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(runtimes_[1]->Status().minibatches_done(), 3);
  EXPECT_EQ(runtimes_[0]->phase(), RuntimePhase::kRunning);
  const absl::Time stop = absl::Now();
  for (auto& r : runtimes_) ASSERT_TRUE(r->Stop("long", "test").ok());
  const std::vector<WorkerRun> runs = Watch("long", absl::Seconds(30));
  EXPECT_LT(absl::Now() - stop, absl::Seconds(5));
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].phase, RuntimePhase::kStopped) << i;
    EXPECT_EQ(runs[i].error, "") << i;
    EXPECT_FALSE(runs[i].finished) << i;
    EXPECT_EQ(runs[i].total_steps, 100000) << i;
  }
  EXPECT_EQ(runtimes_[0]->current_job(), "");
  // The worker takes the next job.
  Start(Assignments("next", *ParseJobSpec(kMlp, "test"), {{0, 5}, {1, 1}}));
  const std::vector<WorkerRun> next = Watch("next", absl::Seconds(120));
  for (const WorkerRun& run : next) {
    EXPECT_EQ(run.phase, RuntimePhase::kFinished);
  }
}

// The roots a runtime is given: data under `data`, checkpoints under the
// test's temporary directory.
FileAccess FilesUnder(const std::string& data) {
  FileAccess files;
  files.data = *PathRoots::Make("--data_root", {data});
  const char* tmp = std::getenv("TEST_TMPDIR");
  files.checkpoints =
      *PathRoots::Make("--checkpoint_root", {tmp != nullptr ? tmp : "/tmp"});
  return files;
}

// A one-stage job whose files are not what the worker allows fails at once,
// naming the field, the path and the flag: no read of /dev/zero until
// memory runs out, no thread stuck on a FIFO.
TEST_F(InProcessJobTest, FilesOutsideTheRootsOrNotRegularFailPromptly) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = tmp != nullptr ? tmp : "/tmp";
  const std::string fifo_dir = root + "/fifo-data";
  mkdir(fifo_dir.c_str(), 0755);
  const std::string fifo = fifo_dir + "/train-images-idx3-ubyte.gz";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  struct Case {
    std::string name;
    std::string data_root;
    std::function<void(JobSpec*)> edit;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"zero", "/dev", [](JobSpec* s) { s->set_init_weights("/dev/zero"); },
       "init_weights: '/dev/zero' is a character device, not a regular file"},
      {"shadow", root, [](JobSpec* s) { s->set_init_weights("/etc/shadow"); },
       "init_weights: '/etc/shadow' is outside --data_root (" + root + ")"},
      {"fifo", root,
       [&](JobSpec* s) { s->mutable_data()->set_fashion_mnist_dir(fifo_dir); },
       "data.fashion_mnist_dir: '" + fifo + "' is a FIFO, not a regular file"},
      {"checkpoint", root,
       [](JobSpec* s) {
         s->mutable_checkpoint()->set_dir("/etc/ck");
         s->mutable_checkpoint()->set_every_steps(4);
       },
       "checkpoint.dir: '/etc/ck' is outside --checkpoint_root ("},
  };
  for (const Case& c : cases) {
    for (auto& r : runtimes_) r->Shutdown();
    runtimes_.clear();
    JobSpec spec = *ParseJobSpec(kMlp, "test");
    c.edit(&spec);
    AddRuntimes(1, FilesUnder(c.data_root));
    const absl::Time start = absl::Now();
    Start(Assignments(c.name, spec, {{0}, {1}}));
    const std::vector<WorkerRun> runs = Watch(c.name, absl::Seconds(30));
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << c.name;
    EXPECT_EQ(runs[0].phase, RuntimePhase::kFailed) << c.name;
    EXPECT_NE(runs[0].error.find(c.error), std::string::npos)
        << c.name << ": " << runs[0].error;
  }
}

}  // namespace
}  // namespace aqueduct
