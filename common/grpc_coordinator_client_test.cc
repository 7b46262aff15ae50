// The gRPC CoordinatorClient against a small Coordinator service on a
// loopback port: responses and statuses come through, every call carries
// the deadline it was given, and WatchJob streams and stops early.
#include "common/grpc_coordinator_client.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/service.grpc.pb.h"

namespace aqueduct {
namespace {

class TestService final : public v1::Coordinator::Service {
 public:
  grpc::Status RegisterWorker(grpc::ServerContext*,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse*) override {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("incarnation ", request->info().incarnation(),
                     " is DEAD"));
  }

  // Answers with the deadline it saw, as milliseconds left.
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse* response) override {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        ctx->deadline() - std::chrono::system_clock::now());
    response->add_stop_jobs(absl::StrCat(left.count()));
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::JobStatus* response) override {
    response->set_job_id(request->job_id());
    response->set_state(v1::JOB_RUNNING);
    return grpc::Status::OK;
  }

  // Never answers in time.
  grpc::Status StoreGet(grpc::ServerContext* ctx, const v1::StoreGetRequest*,
                        v1::StoreGetResponse*) override {
    while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "late");
  }

  // Five updates, steps 1..5, then the end of the stream.
  grpc::Status WatchJob(grpc::ServerContext* ctx,
                        const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobStatus>* writer) override {
    for (int step = 1; step <= 5 && !ctx->IsCancelled(); ++step) {
      v1::JobStatus status;
      status.set_job_id(request->job_id());
      status.set_step(step);
      if (!writer->Write(status)) break;
    }
    return grpc::Status::OK;
  }
};

class CoordinatorClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ = NewGrpcCoordinatorClient(absl::StrCat("127.0.0.1:", port_));
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
  }

  TestService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(CoordinatorClientTest, ResponsesAndStatusesComeThrough) {
  v1::GetJobRequest get;
  get.set_job_id("job-3");
  absl::StatusOr<v1::JobStatus> job = client_->GetJob(get, absl::Seconds(5));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job_id(), "job-3");
  EXPECT_EQ(job->state(), v1::JOB_RUNNING);

  v1::RegisterWorkerRequest reg;
  reg.mutable_info()->set_incarnation("i1");
  absl::StatusOr<v1::RegisterWorkerResponse> r =
      client_->RegisterWorker(reg, absl::Seconds(5));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "incarnation i1 is DEAD");

  // Not implemented by the test service.
  EXPECT_EQ(client_->ListJobs(v1::ListJobsRequest(), absl::Seconds(5))
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(CoordinatorClientTest, EveryCallCarriesItsDeadline) {
  absl::StatusOr<v1::HeartbeatResponse> hb =
      client_->Heartbeat(v1::HeartbeatRequest(), absl::Seconds(3));
  ASSERT_TRUE(hb.ok()) << hb.status();
  int64_t left_ms = 0;
  ASSERT_TRUE(absl::SimpleAtoi(hb->stop_jobs(0), &left_ms));
  EXPECT_GT(left_ms, 1000);
  EXPECT_LE(left_ms, 3100);  // gRPC rounds the timeout on the wire up.
  // Even an infinite timeout gets a (far) deadline.
  hb = client_->Heartbeat(v1::HeartbeatRequest(), absl::InfiniteDuration());
  ASSERT_TRUE(hb.ok()) << hb.status();
  ASSERT_TRUE(absl::SimpleAtoi(hb->stop_jobs(0), &left_ms));
  EXPECT_GT(left_ms, int64_t{300} * 24 * 3600 * 1000);

  const absl::Time start = absl::Now();
  absl::StatusOr<v1::StoreGetResponse> got =
      client_->StoreGet(v1::StoreGetRequest(), absl::Milliseconds(100));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST_F(CoordinatorClientTest, WatchJobStreamsToTheEndOrUntilTheCallerStops) {
  v1::WatchJobRequest request;
  request.set_job_id("job-1");
  std::vector<int64_t> steps;
  absl::Status s = client_->WatchJob(request, absl::Seconds(10),
                                     [&steps](const v1::JobStatus& status) {
                                       steps.push_back(status.step());
                                       return true;
                                     });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));

  steps.clear();
  s = client_->WatchJob(request, absl::Seconds(10),
                        [&steps](const v1::JobStatus& status) {
                          steps.push_back(status.step());
                          return steps.size() < 2;
                        });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2}));
}

TEST(CoordinatorClientUnreachableTest, IsUnavailable) {
  // A port nobody listens on: bind one, then let it go.
  int port = 0;
  {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(server, nullptr);
    server->Shutdown();
  }
  std::unique_ptr<CoordinatorClient> client =
      NewGrpcCoordinatorClient(absl::StrCat("127.0.0.1:", port));
  const absl::Status s =
      client->ReportProgress(v1::ReportProgressRequest(), absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace aqueduct
