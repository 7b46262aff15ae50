// Load on one coordinator: N simulated workers register (all at once), then
// heartbeat at 1 Hz each for D seconds, while a client pages through
// ListWorkers and polls GetJob. Reports the time to register all, heartbeat
// and status latency percentiles, and the coordinator's CPU use (from
// /proc/<pid>/stat).
//
//   control_plane_load --coordinator 127.0.0.1:PORT --pid PID
//                      [--workers 1000] [--seconds 20] [--threads 8]
//                      [--connections T] [--poll_ms 100]
//                      [--tls_ca ca.pem --tls_cert worker.pem
//                       --tls_key worker.key] [--tokens_file tokens]
//
// With --tls_ca every call goes over TLS, the workers' with the client
// certificate (mutual TLS, as the coordinator requires of workers). With
// --tokens_file (the coordinator's own token file, "TOKEN ROLE NAME" a
// line) each simulated worker is one of its worker credentials, in file
// order, and calls with that token under that name, as the coordinator
// requires; the poller uses its first user credential. Without it workers
// are named sim-0 ... sim-N-1 and no token is sent.
//
// The workers' calls share --connections channels (default: one per
// client thread); a real worker holds a connection of its own, so
// --connections N opens one per simulated worker (a TLS handshake each).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/grpc_security.h"
#include "common/version.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "proto/service.grpc.pb.h"
#include "tests/grpc_client_util.h"

namespace aqueduct {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// utime + stime of a process, in seconds.
double CpuSeconds(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> fields;
  std::string x;
  while (rest >> x) fields.push_back(x);
  // Fields after the command: state is [0], utime [11], stime [12].
  if (fields.size() < 13) return 0;
  const double ticks = std::stod(fields[11]) + std::stod(fields[12]);
  return ticks / sysconf(_SC_CLK_TCK);
}

// This process's CPU time (the load generator's own), in seconds.
double SelfCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Options {
  std::string address;
  int pid = 0, workers = 1000, seconds = 20, threads = 8;
  int connections = 0;  // 0: one per thread.
  int poll_ms = 100;
  std::string tls_ca, tls_cert, tls_key, tokens_file;
};

bool ParseFlags(int argc, char** argv, Options* o) {
  const std::map<std::string, std::string*> strings = {
      {"--coordinator", &o->address},
      {"--tls_ca", &o->tls_ca},
      {"--tls_cert", &o->tls_cert},
      {"--tls_key", &o->tls_key},
      {"--tokens_file", &o->tokens_file}};
  const std::map<std::string, int*> ints = {{"--pid", &o->pid},
                                            {"--workers", &o->workers},
                                            {"--seconds", &o->seconds},
                                            {"--threads", &o->threads},
                                            {"--connections", &o->connections},
                                            {"--poll_ms", &o->poll_ms}};
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    if (strings.count(flag)) {
      *strings.at(flag) = argv[i + 1];
    } else if (!ints.count(flag) ||
               !absl::SimpleAtoi(argv[i + 1], ints.at(flag))) {
      std::fprintf(stderr, "control_plane_load: bad flag %s\n", argv[i]);
      return false;
    }
  }
  if (o->connections == 0) o->connections = o->threads;
  return !o->address.empty() && o->workers >= 1 && o->threads >= 1 &&
         o->connections >= 1 && o->poll_ms >= 0;
}

// Who the simulated workers and the polling user are.
struct Identities {
  std::vector<std::string> worker_ids;
  std::vector<std::string> worker_tokens;  // Empty without a token file.
  std::string user_token;
};

