// forged_worker: a worker that lies in what it reports (issue 22, item
// 11). It registers with a coordinator (authentication off), serves a
// Worker service that accepts every assignment and profiles a job's model
// with made-up times, and for every job it is started on reports one log
// line of --log_text; once --go_file exists it reports the stage failed
// with --error_text (FAILED_PRECONDITION, so the job fails at once). Both
// texts are C-unescaped first, so the shell can pass "\x1b[2J" or "\r\n".
// It judges nothing: tests/terminal_escapes_test.sh reads what `aq` shows.
//
//   forged_worker --coordinator HOST:PORT --worker_id ID --log_text T
//       --error_text T --go_file PATH
//
// Prints "reported JOB" on stdout after each log line is accepted. Runs
// until it is killed. Exit status 2 for bad usage, 1 when it cannot
// register.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/version.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "proto/service.grpc.pb.h"

namespace aqueduct {
namespace {

struct Options {
  std::string address, worker_id, log_text, error_text, go_file;
};

// What the coordinator assigned; `started` once StartJob came. Thread-safe.
class Assignments {
 public:
  void Assign(const v1::StageAssignment& a) {
    absl::MutexLock lock(&mu_);
    current_ = a;
    current_.clear_spec();
    current_.clear_plan();
    started_ = false;
  }
  void Start(const std::string& job) {
    absl::MutexLock lock(&mu_);
    if (current_.job_id() == job) started_ = true;
  }
  // Blocks until a job has started, hands it over once.
  v1::StageAssignment NextStarted() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&started_));
    started_ = false;
    return current_;
  }
  v1::StageAssignment Current() {
    absl::MutexLock lock(&mu_);
    return current_;
  }

 private:
  absl::Mutex mu_;
  v1::StageAssignment current_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
};

// Accepts everything; a profile of 1 ms a layer.
class ForgedWorkerService final : public v1::Worker::Service {
 public:
  explicit ForgedWorkerService(Assignments* a) : assignments_(a) {}

  grpc::Status AssignStage(grpc::ServerContext*,
                           const v1::StageAssignment* request,
                           v1::AssignStageResponse*) override {
    assignments_->Assign(*request);
    return grpc::Status::OK;
  }
  grpc::Status StartJob(grpc::ServerContext*,
                        const v1::StartJobRequest* request,
                        v1::StartJobResponse*) override {
    assignments_->Start(request->job_id());
    return grpc::Status::OK;
  }
  grpc::Status StopJob(grpc::ServerContext*, const v1::StopJobRequest*,
                       v1::StopJobResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::WorkerRuntimeStatus*) override {
    return grpc::Status::OK;
  }
  grpc::Status Profile(grpc::ServerContext*, const v1::ProfileRequest* request,
                       v1::ModelProfile* response) override {
    const int layers = request->spec().model().layers_size();
    for (int i = 0; i < layers; ++i) {
      v1::LayerProfile* node = response->add_nodes();
      node->set_id(absl::StrCat("layer", i));
      node->set_forward_ms(1);
      node->set_backward_ms(1);
      node->set_layer_index(i);
      if (i == 0) continue;
      v1::ProfileEdge* edge = response->add_edges();
      edge->set_from(absl::StrCat("layer", i - 1));
      edge->set_to(absl::StrCat("layer", i));
    }
    response->set_batch_size(request->spec().batch_size());
    return grpc::Status::OK;
  }

 private:
  Assignments* assignments_;
};

class Forger {
 public:
  Forger(const Options& o, Assignments* a)
      : o_(o),
        assignments_(a),
        stub_(v1::Coordinator::NewStub(grpc::CreateChannel(
            o.address, grpc::InsecureChannelCredentials()))) {}

  bool Register(int port) {
    v1::RegisterWorkerRequest r;
    v1::WorkerInfo* info = r.mutable_info();
    info->set_worker_id(o_.worker_id);
    info->set_incarnation(absl::StrCat("forged-", getpid()));
    info->set_version(kVersion);
    info->set_host("127.0.0.1");
    info->set_address(absl::StrCat("127.0.0.1:", port));
    info->mutable_device()->set_kind("cpu");
    info->mutable_device()->set_name("forged");
    info->mutable_device()->set_memory_bytes(int64_t{8} << 30);
    info->mutable_device()->set_gemm_gflops(10);
    r.set_control_token("forged-control-token");
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::RegisterWorkerResponse response;
    const grpc::Status s = stub_->RegisterWorker(&ctx, r, &response);
    if (!s.ok()) {
      std::fprintf(stderr, "forged_worker: register: %s\n",
                   s.error_message().c_str());
      return false;
    }
    incarnation_ = info->incarnation();
    interval_ = absl::Milliseconds(
        std::max<int64_t>(50, response.heartbeat_interval_ms()));
    return true;
  }

