// The gRPC CoordinatorClient against a small Coordinator service on a
// loopback port: responses and statuses come through, every call carries
// the deadline it was given, WatchJob and GetModel stream and stop early,
// and UploadModel sends a model in 1 MiB chunks that each carry the
// uploader's identity, the offset, the size and the CRC-32 of the whole.
#include "common/grpc_coordinator_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/service.grpc.pb.h"
#include "zlib.h"

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

  grpc::Status ListCheckpoints(grpc::ServerContext*,
                               const v1::ListCheckpointsRequest* request,
                               v1::ListCheckpointsResponse* response) override {
    v1::CheckpointManifest* m = response->add_checkpoints();
    m->set_job_id(request->job_id());
    m->set_version(12);
    return grpc::Status::OK;
  }

  // Three chunks "aaa", "bbb", "ccc".
  grpc::Status GetModel(grpc::ServerContext* ctx, const v1::GetModelRequest*,
                        grpc::ServerWriter<v1::ModelChunk>* writer) override {
    for (int i = 0; i < 3 && !ctx->IsCancelled(); ++i) {
      v1::ModelChunk chunk;
      chunk.set_offset(3 * i);
      chunk.set_data(std::string(3, static_cast<char>('a' + i)));
      chunk.set_total_bytes(9);
      if (!writer->Write(chunk)) break;
    }
    return grpc::Status::OK;
  }

  // Keeps every chunk; answers with the number received.
  grpc::Status UploadModel(grpc::ServerContext*,
                           grpc::ServerReader<v1::UploadModelChunk>* reader,
                           v1::UploadModelResponse* response) override {
    v1::UploadModelChunk chunk;
    int n = 0;
    while (reader->Read(&chunk)) {
      ++n;
      absl::MutexLock lock(&mu_);
      chunks_.push_back(chunk);
    }
    response->set_path(absl::StrCat(n, " chunks"));
    return grpc::Status::OK;
  }

  std::vector<v1::UploadModelChunk> TakeChunks() {
    absl::MutexLock lock(&mu_);
    return std::move(chunks_);
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::UploadModelChunk> chunks_ ABSL_GUARDED_BY(mu_);
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
  // A minute: the server sees most of it (whatever the machine's load
  // between the call and its handler), and none of it beyond.
  absl::StatusOr<v1::HeartbeatResponse> hb =
      client_->Heartbeat(v1::HeartbeatRequest(), absl::Seconds(60));
  ASSERT_TRUE(hb.ok()) << hb.status();
  int64_t left_ms = 0;
  ASSERT_TRUE(absl::SimpleAtoi(hb->stop_jobs(0), &left_ms));
  EXPECT_GT(left_ms, 30000);
  EXPECT_LE(left_ms, 60100);  // gRPC rounds the timeout on the wire up.
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

TEST_F(CoordinatorClientTest, ListCheckpointsAndGetModel) {
  v1::ListCheckpointsRequest list;
  list.set_job_id("job-2");
  auto checkpoints = client_->ListCheckpoints(list, absl::Seconds(5));
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  ASSERT_EQ(checkpoints->checkpoints_size(), 1);
  EXPECT_EQ(checkpoints->checkpoints(0).job_id(), "job-2");
  EXPECT_EQ(checkpoints->checkpoints(0).version(), 12);

  v1::GetModelRequest get;
  get.set_job_id("job-2");
  std::string model;
  absl::Status s = client_->GetModel(get, absl::Seconds(10),
                                     [&model](const v1::ModelChunk& chunk) {
                                       model += chunk.data();
                                       return true;
                                     });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(model, "aaabbbccc");
  model.clear();
  s = client_->GetModel(get, absl::Seconds(10),
                        [&model](const v1::ModelChunk& chunk) {
                          model += chunk.data();
                          return false;
                        });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(model, "aaa");
}

TEST_F(CoordinatorClientTest, UploadModelSendsCheckedChunks) {
  std::string bytes((5 << 20) / 2, '\0');  // 2.5 MiB.
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>((i * 7919) >> 3);
  }
  const uint32_t crc = static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
  v1::UploadModelChunk header;
  header.set_worker_id("w1");
  header.set_incarnation("i1");
  header.set_job_id("job-4");
  header.set_attempt(2);
  header.set_offset(77);  // Ignored, like data, total_bytes and crc32.
  auto response = client_->UploadModel(header, bytes, absl::Seconds(10));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->path(), "3 chunks");
  std::string received;
  for (const v1::UploadModelChunk& c : service_.TakeChunks()) {
    EXPECT_EQ(c.worker_id(), "w1");
    EXPECT_EQ(c.incarnation(), "i1");
    EXPECT_EQ(c.job_id(), "job-4");
    EXPECT_EQ(c.attempt(), 2);
    EXPECT_EQ(c.offset(), static_cast<int64_t>(received.size()));
    EXPECT_EQ(c.total_bytes(), static_cast<int64_t>(bytes.size()));
    EXPECT_EQ(c.crc32(), crc);
    EXPECT_LE(c.data().size(), size_t{1} << 20);
    received += c.data();
  }
  EXPECT_TRUE(received == bytes);

  // Even an empty model is one chunk that names the job.
  response = client_->UploadModel(header, "", absl::Seconds(10));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->path(), "1 chunks");
  EXPECT_EQ(service_.TakeChunks()[0].job_id(), "job-4");
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

// A coordinator away for a while and back on its address is reached again
// within seconds. gRPC's own backoff (1 s, x1.6 a try, up to 120 s) waited
// 4 to 7 s after a 10 s outage, and up to 2 minutes after a longer one:
// workers missed a restarted coordinator's 15 s wait for them.
// A free loopback port below Linux's ephemeral range (32768-60999): a
// port 0 bind elsewhere (another test's daemons, run alongside) cannot
// take it while this test's coordinator is away. 0 if none is free.
int PortOutsideEphemeralRange() {
  for (int port = 20000 + static_cast<int>(getpid() % 10000); port < 32000;
       port += 7) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free =
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (free) return port;
  }
  return 0;
}

TEST(CoordinatorClientUnreachableTest, ReconnectsSoonAfterAnOutage) {
  const int port = PortOutsideEphemeralRange();
  ASSERT_NE(port, 0);
  std::unique_ptr<CoordinatorClient> client =
      NewGrpcCoordinatorClient(absl::StrCat("127.0.0.1:", port));
  v1::GetJobRequest get;
  get.set_job_id("job-1");
  const absl::Time back_at = absl::Now() + absl::Seconds(10);
  // Calls during the outage, as a worker's: refused at once (the
  // timeout is no bound on them; it only must not end them first).
  while (absl::Now() < back_at) {
    EXPECT_EQ(client->GetJob(get, absl::Seconds(10)).status().code(),
              absl::StatusCode::kUnavailable);
    absl::SleepFor(absl::Milliseconds(200));
  }
  TestService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const absl::Time back = absl::Now();
  absl::StatusOr<v1::JobStatus> job;
  do {
    job = client->GetJob(get, absl::Seconds(1));
    if (!job.ok()) absl::SleepFor(absl::Milliseconds(100));
  } while (!job.ok() && absl::Now() - back < absl::Seconds(15));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_LT(absl::Now() - back, absl::Seconds(3.5));
  server->Shutdown();
}

}  // namespace
}  // namespace aqueduct