// From --tokens_file: the first `workers` worker credentials and the first
// user credential. False (after saying why) if the file has too few.
bool LoadIdentities(const Options& o, Identities* ids) {
  if (o.tokens_file.empty()) {
    for (int w = 0; w < o.workers; ++w) {
      ids->worker_ids.push_back(absl::StrCat("sim-", w));
    }
    return true;
  }
  for (absl::string_view line :
       absl::StrSplit(ReadFileOrEmpty(o.tokens_file), '\n')) {
    std::vector<std::string> f =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.size() != 3 || f[0][0] == '#') continue;
    if (f[1] == "user" && ids->user_token.empty()) ids->user_token = f[0];
    if (f[1] == "worker" &&
        static_cast<int>(ids->worker_ids.size()) < o.workers) {
      ids->worker_ids.push_back(f[2]);
      ids->worker_tokens.push_back(f[0]);
    }
  }
  if (static_cast<int>(ids->worker_ids.size()) < o.workers ||
      ids->user_token.empty()) {
    std::fprintf(stderr,
                 "control_plane_load: --tokens_file %s has %zu worker "
                 "credentials (--workers asks for %d) and %s user one\n",
                 o.tokens_file.c_str(), ids->worker_ids.size(), o.workers,
                 ids->user_token.empty() ? "no" : "a");
    return false;
  }
  return true;
}

using Stub = v1::Coordinator::Stub;

// `n` channels (distinct connections), with the worker certificate when
// `worker` (mutual TLS) and without one otherwise.
std::vector<std::unique_ptr<Stub>> Connect(const Options& o, int n,
                                           bool worker) {
  // Users connect without a client certificate.
  const SecurityConfig tls = worker
                                 ? TlsFromFiles(o.tls_ca, o.tls_cert, o.tls_key)
                                 : TlsFromFiles(o.tls_ca, "", "");
  std::vector<std::unique_ptr<Stub>> stubs;
  for (int c = 0; c < n; ++c) {
    grpc::ChannelArguments args;
    // Distinct arguments: gRPC would otherwise share one connection.
    args.SetInt("grpc.channel_id", c + (worker ? 0 : 1 << 30));
    stubs.push_back(v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(o.address, ChannelCredentials(tls), args)));
  }
  return stubs;
}

void Prepare(grpc::ClientContext* ctx, const std::string& token) {
  PrepareCall(ctx, token, absl::Seconds(10));
}

// What the load saw. Thread-safe.
struct Results {
  std::mutex mu;
  std::vector<double> heartbeat_ms, list_all_ms, list_page_ms, get_ms;
  std::atomic<int> failures{0};
  double register_cpu_s = 0, register_self_cpu_s = 0;

  void Fail(const char* what, const std::string& who, const grpc::Status& s) {
    if (failures++ < 5) {
      std::fprintf(stderr, "%s %s: %s\n", what, who.c_str(),
                   s.error_message().c_str());
    }
  }
};

