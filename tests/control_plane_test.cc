// In-process control plane over real gRPC on loopback: a coordinator server
// on port 0 and several worker agents (each with its own Worker service on
// port 0) as threads. A job runs to success through the real RPCs; oversized
// and malformed requests get precise statuses; deregistration is seen.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/grpc_coordinator_client.h"
#include "common/version.h"
#include "coordinator/core.h"
#include "coordinator/grpc_worker_client.h"
#include "coordinator/service.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "worker/agent.h"
#include "worker/nn/spec.h"
#include "worker/runtime/coordinator_store.h"
#include "worker/runtime/gloo_data_plane.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/service.h"

namespace aqueduct {
namespace {

constexpr char kSpec[] = R"pb(
  name: "inproc"
  model {
    layers { flatten {} }
    layers { linear { in_features: 8 out_features: 16 } }
    layers { relu {} }
    layers { linear { in_features: 16 out_features: 3 } }
  }
  data {
    synthetic {
      sample_shape: [ 8 ]
      num_classes: 3
      train_samples: 512
      test_samples: 128
      seed: 2
    }
  }
  optimizer { sgd { lr: 0.1 momentum: 0.9 } }
  batch_size: 16
  epochs: 2
)pb";

struct Worker {
  // Declared first: what the runtime and the agent use outlives them.
  std::unique_ptr<CoordinatorClient> coordinator;
  std::unique_ptr<CoordinatorStore> store;
  std::unique_ptr<GlooDataPlaneFactory> data_plane;
  std::unique_ptr<StageRuntime> runtime;
  std::unique_ptr<GrpcWorkerService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<WorkerAgent> agent;
  int port = 0;
};

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.registry.heartbeat_interval = absl::Milliseconds(50);
    // Generous: three training workers share two cores here.
    o.registry.dead_after = absl::Seconds(5);
    o.registry.version = kVersion;
    core_ = std::make_unique<CoordinatorCore>(o, RealClock::Get(),
                                              clients_.Factory());
    ServiceSecurity security;
    security.on_control_token = [this](const std::string& address,
                                       const std::string& token) {
      clients_.SetControlToken(address, token);
    };
    service_ = std::make_unique<GrpcCoordinatorService>(core_.get(), nullptr,
                                                        std::move(security));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.SetMaxReceiveMessageSize(4 << 20);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ticker_ = std::thread([this] {
      while (!stop_) {
        core_->Tick();
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
    stub_ = v1::Coordinator::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    for (auto& w : workers_) {
      w->agent->Stop();
      w->runtime->Shutdown();
      w->server->Shutdown();
    }
    stop_ = true;
    ticker_.join();
    server_->Shutdown();
  }

  void AddWorker(const std::string& id) {
    auto w = std::make_unique<Worker>();
    StageRuntimeOptions runtime_options;
    runtime_options.peer_timeout = absl::Seconds(20);
    // The test's text files are written under TEST_TMPDIR.
    absl::StatusOr<PathRoots> roots =
        PathRoots::Make("--data_root", {std::getenv("TEST_TMPDIR")});
    ASSERT_TRUE(roots.ok()) << roots.status();
    runtime_options.files.data = *roots;
    w->coordinator =
        NewGrpcCoordinatorClient(absl::StrCat("127.0.0.1:", port_));
    w->store = std::make_unique<CoordinatorStore>(w->coordinator.get());
    w->data_plane =
        std::make_unique<GlooDataPlaneFactory>(GlooDataPlaneOptions());
    w->runtime = std::make_unique<StageRuntime>(
        runtime_options, w->data_plane.get(), w->store.get());
    Worker* raw = w.get();
    w->service = std::make_unique<GrpcWorkerService>(
        w->runtime.get(), DeviceSpec{}, 1, [raw] { return raw->agent->info(); },
        "control-" + id);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &w->port);
    builder.RegisterService(w->service.get());
    w->server = builder.BuildAndStart();
    AgentOptions o;
    o.coordinator_address = absl::StrCat("127.0.0.1:", port_);
    o.info.set_worker_id(id);
    o.info.set_version(kVersion);
    o.info.set_address(absl::StrCat("127.0.0.1:", w->port));
    o.control_token = "control-" + id;
    o.progress_interval = absl::Milliseconds(50);
    w->agent = std::make_unique<WorkerAgent>(o, w->runtime.get(),
                                             w->coordinator.get());
    w->agent->Start();
    ASSERT_TRUE(w->agent->WaitRegistered(absl::Seconds(10)));
    workers_.push_back(std::move(w));
  }

  GrpcWorkerClients clients_;
  std::unique_ptr<CoordinatorCore> core_;
  std::unique_ptr<GrpcCoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread ticker_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

TEST_F(ControlPlaneTest, JobRunsThroughRealRpcs) {
  for (const char* id : {"a", "b", "c"}) AddWorker(id);
  EXPECT_EQ(core_->ListWorkers().size(), 3u);
  v1::SubmitJobRequest request;
  *request.mutable_spec() = *ParseJobSpec(kSpec, "test");
  v1::SubmitJobResponse response;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->SubmitJob(&ctx, request, &response).ok());

  // Watch it to the end over the stream.
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
  v1::WatchJobRequest watch;
  watch.set_job_id(response.job_id());
  watch.set_max_rate_hz(20);
  auto reader = stub_->WatchJob(&watch_ctx, watch);
  JobStatus status, last;
  int updates = 0;
  while (reader->Read(&status)) {
    last = status;
    ++updates;
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_GE(updates, 2);
  EXPECT_EQ(last.state(), v1::JOB_SUCCEEDED) << last.reason();
  EXPECT_EQ(last.step(), 64);
  EXPECT_EQ(last.stages(0).committed_version(), 64);
  EXPECT_GT(last.test_accuracy(), 0.5);
  EXPECT_FALSE(last.loss_curve().empty());

  grpc::ClientContext plan_ctx;
  v1::GetPlanRequest plan_request;
  plan_request.set_job_id(response.job_id());
  PartitionPlan plan;
  ASSERT_TRUE(stub_->GetPlan(&plan_ctx, plan_request, &plan).ok());
  EXPECT_EQ(plan.stages_size(), 1);
}

JobStatus SubmitAndWatch(v1::Coordinator::Stub* stub, const JobSpec& spec) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitJobResponse response;
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub->SubmitJob(&ctx, request, &response).ok());
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(120));
  v1::WatchJobRequest watch;
  watch.set_job_id(response.job_id());
  auto reader = stub->WatchJob(&watch_ctx, watch);
  JobStatus status, last;
  while (reader->Read(&status)) last = status;
  EXPECT_TRUE(reader->Finish().ok());
  return last;
}

