// Load on one coordinator: N simulated workers register (all at once), then
// heartbeat at 1 Hz each for D seconds, while a client polls ListWorkers and
// GetJob. Reports the time to register all, heartbeat and status latency
// percentiles, and the coordinator's CPU use (from /proc/<pid>/stat).
//
//   control_plane_load --coordinator 127.0.0.1:PORT --pid PID
//                      [--workers 1000] [--seconds 20] [--threads 8]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/version.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/service.grpc.pb.h"

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
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> fields;
  std::string x;
  while (rest >> x) fields.push_back(x);
  // Fields after the command: state is [0], utime [11], stime [12].
  if (fields.size() < 13) return 0;
  const double ticks = std::stod(fields[11]) + std::stod(fields[12]);
  return ticks / sysconf(_SC_CLK_TCK);
}

void Deadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
}

int Main(int argc, char** argv) {
  std::string address;
  int pid = 0, workers = 1000, seconds = 20, threads = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--coordinator") {
      address = value;
    } else if (flag == "--pid") {
      (void)absl::SimpleAtoi(value, &pid);
    } else if (flag == "--workers") {
      (void)absl::SimpleAtoi(value, &workers);
    } else if (flag == "--seconds") {
      (void)absl::SimpleAtoi(value, &seconds);
    } else if (flag == "--threads") {
      (void)absl::SimpleAtoi(value, &threads);
    }
  }
  if (address.empty() || workers < 1 || threads < 1) {
    std::fprintf(stderr,
                 "usage: control_plane_load --coordinator HOST:PORT --pid PID "
                 "[--workers N] [--seconds S] [--threads T]\n");
    return 2;
  }
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (int t = 0; t < threads + 1; ++t) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", t);  // Distinct connections.
    stubs.push_back(v1::Coordinator::NewStub(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args)));
  }
  auto id_of = [](int w) { return absl::StrCat("sim-", w); };

  // Registration, all at once.
  std::atomic<int> failures{0};
  const Clock::time_point reg_start = Clock::now();
  {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int w = t; w < workers; w += threads) {
          grpc::ClientContext ctx;
          Deadline(&ctx);
          v1::RegisterWorkerRequest r;
          r.mutable_info()->set_worker_id(id_of(w));
          r.mutable_info()->set_incarnation("1");
          r.mutable_info()->set_version(kVersion);
          r.mutable_info()->set_address(absl::StrCat("127.0.0.1:", 20000 + w));
          v1::RegisterWorkerResponse resp;
          if (!stubs[t]->RegisterWorker(&ctx, r, &resp).ok()) ++failures;
        }
      });
    }
    for (auto& th : pool) th.join();
  }
  const double register_ms = Ms(Clock::now() - reg_start);

  // A job that stays pending, for GetJob.
  std::string job_id;
  {
    v1::SubmitJobRequest s;
    auto* spec = s.mutable_spec();
    spec->set_name("load");
    auto* l = spec->mutable_model()->add_layers()->mutable_linear();
    l->set_in_features(4);
    l->set_out_features(2);
    auto* d = spec->mutable_data()->mutable_synthetic();
    d->add_sample_shape(4);
    d->set_num_classes(2);
    d->set_train_samples(64);
    spec->mutable_optimizer()->mutable_sgd()->set_lr(0.1f);
    spec->set_batch_size(8);
    spec->set_max_steps(1);
    spec->mutable_pipeline()->set_workers(workers + 1);
    spec->mutable_pipeline()->set_wait_for_workers_ms(3600 * 1000);
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::SubmitJobResponse resp;
    const grpc::Status st = stubs[threads]->SubmitJob(&ctx, s, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "submit: %s\n", st.error_message().c_str());
      return 1;
    }
    job_id = resp.job_id();
  }

  // Heartbeats at 1 Hz per worker, spread over each second; a poller.
  std::mutex mu;
  std::vector<double> heartbeat_ms, list_ms, get_ms;
  const double cpu_start = pid > 0 ? CpuSeconds(pid) : 0;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + std::chrono::seconds(seconds);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<double> mine;
      std::vector<int> own;
      for (int w = t; w < workers; w += threads) own.push_back(w);
      for (int round = 0;; ++round) {
        for (size_t k = 0; k < own.size(); ++k) {
          const Clock::time_point due =
              start + std::chrono::milliseconds(1000 * round) +
              std::chrono::microseconds(
                  static_cast<int64_t>(1e6 * k / own.size()));
          if (due >= end) goto out;
          std::this_thread::sleep_until(due);
          grpc::ClientContext ctx;
          Deadline(&ctx);
          v1::HeartbeatRequest h;
          h.set_worker_id(id_of(own[k]));
          h.set_incarnation("1");
          v1::HeartbeatResponse resp;
          const Clock::time_point t0 = Clock::now();
          const grpc::Status hs = stubs[t]->Heartbeat(&ctx, h, &resp);
          if (!hs.ok()) {
            if (failures++ < 5) {
              std::fprintf(stderr, "heartbeat %s: %s\n", h.worker_id().c_str(),
                           hs.error_message().c_str());
            }
          }
          mine.push_back(Ms(Clock::now() - t0));
        }
      }
    out:
      std::lock_guard<std::mutex> lock(mu);
      heartbeat_ms.insert(heartbeat_ms.end(), mine.begin(), mine.end());
    });
  }
  std::thread poller([&] {
    while (Clock::now() < end) {
      {
        grpc::ClientContext ctx;
        Deadline(&ctx);
        v1::ListWorkersResponse resp;
        const Clock::time_point t0 = Clock::now();
        const grpc::Status s =
            stubs[threads]->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp);
        const double ms = Ms(Clock::now() - t0);
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok() || resp.workers_size() != workers) ++failures;
        list_ms.push_back(ms);
      }
      {
        grpc::ClientContext ctx;
        Deadline(&ctx);
        v1::GetJobRequest g;
        g.set_job_id(job_id);
        v1::JobStatus resp;
        const Clock::time_point t0 = Clock::now();
        const grpc::Status s = stubs[threads]->GetJob(&ctx, g, &resp);
        const double ms = Ms(Clock::now() - t0);
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok()) ++failures;
        get_ms.push_back(ms);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  for (auto& th : pool) th.join();
  poller.join();
  const double wall =
      std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = pid > 0 ? (CpuSeconds(pid) - cpu_start) / wall : -1;
  std::printf(
      "{\"workers\":%d,\"register_all_ms\":%.1f,\"heartbeats\":%zu,"
      "\"heartbeat_p50_ms\":%.3f,\"heartbeat_p99_ms\":%.3f,"
      "\"heartbeat_max_ms\":%.3f,"
      "\"list_workers_polls\":%zu,\"list_workers_p50_ms\":%.3f,"
      "\"list_workers_p99_ms\":%.3f,\"get_job_p50_ms\":%.3f,"
      "\"get_job_p99_ms\":%.3f,\"coordinator_cpu_cores\":%.3f,"
      "\"failures\":%d}\n",
      workers, register_ms, heartbeat_ms.size(), Percentile(heartbeat_ms, 0.5),
      Percentile(heartbeat_ms, 0.99), Percentile(heartbeat_ms, 1.0),
      list_ms.size(), Percentile(list_ms, 0.5), Percentile(list_ms, 0.99),
      Percentile(get_ms, 0.5), Percentile(get_ms, 0.99), cpu, failures.load());
  return failures.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