// Registers every worker at once from `threads` threads; the time taken.
double RegisterAll(const Options& o, const Identities& ids,
                   const std::vector<std::unique_ptr<Stub>>& stubs,
                   Results* results) {
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < o.threads; ++t) {
    pool.emplace_back([&, t] {
      for (int w = t; w < o.workers; w += o.threads) {
        grpc::ClientContext ctx;
        Prepare(&ctx, ids.worker_tokens.empty() ? "" : ids.worker_tokens[w]);
        v1::RegisterWorkerRequest r;
        r.mutable_info()->set_worker_id(ids.worker_ids[w]);
        r.mutable_info()->set_incarnation("1");
        r.mutable_info()->set_version(kVersion);
        // The coordinator checks a worker advertises its own address.
        r.mutable_info()->set_address(absl::StrCat("127.0.0.1:", 20000 + w));
        v1::RegisterWorkerResponse resp;
        const grpc::Status s =
            stubs[w % stubs.size()]->RegisterWorker(&ctx, r, &resp);
        if (!s.ok()) results->Fail("register", ids.worker_ids[w], s);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return Ms(Clock::now() - start);
}

// Submits a job that stays pending (more workers than registered), for
// GetJob; its id, or "" after saying why not.
std::string SubmitPendingJob(const Options& o, Stub* stub,
                             const std::string& token) {
  v1::SubmitJobRequest s;
  v1::JobSpec* spec = s.mutable_spec();
  spec->set_name("load");
  v1::LinearSpec* l = spec->mutable_model()->add_layers()->mutable_linear();
  l->set_in_features(4);
  l->set_out_features(2);
  auto* d = spec->mutable_data()->mutable_synthetic();
  d->add_sample_shape(4);
  d->set_num_classes(2);
  d->set_train_samples(64);
  spec->mutable_optimizer()->mutable_sgd()->set_lr(0.1f);
  spec->set_batch_size(8);
  spec->set_max_steps(1);
  spec->mutable_pipeline()->set_workers(o.workers + 1);
  spec->mutable_pipeline()->set_wait_for_workers_ms(3600 * 1000);
  grpc::ClientContext ctx;
  Prepare(&ctx, token);
  v1::SubmitJobResponse resp;
  const grpc::Status st = stub->SubmitJob(&ctx, s, &resp);
  if (!st.ok()) {
    std::fprintf(stderr, "submit: %s\n", st.error_message().c_str());
    return "";
  }
  return resp.job_id();
}

// Worker thread `t`: heartbeats of its workers at 1 Hz, spread evenly over
// each second, until `end`.
void HeartbeatLoop(int t, const Options& o, const Identities& ids,
                   const std::vector<std::unique_ptr<Stub>>& stubs,
                   Clock::time_point start, Clock::time_point end,
                   Results* results) {
  std::vector<double> mine;
  std::vector<int> own;
  for (int w = t; w < o.workers; w += o.threads) own.push_back(w);
  for (int round = 0;; ++round) {
    for (size_t k = 0; k < own.size(); ++k) {
      const Clock::time_point due =
          start + std::chrono::milliseconds(1000 * round) +
          std::chrono::microseconds(static_cast<int64_t>(1e6 * k / own.size()));
      if (due >= end) {
        std::lock_guard<std::mutex> lock(results->mu);
        results->heartbeat_ms.insert(results->heartbeat_ms.end(), mine.begin(),
                                     mine.end());
        return;
      }
      std::this_thread::sleep_until(due);
      const int w = own[k];
      grpc::ClientContext ctx;
      Prepare(&ctx, ids.worker_tokens.empty() ? "" : ids.worker_tokens[w]);
      v1::HeartbeatRequest h;
      h.set_worker_id(ids.worker_ids[w]);
      h.set_incarnation("1");
      v1::HeartbeatResponse resp;
      const Clock::time_point t0 = Clock::now();
      const grpc::Status s = stubs[w % stubs.size()]->Heartbeat(&ctx, h, &resp);
      mine.push_back(Ms(Clock::now() - t0));
      if (!s.ok()) results->Fail("heartbeat", h.worker_id(), s);
    }
  }
}

// Pages through ListWorkers once (the server's default page size); false
// if a page failed or the pages did not hold every worker.
bool ListAllWorkers(const Options& o, Stub* stub, const std::string& token,
                    Results* results) {
  v1::ListWorkersRequest request;
  int seen = 0;
  const Clock::time_point start = Clock::now();
  do {
    grpc::ClientContext ctx;
    Prepare(&ctx, token);
    v1::ListWorkersResponse page;
    const Clock::time_point t0 = Clock::now();
    const grpc::Status s = stub->ListWorkers(&ctx, request, &page);
    const double ms = Ms(Clock::now() - t0);
    if (!s.ok()) {
      results->Fail("list workers", request.page_token(), s);
      return false;
    }
    seen += page.workers_size();
    request.set_page_token(page.next_page_token());
    std::lock_guard<std::mutex> lock(results->mu);
    results->list_page_ms.push_back(ms);
  } while (!request.page_token().empty());
  std::lock_guard<std::mutex> lock(results->mu);
  results->list_all_ms.push_back(Ms(Clock::now() - start));
  return seen == o.workers;
}

// Until `end`: a full ListWorkers listing and a GetJob, then --poll_ms.
void Poll(const Options& o, Stub* stub, const std::string& token,
          const std::string& job_id, Clock::time_point end, Results* results) {
  while (Clock::now() < end) {
    if (!ListAllWorkers(o, stub, token, results)) ++results->failures;
    grpc::ClientContext ctx;
    Prepare(&ctx, token);
    v1::GetJobRequest g;
    g.set_job_id(job_id);
    v1::JobStatus resp;
    const Clock::time_point t0 = Clock::now();
    const grpc::Status s = stub->GetJob(&ctx, g, &resp);
    const double ms = Ms(Clock::now() - t0);
    if (!s.ok()) results->Fail("get job", job_id, s);
    {
      std::lock_guard<std::mutex> lock(results->mu);
      results->get_ms.push_back(ms);
    }
    std::this_thread::sleep_until(
        std::min(end, Clock::now() + std::chrono::milliseconds(o.poll_ms)));
  }
}

void Report(const Options& o, double register_ms, double cpu, double self_cpu,
            Results& r) {
  std::printf(
      "{\"workers\":%d,\"tls\":%s,\"tokens\":%s,\"connections\":%d,"
      "\"register_all_ms\":%.1f,\"register_coordinator_cpu_s\":%.3f,"
      "\"register_load_generator_cpu_s\":%.3f,\"heartbeats\":%zu,"
      "\"heartbeat_p50_ms\":%.3f,\"heartbeat_p99_ms\":%.3f,"
      "\"heartbeat_max_ms\":%.3f,\"list_workers_polls\":%zu,"
      "\"list_workers_all_p50_ms\":%.3f,\"list_workers_all_p99_ms\":%.3f,"
      "\"list_workers_page_p99_ms\":%.3f,\"get_job_p50_ms\":%.3f,"
      "\"get_job_p99_ms\":%.3f,\"coordinator_cpu_cores\":%.3f,"
      "\"load_generator_cpu_cores\":%.3f,\"failures\":%d}\n",
      o.workers, o.tls_ca.empty() ? "false" : "true",
      o.tokens_file.empty() ? "false" : "true", o.connections, register_ms,
      r.register_cpu_s, r.register_self_cpu_s, r.heartbeat_ms.size(),
      Percentile(r.heartbeat_ms, 0.5), Percentile(r.heartbeat_ms, 0.99),
      Percentile(r.heartbeat_ms, 1.0), r.list_all_ms.size(),
      Percentile(r.list_all_ms, 0.5), Percentile(r.list_all_ms, 0.99),
      Percentile(r.list_page_ms, 0.99), Percentile(r.get_ms, 0.5),
      Percentile(r.get_ms, 0.99), cpu, self_cpu, r.failures.load());
}

int Main(int argc, char** argv) {
  Options o;
  Identities ids;
  if (!ParseFlags(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: control_plane_load --coordinator HOST:PORT --pid PID "
                 "[--workers N] [--seconds S] [--threads T] [--connections C]"
                 " [--poll_ms MS] [--tls_ca F --tls_cert F --tls_key F] "
                 "[--tokens_file F]\n");
    return 2;
  }
  if (!LoadIdentities(o, &ids)) return 2;
  const std::vector<std::unique_ptr<Stub>> workers =
      Connect(o, o.connections, true);
  const std::vector<std::unique_ptr<Stub>> user = Connect(o, 1, false);
  Results results;
  // CPU seconds spent registering (TLS handshakes included when every
  // worker has its connection): the coordinator's and this process's.
  const double reg_cpu_start = o.pid > 0 ? CpuSeconds(o.pid) : 0;
  const double reg_self_start = SelfCpuSeconds();
  const double register_ms = RegisterAll(o, ids, workers, &results);
  results.register_cpu_s = o.pid > 0 ? CpuSeconds(o.pid) - reg_cpu_start : -1;
  results.register_self_cpu_s = SelfCpuSeconds() - reg_self_start;
  const std::string job_id = SubmitPendingJob(o, user[0].get(), ids.user_token);
  if (job_id.empty()) return 1;

  const double cpu_start = o.pid > 0 ? CpuSeconds(o.pid) : 0;
  const double self_start = SelfCpuSeconds();
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + std::chrono::seconds(o.seconds);
  std::vector<std::thread> pool;
  for (int t = 0; t < o.threads; ++t) {
    pool.emplace_back(
        [&, t] { HeartbeatLoop(t, o, ids, workers, start, end, &results); });
  }
  std::thread poller(
      [&] { Poll(o, user[0].get(), ids.user_token, job_id, end, &results); });
  for (std::thread& th : pool) th.join();
  poller.join();
  const double wall =
      std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = o.pid > 0 ? (CpuSeconds(o.pid) - cpu_start) / wall : -1;
  Report(o, register_ms, cpu, (SelfCpuSeconds() - self_start) / wall, results);
  return results.failures.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