TEST_F(ControlPlaneTest, PipelinesRunAcrossWorkersOverGloo) {
  for (const char* id : {"a", "b", "c"}) AddWorker(id);
  for (const char* schedule : {"1f1b_stashed", "1f1b_flush", "gpipe"}) {
    JobSpec spec = *ParseJobSpec(kSpec, "test");
    spec.mutable_pipeline()->set_workers(3);
    spec.mutable_pipeline()->set_schedule(schedule);
    spec.mutable_pipeline()->set_microbatches(4);
    const JobStatus last = SubmitAndWatch(stub_.get(), spec);
    EXPECT_EQ(last.state(), v1::JOB_SUCCEEDED)
        << schedule << ": " << last.reason();
    EXPECT_EQ(last.step(), 64) << schedule;
    EXPECT_GE(last.stages_size(), 1) << schedule;
    EXPECT_GT(last.test_accuracy(), 0.5) << schedule;
    EXPECT_EQ(last.loss_curve_size(), 64) << schedule;
    // The executed schedule is traced: every stage replica's forwards.
    grpc::ClientContext trace_ctx;
    v1::GetTraceRequest trace_request;
    trace_request.set_job_id(last.job_id());
    v1::GetTraceResponse trace;
    ASSERT_TRUE(stub_->GetTrace(&trace_ctx, trace_request, &trace).ok());
    int workers = 0;
    for (const StageStatus& st : last.stages()) workers += st.workers_size();
    EXPECT_EQ(trace.stages_size(), workers) << schedule;
    for (const v1::StageTrace& st : trace.stages()) {
      int forwards = 0;
      for (const TraceEvent& e : st.events()) {
        forwards += e.name().rfind("F mb=", 0) == 0;
        EXPECT_GE(e.duration_us(), 0);
      }
      EXPECT_GT(forwards, 0) << schedule << " stage " << st.stage();
    }
    for (int s = 0; s < last.stages_size(); ++s) {
      const StageStatus& st = last.stages(s);
      EXPECT_EQ(st.committed_version(), 64) << schedule;
      EXPECT_GT(st.peak_rss_bytes(), 0) << schedule;
      const int depth = last.plan().stages(s).warmup_depth();
      // Stashed versions never exceed depth (+ the newest), saved
      // activations never exceed the in-flight count.
      EXPECT_LE(st.peak_stashed_versions(), depth) << schedule;
      if (std::string(schedule) == "1f1b_stashed") {
        EXPECT_LE(st.peak_in_flight(), depth + 1) << schedule;
      }
    }
  }
}