  void HeartbeatForever() {
    while (true) {
      const v1::StageAssignment a = assignments_->Current();
      v1::HeartbeatRequest beat;
      beat.set_worker_id(o_.worker_id);
      beat.set_incarnation(incarnation_);
      beat.set_job_id(a.job_id());
      beat.set_attempt(a.attempt());
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
      v1::HeartbeatResponse response;
      (void)stub_->Heartbeat(&ctx, beat, &response);  // Best effort.
      absl::SleepFor(interval_);
    }
  }

  // Reports the log line of each started job, then its failure once the
  // go file exists.
  void ForgeForever() {
    while (true) {
      const v1::StageAssignment a = assignments_->NextStarted();
      v1::StageProgress p = Progress(a);
      v1::LogLine* line = p.add_log_lines();
      line->set_time_ms(absl::ToUnixMillis(absl::Now()));
      line->set_level("info");
      line->set_text(o_.log_text);
      if (Report(p)) {
        std::printf("reported %s\n", a.job_id().c_str());
        std::fflush(stdout);
      }
      while (access(o_.go_file.c_str(), F_OK) != 0) {
        absl::SleepFor(absl::Milliseconds(50));
      }
      p = Progress(a);
      p.set_error(o_.error_text);
      p.set_error_code(static_cast<int>(grpc::FAILED_PRECONDITION));
      (void)Report(p);
    }
  }

 private:
  static v1::StageProgress Progress(const v1::StageAssignment& a) {
    v1::StageProgress p;
    p.set_job_id(a.job_id());
    p.set_stage(a.stage());
    p.set_replica(a.replica());
    p.set_attempt(a.attempt());
    return p;
  }

  bool Report(const v1::StageProgress& p) {
    v1::ReportProgressRequest r;
    r.set_worker_id(o_.worker_id);
    r.set_incarnation(incarnation_);
    *r.add_stages() = p;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::ReportProgressResponse response;
    const grpc::Status s = stub_->ReportProgress(&ctx, r, &response);
    if (!s.ok()) {
      std::fprintf(stderr, "forged_worker: report of %s: %s\n",
                   p.job_id().c_str(), s.error_message().c_str());
    }
    return s.ok();
  }

  const Options o_;
  Assignments* assignments_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::string incarnation_;
  absl::Duration interval_ = absl::Milliseconds(100);
};

bool ParseFlags(int argc, char** argv, Options* o) {
  std::map<std::string, std::string*> flags = {
      {"--coordinator", &o->address}, {"--worker_id", &o->worker_id},
      {"--log_text", &o->log_text},   {"--error_text", &o->error_text},
      {"--go_file", &o->go_file},
  };
  for (int i = 1; i + 1 < argc; i += 2) {
    auto it = flags.find(argv[i]);
    if (it == flags.end()) return false;
    *it->second = argv[i + 1];
  }
  std::string log_text, error_text, error;
  if (!absl::CUnescape(o->log_text, &log_text, &error) ||
      !absl::CUnescape(o->error_text, &error_text, &error)) {
    std::fprintf(stderr, "forged_worker: %s\n", error.c_str());
    return false;
  }
  o->log_text = std::move(log_text);
  o->error_text = std::move(error_text);
  return !o->address.empty() && !o->worker_id.empty() && !o->go_file.empty();
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseFlags(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: forged_worker --coordinator HOST:PORT --worker_id ID "
                 "--log_text T --error_text T --go_file PATH\n");
    return 2;
  }
  Assignments assignments;
  ForgedWorkerService service(&assignments);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  Forger forger(o, &assignments);
  if (server == nullptr || port == 0 || !forger.Register(port)) return 1;
  std::thread heartbeats([&forger] { forger.HeartbeatForever(); });
  forger.ForgeForever();  // Until killed.
  heartbeats.join();
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
