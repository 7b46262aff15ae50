// The real daemons with TLS and tokens (docs/security.md): a coordinator
// and two workers started from their binaries with certificates and tokens
// from deploy/tls/make-dev-ca.sh, a two-stage pipeline job submitted with
// aq, and, while it trains, every kind of caller the issue names trying
// what it may not: each is refused with UNAUTHENTICATED or
// PERMISSION_DENIED (a wrong CA fails the TLS handshake: UNAVAILABLE), and
// the job still SUCCEEDS.
//
// Arguments: aq coordinator worker make-dev-ca.sh
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/service.grpc.pb.h"

namespace aqueduct {
namespace {

std::vector<std::string> g_args;  // aq coordinator worker make-dev-ca.sh

std::string Tmp() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `argv` with stdout and stderr to `log`; returns its pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    FILE* out = std::fopen(log.c_str(), "w");
    if (out != nullptr) {
      dup2(fileno(out), 1);
      dup2(fileno(out), 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv)
      args.push_back(const_cast<char*>(a.data()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// Runs `command` in a shell; its exit status.
int Shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Polls `done` every 100 ms for up to `limit`.
template <typename F>
bool WaitUntil(absl::Duration limit, F done) {
  const absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();

  // TLS as `cert` (a file stem in the CA dir, "" for none) trusting `ca`.
  static SecurityConfig Tls(const std::string& ca_dir, const std::string& cert,
                            const std::string& token_name);
  static std::unique_ptr<v1::Coordinator::Stub> Coordinator(
      const SecurityConfig& config);
  static std::unique_ptr<v1::Worker::Stub> Worker(const std::string& address,
                                                  const SecurityConfig& config);
  static void Prepare(grpc::ClientContext* ctx, const SecurityConfig& config);
  static v1::JobStatus Job(const std::string& job_id);
  static std::string AqEnv(const std::string& token_name);
  static void StartWorker(int index);

  static std::string ca_;     // the cluster's CA directory
  static std::string other_;  // another CA's directory
  static std::string address_;
  static std::string job_id_;
  static std::vector<pid_t> pids_;
};

std::string SecurityTest::ca_;
std::string SecurityTest::other_;
std::string SecurityTest::address_;
std::string SecurityTest::job_id_;
std::vector<pid_t> SecurityTest::pids_;

SecurityConfig SecurityTest::Tls(const std::string& ca_dir,
                                 const std::string& cert,
                                 const std::string& token_name) {
  SecurityConfig c;
  c.ca_pem = ReadAll(ca_dir + "/ca.pem");
  if (!cert.empty()) {
    c.cert_pem = ReadAll(ca_dir + "/" + cert + ".pem");
    c.key_pem = ReadAll(ca_dir + "/" + cert + ".key");
  }
  if (!token_name.empty()) {
    c.token = std::string(
        absl::StripAsciiWhitespace(ReadAll(ca_dir + "/token." + token_name)));
  }
  return c;
}

std::unique_ptr<v1::Coordinator::Stub> SecurityTest::Coordinator(
    const SecurityConfig& config) {
  return v1::Coordinator::NewStub(
      grpc::CreateChannel(address_, ChannelCredentials(config)));
}

std::unique_ptr<v1::Worker::Stub> SecurityTest::Worker(
    const std::string& address, const SecurityConfig& config) {
  return v1::Worker::NewStub(
      grpc::CreateChannel(address, ChannelCredentials(config)));
}

void SecurityTest::Prepare(grpc::ClientContext* ctx,
                           const SecurityConfig& config) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
  AddBearerToken(ctx, config.token);
}

v1::JobStatus SecurityTest::Job(const std::string& job_id) {
  const SecurityConfig admin = Tls(ca_, "", "admin");
  grpc::ClientContext ctx;
  Prepare(&ctx, admin);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::JobStatus status;
  EXPECT_TRUE(Coordinator(admin)->GetJob(&ctx, request, &status).ok());
  return status;
}

std::string SecurityTest::AqEnv(const std::string& token_name) {
  return absl::StrCat("AQ_COORDINATOR=", address_, " AQ_TLS_CA=", ca_,
                      "/ca.pem AQ_TOKEN_FILE=", ca_, "/token.", token_name,
                      " ");
}

void SecurityTest::StartWorker(int index) {
  const std::string id = absl::StrCat("worker-", index);
  pids_.push_back(
      Spawn({g_args[2], "--coordinator", address_, "--worker_id", id,
             "--threads", "1", "--measure_gemm=false", "--tls_ca",
             ca_ + "/ca.pem", "--tls_cert", ca_ + "/worker.pem", "--tls_key",
             ca_ + "/worker.key", "--token_file", ca_ + "/token." + id},
            absl::StrCat(Tmp(), "/", id, ".log")));
}

void SecurityTest::SetUpTestSuite() {
  ca_ = Tmp() + "/ca";
  other_ = Tmp() + "/other-ca";
  ASSERT_EQ(
      Shell(absl::StrCat(g_args[3], " ", ca_,
                         " --workers 2 --users admin,mallory >/dev/null")),
      0);
  ASSERT_EQ(
      Shell(absl::StrCat(g_args[3], " ", other_, " --workers 2 >/dev/null")),
      0);
  const std::string port_file = Tmp() + "/port";
  pids_.push_back(
      Spawn({g_args[1], "--listen", "127.0.0.1:0", "--port_file", port_file,
             "--state_dir", Tmp() + "/state", "--tls_ca", ca_ + "/ca.pem",
             "--tls_cert", ca_ + "/coordinator.pem", "--tls_key",
             ca_ + "/coordinator.key", "--tokens_file", ca_ + "/tokens",
             "--heartbeat_interval_ms", "200"},
            Tmp() + "/coordinator.log"));
  ASSERT_TRUE(WaitUntil(absl::Seconds(20), [&] {
    return !ReadAll(port_file).empty();
  })) << ReadAll(Tmp() + "/coordinator.log");
  address_ = absl::StrCat("127.0.0.1:",
                          absl::StripAsciiWhitespace(ReadAll(port_file)));
  StartWorker(0);
  StartWorker(1);
  std::ofstream(Tmp() + "/job.textproto")
      << "name: \"guarded\"\n"
         "model { layers { linear { in_features: 64 out_features: 256 } }\n"
         "  layers { relu {} } layers { linear { in_features: 256 "
         "out_features: 10 } } }\n"
         "data { synthetic { sample_shape: [64] num_classes: 10 "
         "train_samples: 32000 test_samples: 64 seed: 3 } }\n"
         "optimizer { sgd { lr: 0.05 } }\n"
         "batch_size: 16\nepochs: 1\n"
         "pipeline { workers: 2 schedule: \"1f1b_flush\" microbatches: 4 }\n";
  const std::string out = Tmp() + "/submit.out";
  ASSERT_EQ(Shell(AqEnv("admin") + g_args[0] + " submit " + Tmp() +
                  "/job.textproto --output json >" + out + " 2>&1"),
            0)
      << ReadAll(out);
  const std::string json = ReadAll(out);
  const size_t at = json.find("\"job_id\":\"");
  ASSERT_NE(at, std::string::npos) << json;
  job_id_ = json.substr(at + 10, json.find('"', at + 10) - at - 10);
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [] {
    return Job(job_id_).state() == v1::JOB_RUNNING && Job(job_id_).step() > 0;
  })) << ReadAll(Tmp() + "/coordinator.log");
}

void SecurityTest::TearDownTestSuite() {
  for (pid_t pid : pids_) kill(-pid, SIGKILL);
  for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
}

// The status code of a unary call made as `config`.
template <typename Stub, typename Request, typename Response>
grpc::StatusCode CallAs(Stub* stub, const SecurityConfig& config,
                        grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                     const Request&, Response*),
                        const Request& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  AddBearerToken(&ctx, config.token);
  Response response;
  const grpc::Status s = (stub->*method)(&ctx, request, &response);
  // Shown in the log, for a failing expectation.
  if (!s.ok()) std::fprintf(stderr, "refused: %s\n", s.error_message().c_str());
  return s.error_code();
}

TEST_F(SecurityTest, NoTokenOrAWrongOneIsUnauthenticated) {
  SecurityConfig none = Tls(ca_, "", "");
  EXPECT_EQ(CallAs(Coordinator(none).get(), none,
                   &v1::Coordinator::Stub::ListJobs, v1::ListJobsRequest()),
            grpc::StatusCode::UNAUTHENTICATED);
  SecurityConfig wrong = none;
  wrong.token = std::string(64, 'f');
  EXPECT_EQ(CallAs(Coordinator(wrong).get(), wrong,
                   &v1::Coordinator::Stub::ListJobs, v1::ListJobsRequest()),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job_id_);
  EXPECT_EQ(CallAs(Coordinator(wrong).get(), wrong,
                   &v1::Coordinator::Stub::CancelJob, cancel),
            grpc::StatusCode::UNAUTHENTICATED);
  const SecurityConfig admin = Tls(ca_, "", "admin");
  EXPECT_EQ(CallAs(Coordinator(admin).get(), admin,
                   &v1::Coordinator::Stub::ListJobs, v1::ListJobsRequest()),
            grpc::StatusCode::OK);
}

TEST_F(SecurityTest, AWrongCaFailsTheHandshake) {
  // A client that trusts another CA does not accept the coordinator.
  SecurityConfig stranger = Tls(other_, "", "");
  stranger.token = Tls(ca_, "", "admin").token;
  EXPECT_EQ(CallAs(Coordinator(stranger).get(), stranger,
                   &v1::Coordinator::Stub::ListJobs, v1::ListJobsRequest()),
            grpc::StatusCode::UNAVAILABLE);
  // A worker certificate from another CA is not accepted by the coordinator.
  SecurityConfig forged = Tls(ca_, "", "worker-0");
  forged.cert_pem = ReadAll(other_ + "/worker.pem");
  forged.key_pem = ReadAll(other_ + "/worker.key");
  v1::HeartbeatRequest beat;
  beat.set_worker_id("worker-0");
  EXPECT_EQ(CallAs(Coordinator(forged).get(), forged,
                   &v1::Coordinator::Stub::Heartbeat, beat),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, AUserCannotActAsAWorker) {
  const SecurityConfig admin = Tls(ca_, "worker", "admin");
  v1::RegisterWorkerRequest reg;
  reg.mutable_info()->set_worker_id("worker-0");
  reg.mutable_info()->set_address("127.0.0.1:1");
  EXPECT_EQ(CallAs(Coordinator(admin).get(), admin,
                   &v1::Coordinator::Stub::RegisterWorker, reg),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::StoreSetRequest set;
  set.set_key(absl::StrCat("jobs/", job_id_, "/a0/x"));
  EXPECT_EQ(CallAs(Coordinator(admin).get(), admin,
                   &v1::Coordinator::Stub::StoreSet, set),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SecurityTest, AWorkerCannotSubmitOrCancel) {
  const SecurityConfig w0 = Tls(ca_, "worker", "worker-0");
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->set_name("sneaky");
  EXPECT_EQ(CallAs(Coordinator(w0).get(), w0, &v1::Coordinator::Stub::SubmitJob,
                   submit),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job_id_);
  EXPECT_EQ(CallAs(Coordinator(w0).get(), w0, &v1::Coordinator::Stub::CancelJob,
                   cancel),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SecurityTest, AWorkerCannotActForAnotherOrWithoutItsCertificate) {
  const SecurityConfig w1 = Tls(ca_, "worker", "worker-1");
  v1::HeartbeatRequest beat;
  beat.set_worker_id("worker-0");
  EXPECT_EQ(CallAs(Coordinator(w1).get(), w1, &v1::Coordinator::Stub::Heartbeat,
                   beat),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::DeregisterWorkerRequest leave;
  leave.set_worker_id("worker-0");
  EXPECT_EQ(CallAs(Coordinator(w1).get(), w1,
                   &v1::Coordinator::Stub::DeregisterWorker, leave),
            grpc::StatusCode::PERMISSION_DENIED);
  // Mutual TLS: the right token without a client certificate.
  const SecurityConfig no_cert = Tls(ca_, "", "worker-0");
  beat.set_worker_id("worker-0");
  EXPECT_EQ(CallAs(Coordinator(no_cert).get(), no_cert,
                   &v1::Coordinator::Stub::Heartbeat, beat),
            grpc::StatusCode::UNAUTHENTICATED);
}

// The stage and incarnation each worker runs, from ListWorkers.
std::map<std::string, v1::WorkerStatus> Workers(v1::Coordinator::Stub* stub,
                                                const SecurityConfig& config) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  AddBearerToken(&ctx, config.token);
  v1::ListWorkersResponse response;
  EXPECT_TRUE(
      stub->ListWorkers(&ctx, v1::ListWorkersRequest(), &response).ok());
  std::map<std::string, v1::WorkerStatus> by_id;
  for (const v1::WorkerStatus& w : response.workers()) {
    by_id[w.info().worker_id()] = w;
  }
  return by_id;
}

// Worker `id`'s incarnation, from its log (ListWorkers does not show it:
// only the worker itself knows it, as a compromised worker would).
std::string Incarnation(const std::string& id) {
  const std::string log = ReadAll(absl::StrCat(Tmp(), "/", id, ".log"));
  const std::string mark = " as " + id + " incarnation ";
  const size_t at = log.rfind(mark);
  if (at == std::string::npos) return "";
  const size_t from = at + mark.size();
  return log.substr(from, log.find_first_of(" \n", from) - from);
}

TEST_F(SecurityTest, AWorkerCannotReportAnotherStagesProgress) {
  const SecurityConfig admin = Tls(ca_, "", "admin");
  std::map<std::string, v1::WorkerStatus> workers =
      Workers(Coordinator(admin).get(), admin);
  ASSERT_EQ(workers.size(), 2u);
  const v1::WorkerStatus& victim = workers["worker-0"];
  ASSERT_EQ(victim.job_id(), job_id_);
  // worker-1, with its own credential and incarnation, claims worker-0's
  // stage finished with a perfect accuracy.
  v1::ReportProgressRequest report;
  report.set_worker_id("worker-1");
  report.set_incarnation(Incarnation("worker-1"));
  ASSERT_FALSE(report.incarnation().empty());
  v1::StageProgress* p = report.add_stages();
  p->set_job_id(job_id_);
  p->set_stage(victim.stage());
  p->set_replica(victim.replica());
  p->set_minibatches_done(1);
  p->set_finished(true);
  p->set_test_accuracy(0.999);
  const SecurityConfig w1 = Tls(ca_, "worker", "worker-1");
  EXPECT_EQ(CallAs(Coordinator(w1).get(), w1,
                   &v1::Coordinator::Stub::ReportProgress, report),
            grpc::StatusCode::PERMISSION_DENIED);
  // And as worker-0 with worker-1's credential.
  report.set_worker_id("worker-0");
  report.set_incarnation(Incarnation("worker-0"));
  EXPECT_EQ(CallAs(Coordinator(w1).get(), w1,
                   &v1::Coordinator::Stub::ReportProgress, report),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SecurityTest, AWorkerCannotUseAnotherJobsStoreKeys) {
  const SecurityConfig w0 = Tls(ca_, "worker", "worker-0");
  v1::StoreSetRequest set;
  set.set_key("jobs/job-1-0123456789abcdef/a0/gloo/0");
  set.set_value("10.9.9.9:1");
  EXPECT_EQ(
      CallAs(Coordinator(w0).get(), w0, &v1::Coordinator::Stub::StoreSet, set),
      grpc::StatusCode::PERMISSION_DENIED);
  v1::StoreAddRequest add;
  add.set_key("anything");
  add.set_delta(1);
  EXPECT_NE(
      CallAs(Coordinator(w0).get(), w0, &v1::Coordinator::Stub::StoreAdd, add),
      grpc::StatusCode::OK);
}

TEST_F(SecurityTest, OnlyTheCoordinatorMayCallAWorker) {
  const SecurityConfig admin = Tls(ca_, "", "admin");
  std::map<std::string, v1::WorkerStatus> workers =
      Workers(Coordinator(admin).get(), admin);
  const std::string address = workers["worker-0"].info().address();
  v1::StopJobRequest stop;
  stop.set_job_id(job_id_);
  stop.set_reason("hostile");
  // Without a client certificate: the TLS handshake fails.
  EXPECT_EQ(CallAs(Worker(address, admin).get(), admin,
                   &v1::Worker::Stub::StopJob, stop),
            grpc::StatusCode::UNAVAILABLE);
  // With a certificate the CA signed but no control token.
  const SecurityConfig signed_user = Tls(ca_, "worker", "admin");
  EXPECT_EQ(CallAs(Worker(address, signed_user).get(), signed_user,
                   &v1::Worker::Stub::StopJob, stop),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CallAs(Worker(address, signed_user).get(), signed_user,
                   &v1::Worker::Stub::GetStatus, v1::GetStatusRequest()),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SecurityTest, PlaintextOnANonLoopbackAddressIsRefused) {
  const std::string log = Tmp() + "/refused.log";
  EXPECT_EQ(
      Shell(absl::StrCat(g_args[1], " --listen 0.0.0.0:0 >", log, " 2>&1")), 2);
  EXPECT_NE(ReadAll(log).find("--insecure"), std::string::npos) << ReadAll(log);
  EXPECT_EQ(
      Shell(absl::StrCat(g_args[2], " --listen 0.0.0.0:0 >", log, " 2>&1")), 2);
  EXPECT_NE(ReadAll(log).find("not a loopback address"), std::string::npos)
      << ReadAll(log);
}

// Last (tests run in order): after all of the above, the job is unharmed.
TEST_F(SecurityTest, ZTheJobSucceedsUnharmed) {
  ASSERT_TRUE(WaitUntil(absl::Seconds(240), [] {
    const v1::JobState s = Job(job_id_).state();
    return s != v1::JOB_RUNNING && s != v1::JOB_PENDING &&
           s != v1::JOB_PLANNING;
  }));
  const v1::JobStatus job = Job(job_id_);
  EXPECT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason();
  EXPECT_EQ(job.step(), job.total_steps());
  EXPECT_EQ(job.owner(), "admin");
  // aq as a user, over TLS with its token, sees it.
  EXPECT_EQ(Shell(AqEnv("admin") + g_args[0] + " status " + job_id_ +
                  " >/dev/null 2>&1"),
            0);
  // And aq without a token is refused, saying so.
  const std::string err = Tmp() + "/aq.err";
  EXPECT_EQ(Shell(absl::StrCat("AQ_TLS_CA=", ca_, "/ca.pem ", g_args[0],
                               " jobs --coordinator ", address_, " 2>", err,
                               " >/dev/null")),
            1);
  EXPECT_NE(ReadAll(err).find("refused the call"), std::string::npos)
      << ReadAll(err);
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) aqueduct::g_args.push_back(argv[i]);
  if (aqueduct::g_args.size() != 4) {
    std::fprintf(stderr,
                 "usage: security_test AQ COORDINATOR WORKER CA_SCRIPT\n");
    return 2;
  }
  return RUN_ALL_TESTS();
}