TEST_F(ControlPlaneTest, PipelineWithoutTestSplitSucceeds) {
  for (const char* id : {"a", "b"}) AddWorker(id);
  JobSpec spec = *ParseJobSpec(kSpec, "test");
  spec.mutable_data()->mutable_synthetic()->set_test_samples(0);
  spec.mutable_pipeline()->set_workers(2);
  const JobStatus last = SubmitAndWatch(stub_.get(), spec);
  EXPECT_EQ(last.state(), v1::JOB_SUCCEEDED) << last.reason();
  EXPECT_EQ(last.test_accuracy(), 0);
}

// A small GPT over a text file written for the test; its head tied to its
// token embedding when `tied`.
JobSpec GptSpec(bool tied, const std::string& schedule) {
  const std::string path = testing::TempDir() + "/control_plane_text.txt";
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the cat sat on the mat. ";
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  JobSpec spec = *ParseJobSpec(
      R"pb(
        model {
          layers { token_embedding { vocab_size: 16 dim: 16 } }
          layers { position_embedding { context: 8 dim: 16 } }
          layers { transformer_block { dim: 16 heads: 2 } }
          layers { transformer_block { dim: 16 heads: 2 } }
          layers { layer_norm { normalized_shape: 16 } }
          layers { linear { in_features: 16 out_features: 16 bias: false } }
        }
        data { text { context: 8 val_windows: 16 } }
        optimizer { adam { lr: 0.01 } }
        batch_size: 8
        max_steps: 40
        eval_every: 10
        seed: 2
        # A slow network for the planner: weights are far larger than the
        # activations, so it cuts a pipeline rather than replicate.
        pipeline { workers: 3 microbatches: 2 bandwidth_bytes_per_s: 1e6 }
      )pb",
      "gpt");
  spec.mutable_data()->mutable_text()->add_files(path);
  spec.mutable_pipeline()->set_schedule(schedule);
  if (tied) spec.mutable_model()->mutable_layers(5)->set_tie_weight_to(0);
  return spec;
}

// A GPT across three workers over Gloo: tied across the first and last
// stage under the flushing schedules, untied under weight stashing, with a
// validation every 10 steps gathered on the output stage while the others
// train on.
TEST_F(ControlPlaneTest, GptPipelinesTrainAndValidate) {
  for (const char* id : {"a", "b", "c"}) AddWorker(id);
  for (const char* schedule : {"1f1b_flush", "gpipe", "1f1b_stashed"}) {
    const bool tied = std::string(schedule) != "1f1b_stashed";
    const JobStatus last = SubmitAndWatch(stub_.get(), GptSpec(tied, schedule));
    ASSERT_EQ(last.state(), v1::JOB_SUCCEEDED)
        << schedule << ": " << last.reason();
    EXPECT_EQ(last.plan().stages_size(), 3) << schedule;
    EXPECT_EQ(last.eval_split(), "validation") << schedule;
    ASSERT_EQ(last.evals_size(), 4) << schedule;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(last.evals(i).step(), 10 * (i + 1)) << schedule;
    }
    // Below chance (ln 9 characters = 2.2) and improving.
    EXPECT_LT(last.test_loss(), 1.5) << schedule;
    EXPECT_EQ(last.test_loss(), last.evals(3).loss()) << schedule;
    EXPECT_LT(last.evals(3).loss(), last.evals(0).loss()) << schedule;
  }
}

// A tie across stages under weight stashing is refused at submission; a
// text file missing on the workers fails the job naming the path.
TEST_F(ControlPlaneTest, GptSpecProblemsAreNamed) {
  for (const char* id : {"a", "b", "c"}) AddWorker(id);
  v1::SubmitJobRequest request;
  *request.mutable_spec() = GptSpec(true, "1f1b_stashed");
  v1::SubmitJobResponse response;
  grpc::ClientContext ctx;
  const grpc::Status refused = stub_->SubmitJob(&ctx, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("model.layers[5].tie_weight_to=0"),
            std::string::npos)
      << refused.error_message();
  JobSpec missing = GptSpec(false, "1f1b_flush");
  missing.mutable_data()->mutable_text()->set_files(0, "/nonexistent/t.txt");
  const JobStatus last = SubmitAndWatch(stub_.get(), missing);
  EXPECT_EQ(last.state(), v1::JOB_FAILED);
  EXPECT_NE(last.reason().find("/nonexistent/t.txt"), std::string::npos)
      << last.reason();
}

TEST_F(ControlPlaneTest, BadRequestsGetPreciseStatuses) {
  AddWorker("a");
  // Oversized message: refused by gRPC's limit, the server keeps serving.
  v1::StoreSetRequest big;
  big.set_key("k");
  big.set_value(std::string(5 << 20, 'x'));
  v1::StoreSetResponse set_response;
  grpc::ClientContext big_ctx;
  const grpc::Status too_big = stub_->StoreSet(&big_ctx, big, &set_response);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // A store value over the store's own limit.
  v1::StoreSetRequest large;
  large.set_key("k");
  large.set_value(std::string((1 << 20) + 1, 'x'));
  grpc::ClientContext large_ctx;
  EXPECT_EQ(stub_->StoreSet(&large_ctx, large, &set_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Unknown job.
  grpc::ClientContext get_ctx;
  v1::GetJobRequest get;
  get.set_job_id("job-none");
  JobStatus status;
  const grpc::Status missing = stub_->GetJob(&get_ctx, get, &status);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(missing.error_message(), "job 'job-none' does not exist");
  // Progress from an unregistered worker.
  grpc::ClientContext progress_ctx;
  v1::ReportProgressRequest progress;
  progress.set_worker_id("ghost");
  progress.set_incarnation("x");
  v1::ReportProgressResponse progress_response;
  EXPECT_EQ(stub_->ReportProgress(&progress_ctx, progress, &progress_response)
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
  // A worker of a different major version.
  grpc::ClientContext register_ctx;
  v1::RegisterWorkerRequest reg;
  reg.mutable_info()->set_worker_id("old");
  reg.mutable_info()->set_incarnation("1");
  reg.mutable_info()->set_address("127.0.0.1:1");
  reg.mutable_info()->set_version("7.0.0");
  v1::RegisterWorkerResponse reg_response;
  const grpc::Status refused =
      stub_->RegisterWorker(&register_ctx, reg, &reg_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("'7.0.0'"), std::string::npos);
  // Store round trip with a waiting get.
  grpc::ClientContext wait_ctx;
  v1::StoreGetRequest wait;
  wait.set_key("jobs/job-none/a0/never");  // Keys are scoped to a job.
  wait.set_wait_ms(100);
  v1::StoreGetResponse got;
  EXPECT_EQ(stub_->StoreGet(&wait_ctx, wait, &got).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  // Everything still works.
  grpc::ClientContext list_ctx;
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(
      stub_->ListWorkers(&list_ctx, v1::ListWorkersRequest(), &workers).ok());
  EXPECT_EQ(workers.workers_size(), 1);
}

TEST_F(ControlPlaneTest, StoppedAgentDeregisters) {
  AddWorker("a");
  workers_[0]->agent->Stop();
  auto status = core_->ListWorkers();
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].state(), v1::WORKER_LEFT);
}

}  // namespace
}  // namespace aqueduct
