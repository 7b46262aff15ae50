// The worker daemon: one device, one stage at a time. Serves the Worker
// gRPC service, registers with the coordinator and heartbeats; SIGTERM or
// SIGINT stops the current job after its step, deregisters and exits 0.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/command_line.h"
#include "common/daemon.h"
#include "common/device/factory.h"
#include "common/file_system.h"
#include "common/grpc_coordinator_client.h"
#include "common/grpc_health.h"
#include "common/grpc_security.h"
#include "common/http_server.h"
#include "common/log_buffer.h"
#include "common/logging.h"
#include "common/security.h"
#include "common/status.h"
#include "common/version.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "worker/agent.h"
#include "worker/link_probe.h"
#include "worker/metrics.h"
#include "worker/model_uploader.h"
#include "worker/profiler.h"
#include "worker/runtime/coordinator_store.h"
#include "worker/runtime/gloo_data_plane.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/service.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070",
          "host:port of the coordinator");
ABSL_FLAG(std::string, listen, "",
          "host:port for the Worker service (port 0: any free port; default "
          "<advertise_host>:0); a non-loopback host needs TLS (--tls_*) or "
          "--insecure");
ABSL_FLAG(bool, insecure, false,
          "allow serving plaintext on a non-loopback --listen (a trusted "
          "network only)");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "host name or address the coordinator and peers reach this worker "
          "at");
ABSL_FLAG(std::string, worker_id, "",
          "stable worker name (default: <hostname>:<port>)");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or cuda:N in a binary built with the CUDA toolkit");
ABSL_FLAG(std::string, gemm_precision, "fp32",
          "GEMMs on a CUDA device: fp32, tf32 (tensor cores) or bf16 (bf16 "
          "inputs, fp32 accumulation); the CPU computes in fp32");
ABSL_FLAG(int32_t, threads, 0, "CPU threads (0: all cores)");
ABSL_FLAG(int64_t, memory_limit, 0,
          "bytes of memory this worker offers its jobs (registered as its "
          "device's memory: the planner fits plans to it and stages check "
          "against it before they allocate); 0: the host's physical memory");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file");
ABSL_FLAG(bool, evaluate_in_background, true,
          "run a job's periodic evaluations on a thread of their own, off "
          "the pipeline's critical path (false: on the output stage's "
          "thread, as before; for benchmarks)");
ABSL_FLAG(int64_t, peer_timeout_ms, 60000,
          "deadline of every wait on a pipeline peer");
ABSL_FLAG(int64_t, model_upload_deadline_ms, 300000,
          "how long the output stage keeps trying to upload a job's trained "
          "model while the coordinator is unreachable");
ABSL_FLAG(std::vector<std::string>, data_root, {},
          "directories under which jobs' data files and init_weights are "
          "read (comma-separated, or the flag repeated); a path outside "
          "(after '..' and symbolic links) is refused naming the field and "
          "this flag. Default: the Debian datasets the examples use, "
          "/usr/share/games/fortunes and /usr/share/datasets/fashion-mnist "
          "(those that exist)");
ABSL_FLAG(std::vector<std::string>, checkpoint_root, {},
          "directories under which jobs' checkpoints are written and read "
          "(comma-separated, or the flag repeated). Default: none, and a job "
          "with a checkpoint.dir or a checkpoint to resume from fails");
ABSL_FLAG(int64_t, max_text_bytes, int64_t{1} << 30,
          "most bytes the text files of one job may hold in all (data.text)");
ABSL_FLAG(bool, measure_gemm, true,
          "measure GEMM throughput at start (reported on registration as "
          "the worker's speed, which the planner places stages by; false: "
          "none reported, and the worker plans as fast as any other)");
ABSL_FLAG(double, slowdown, 1.0,
          "for tests and benchmarks of unequal workers: every computation "
          "(the pipeline stages, the profiler and the speed probe at start) "
          "takes this many times as long, the worker sleeping the "
          "difference; at least 1 (1: full speed)");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error, critical or off");
ABSL_FLAG(std::string, log_format, "text", "text or json");
ABSL_FLAG(std::string, http_listen, "",
          "host:port of an HTTP server for Prometheus metrics (/metrics; "
          "port 0: pick a free one, the log says which); HTTPS with "
          "--tls_cert/--tls_key; a non-loopback host needs TLS and "
          "--http_tokens_file, or --insecure. Empty: none");
ABSL_FLAG(std::string, http_tokens_file, "",
          "token file (the coordinator's --tokens_file format, mode 600) "
          "whose tokens --http_listen requires; empty: no token needed "
          "(loopback only unless --insecure)");
ABSL_FLAG(int32_t, max_connections, aqueduct::kDefaultMaxConnections,
          "most TCP connections accepted and kept open at once, all "
          "listening ports together (gRPC, the data plane's peers, "
          "--health_listen, --http_listen), and at most half the descriptor "
          "limit (RLIMIT_NOFILE, raised to its hard limit at start); one "
          "beyond is closed at once");
ABSL_FLAG(std::string, health_listen, "",
          "host:port of a plaintext gRPC server carrying grpc.health.v1 "
          "alone, for probes that cannot do TLS (Kubernetes' gRPC probe); "
          "service \"\" is readiness (registered with the coordinator), "
          "\"liveness\" liveness. It tells only those two states, so any "
          "address is allowed. Empty: none (the health service is on "
          "--listen too, behind its mutual TLS)");

namespace aqueduct {
namespace {

constexpr char kDescription[] =
    "The Aqueduct worker daemon: one device, one stage at a time. Serves\n"
    "aqueduct.v1.Worker (and grpc.health.v1), registers with the\n"
    "coordinator and heartbeats. SIGTERM or SIGINT stops the current job\n"
    "after its step, deregisters and exits 0. Exit codes: 1 when it cannot\n"
    "start (the log says why), 2 for bad flags or a device this build or\n"
    "machine lacks.\n";

bool SetUpLogging() {
  logging::LoggingOptions log;
  log.level = absl::GetFlag(FLAGS_log_level);
  log.component = "worker";
  absl::Status s =
      logging::ParseFormat(absl::GetFlag(FLAGS_log_format), &log.format);
  if (s.ok()) s = logging::ConfigureLogging(log);
  if (!s.ok()) {
    std::fprintf(stderr, "worker: %s\n", std::string(s.message()).c_str());
  }
  return s.ok();
}

// Every integer flag within its range, and --slowdown at least 1; false
// (after naming the flag and the range) if one is not.
bool FlagsInRange() {
  constexpr int64_t kDayMs = int64_t{24} * 3600 * 1000;
  const absl::Status s = CheckFlagRanges({
      {"threads", 0, 4096},
      {"memory_limit", 0, int64_t{1} << 50},
      {"peer_timeout_ms", 1, kDayMs},
      {"model_upload_deadline_ms", 0, 7 * kDayMs},
      {"max_text_bytes", 1, int64_t{1} << 40},
      {"max_connections", 16, 1 << 20},
  });
  if (!s.ok()) AQ_LOG_ERROR("{}", std::string(s.message()));
  const absl::Status slowdown = CheckSlowdown(absl::GetFlag(FLAGS_slowdown));
  if (!slowdown.ok()) {
    AQ_LOG_ERROR("--slowdown {}", std::string(slowdown.message()));
  }
  return s.ok() && slowdown.ok();
}

// --device and --gemm_precision; nullopt (after logging why) if bad.
std::optional<DeviceSpec> DeviceSpecFromFlags() {
  absl::StatusOr<DeviceSpec> device_spec =
      ParseDeviceSpec(absl::GetFlag(FLAGS_device));
  if (!device_spec.ok()) {
    AQ_LOG_ERROR("--device: {}", std::string(device_spec.status().message()));
    return std::nullopt;
  }
  absl::StatusOr<GemmPrecision> gemm =
      ParseGemmPrecision(absl::GetFlag(FLAGS_gemm_precision));
  if (!gemm.ok()) {
    AQ_LOG_ERROR("--gemm_precision: {}", std::string(gemm.status().message()));
    return std::nullopt;
  }
  device_spec->gemm = *gemm;
  return *device_spec;
}

int ThreadsFromFlags() {
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads > 0) return threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// --listen, by default the advertised host on any free port.
std::string ListenAddress() {
  if (!absl::GetFlag(FLAGS_listen).empty()) return absl::GetFlag(FLAGS_listen);
  const std::string host = absl::GetFlag(FLAGS_advertise_host);
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:0")
                                             : absl::StrCat(host, ":0");
}

// The worker's TLS material and token from the flags; nullopt (after
// saying why) if they are bad or do not allow the listen address.
std::optional<SecurityConfig> SecurityFromFlags() {
  absl::StatusOr<SecurityConfig> config = SecurityConfigFromFlags(true);
  absl::Status s = config.status();
  // A key that is not the certificate's would fail every handshake, and
  // gRPC would say only that it cannot listen.
  if (s.ok() && !config->cert_pem.empty()) {
    s = CheckKeyPair(config->cert_pem, config->key_pem);
  }
  const std::string host = absl::GetFlag(FLAGS_advertise_host);
  if (s.ok() && (host == "0.0.0.0" || host == "::" || host.empty())) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "--advertise_host '", host,
        "' is not an address peers can reach: give this host's own address "
        "(the data plane binds it)"));
  }
  if (s.ok()) {
    s = CheckListenAddress(ListenAddress(), config->tls(),
                           absl::GetFlag(FLAGS_insecure));
  }
  if (!s.ok()) {
    AQ_LOG_ERROR("{}", std::string(s.message()));
    return std::nullopt;
  }
  return *std::move(config);
}

// Serves `service` on --listen and writes --port_file; null (after logging
// why) if either fails. Only the coordinator calls: with TLS, callers must
// present a certificate the CA signed.
std::unique_ptr<grpc::Server> StartServer(GrpcWorkerService* service,
                                          const SecurityConfig& security,
                                          int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      ListenAddress(),
      ServerCredentials(security, ClientCertificates::kRequire), port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    AQ_LOG_ERROR("cannot listen on {}", ListenAddress());
    return nullptr;
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    if (absl::Status s = WriteFileAtomically(absl::GetFlag(FLAGS_port_file),
                                             absl::StrCat(*port, "\n"));
        !s.ok()) {
      AQ_LOG_ERROR("--port_file: {}", std::string(s.message()));
      return nullptr;
    }
  }
  return server;
}

// --memory_limit, or the host's physical memory.
int64_t MemoryBytes() {
  const int64_t physical =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  const int64_t limit = absl::GetFlag(FLAGS_memory_limit);
  return limit > 0 ? std::min(limit, physical) : physical;
}

// What the worker tells the coordinator about itself.
WorkerInfo DescribeWorker(Device& device, int port) {
  char hostname[256] = "localhost";
  gethostname(hostname, sizeof(hostname) - 1);
  WorkerInfo info;
  info.set_worker_id(absl::GetFlag(FLAGS_worker_id).empty()
                         ? absl::StrCat(hostname, ":", port)
                         : absl::GetFlag(FLAGS_worker_id));
  info.set_version(kVersion);
  info.set_proto_hash(kProtoHash);
  info.set_host(hostname);
  info.set_address(
      absl::StrCat(absl::GetFlag(FLAGS_advertise_host), ":", port));
  info.mutable_device()->set_kind(device.kind() == DeviceKind::kCuda ? "cuda"
                                                                     : "cpu");
  info.mutable_device()->set_name(device.name());
  info.mutable_device()->set_memory_bytes(MemoryBytes());
  info.mutable_device()->set_threads(ThreadsFromFlags());
  info.mutable_device()->set_host_cores(
      static_cast<int32_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))));
  // The speed the planner places stages by (coordinator/speeds.h).
  if (absl::GetFlag(FLAGS_measure_gemm)) {
    auto gflops =
        MeasureSpeedProbe(&device, 512, 7, absl::GetFlag(FLAGS_slowdown));
    if (gflops.ok()) {
      info.mutable_device()->set_gemm_gflops(*gflops);
      AQ_LOG_INFO("speed probe: {:.1f} GFLOP/s (--slowdown {})", *gflops,
                  absl::GetFlag(FLAGS_slowdown));
    }
  }
  return info;
}

// Peers measure their links to this worker through its link probe (the
// planner's "measured" topology), on the advertised address; null (after
// saying why) when it cannot listen: jobs then plan this worker flat.
std::unique_ptr<LinkProbeServer> StartLinkProbe() {
  const std::string host = absl::GetFlag(FLAGS_advertise_host);
  auto probe = LinkProbeServer::Start(host, 0);
  if (!probe.ok()) {
    AQ_LOG_WARN("no link probe on --advertise_host {}: {}", host,
                std::string(probe.status().message()));
    return nullptr;
  }
  return *std::move(probe);
}

ModelUploaderOptions UploaderOptions() {
  ModelUploaderOptions options;
  options.coordinator_address = absl::GetFlag(FLAGS_coordinator);
  options.deadline =
      absl::Milliseconds(absl::GetFlag(FLAGS_model_upload_deadline_ms));
  return options;
}

// What jobs may open: --data_root (default: the example datasets that are
// installed), --checkpoint_root, --max_text_bytes; nullopt (after logging
// why) if a root is not a directory.
std::optional<FileAccess> FilesFromFlags() {
  std::vector<std::string> data = absl::GetFlag(FLAGS_data_root);
  if (data.empty()) {
    for (const char* dir :
         {"/usr/share/games/fortunes", "/usr/share/datasets/fashion-mnist"}) {
      struct stat st;
      if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) data.push_back(dir);
    }
  }
  FileAccess files;
  absl::StatusOr<PathRoots> data_roots = PathRoots::Make("--data_root", data);
  absl::StatusOr<PathRoots> checkpoint_roots = PathRoots::Make(
      "--checkpoint_root", absl::GetFlag(FLAGS_checkpoint_root));
  for (const absl::Status& s :
       {data_roots.status(), checkpoint_roots.status()}) {
    if (!s.ok()) {
      AQ_LOG_ERROR("{}", std::string(s.message()));
      return std::nullopt;
    }
  }
  files.data = *std::move(data_roots);
  files.checkpoints = *std::move(checkpoint_roots);
  files.max_text_bytes = absl::GetFlag(FLAGS_max_text_bytes);
  AQ_LOG_INFO("jobs read data under {} and checkpoint under {}",
              files.data.Describe(), files.checkpoints.Describe());
  return files;
}

StageRuntimeOptions RuntimeOptions(const DeviceSpec& device_spec, int threads,
                                   ModelSink* model_sink,
                                   const FileAccess& files) {
  StageRuntimeOptions options;
  options.files = files;
  options.model_sink = model_sink;
  options.device = device_spec;
  options.threads = threads;
  options.memory_bytes = MemoryBytes();
  options.peer_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_peer_timeout_ms));
  options.evaluate_in_background = absl::GetFlag(FLAGS_evaluate_in_background);
  options.slowdown = absl::GetFlag(FLAGS_slowdown);
  return options;
}

GlooDataPlaneOptions DataPlaneOptions(const DeviceSpec& device_spec) {
  GlooDataPlaneOptions options;
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.device = device_spec;
  return options;
}

// grpc.health.v1 on `server` and on --health_listen; readiness NOT_SERVING
// until the worker registers. Null (after logging why) if it cannot listen.
std::unique_ptr<HealthReporter> StartHealth(grpc::Server* server) {
  absl::StatusOr<std::unique_ptr<HealthReporter>> health =
      HealthReporter::Start(absl::GetFlag(FLAGS_health_listen),
                            "--health_listen");
  if (!health.ok()) {
    AQ_LOG_ERROR("{}", std::string(health.status().message()));
    return nullptr;
  }
  (*health)->AddServer(server);
  return *std::move(health);
}

// --http_tokens_file's table (nullopt when not given).
absl::StatusOr<std::optional<TokenTable>> HttpTokensFromFlags() {
  const std::string path = absl::GetFlag(FLAGS_http_tokens_file);
  if (path.empty()) return std::optional<TokenTable>();
  absl::StatusOr<TokenTable> table = TokenTable::Load(path);
  if (!table.ok()) {
    return absl::Status(
        table.status().code(),
        absl::StrCat("--http_tokens_file: ", table.status().message()));
  }
  return std::optional<TokenTable>(*std::move(table));
}

// The HTTP server on --http_listen and the tokens it requires.
struct HttpServing {
  std::optional<TokenTable> tokens;
  std::unique_ptr<HttpServer> server;  // null without --http_listen
};

// Serves /metrics on `listen`, labelled with the worker's id. `metrics`
// and `agent` must outlive `http->server`.
absl::Status ServeHttp(const std::string& listen, const WorkerMetrics* metrics,
                       const SecurityConfig& security, const WorkerAgent* agent,
                       HttpServing* http) {
  ASSIGN_OR_RETURN(http->tokens, HttpTokensFromFlags());
  ASSIGN_OR_RETURN(HttpServerOptions options,
                   DaemonHttpOptions("--http_listen", listen, security.cert_pem,
                                     security.key_pem,
                                     http->tokens ? &*http->tokens : nullptr,
                                     absl::GetFlag(FLAGS_insecure)));
  ASSIGN_OR_RETURN(http->server, HttpServer::Create(std::move(options)));
  http->server->Handle("/metrics", [metrics, agent](const HttpRequest&) {
    HttpResponse response;
    response.body = metrics->Render(agent->info().worker_id());
    return response;
  });
  RETURN_IF_ERROR(http->server->Start());
  AQ_LOG_INFO("metrics on {}://{}:{}/metrics", http->server->scheme(),
              listen.substr(0, listen.rfind(':')), http->server->port());
  return absl::OkStatus();
}

// ServeHttp on --http_listen when given; false (after saying why) if it
// cannot serve.
bool StartHttp(const WorkerMetrics* metrics, const SecurityConfig& security,
               const WorkerAgent* agent, HttpServing* http) {
  const std::string listen = absl::GetFlag(FLAGS_http_listen);
  if (listen.empty()) return true;
  absl::Status s = ServeHttp(listen, metrics, security, agent, http);
  if (!s.ok()) AQ_LOG_ERROR("{}", std::string(s.message()));
  return s.ok();
}

// Waits for SIGTERM or SIGINT, then stops the job, deregisters and stops
// serving (readiness goes first, so that probes see the worker leave).
void StopOnSignal(StageRuntime* runtime, WorkerAgent* agent,
                  HealthReporter* health, grpc::Server* server) {
  const int signal = WaitForTerminationSignal();
  AQ_LOG_INFO("signal {}: stopping", signal);
  health->Shutdown();
  const std::string job = runtime->current_job();
  if (!job.empty()) (void)runtime->Stop(job, "worker shutting down");
  runtime->Shutdown();
  agent->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
}

int Main() {
  if (!SetUpLogging() || !FlagsInRange()) return 2;
  AQ_LOG_INFO("descriptor limit {}: at most {} connections at once",
              DescriptorLimit(),
              LimitIncomingConnections(absl::GetFlag(FLAGS_max_connections)));
  const std::optional<DeviceSpec> device_spec = DeviceSpecFromFlags();
  if (!device_spec.has_value()) return 2;
  const int threads = ThreadsFromFlags();
  const std::optional<FileAccess> files = FilesFromFlags();
  if (!files.has_value()) return 2;
  const std::optional<SecurityConfig> security = SecurityFromFlags();
  if (!security.has_value()) return 2;
  // The secret the coordinator proves itself with when it calls us.
  absl::StatusOr<std::string> control_token = NewRandomToken();
  if (!control_token.ok()) {
    AQ_LOG_ERROR("{}", control_token.status().ToString());
    return 1;
  }
  BlockTerminationSignals();

  // Pipelines meet through the coordinator's store and connect over Gloo
  // (NCCL channels for transport "nccl").
  std::unique_ptr<CoordinatorClient> coordinator =
      NewGrpcCoordinatorClient(absl::GetFlag(FLAGS_coordinator), *security);
  WorkerMetrics metrics;  // the agent's calls, counted through `observed`
  const auto observed = WorkerMetrics::Observe(coordinator.get(), &metrics);
  CoordinatorStore store(coordinator.get());
  GlooDataPlaneFactory data_plane(DataPlaneOptions(*device_spec));
  // The agent is created once the server has its port; until then the
  // worker has no identity.
  std::unique_ptr<WorkerAgent> agent;
  auto identity = [&agent] {
    return agent != nullptr ? agent->info() : WorkerInfo();
  };
  // Trained models go to the coordinator.
  CoordinatorModelSink model_sink(coordinator.get(), identity,
                                  UploaderOptions());
  // The stage threads' log lines travel to the job's log (aq logs).
  JobLogBuffer job_logs;
  InstallJobLogSink(&job_logs);
  StageRuntimeOptions runtime_options =
      RuntimeOptions(*device_spec, threads, &model_sink, *files);
  runtime_options.logs = &job_logs;
  StageRuntime runtime(runtime_options, &data_plane, &store);
  GrpcWorkerService service(&runtime, *device_spec, threads, identity,
                            *control_token);
  int port = 0;
  std::unique_ptr<grpc::Server> server =
      StartServer(&service, *security, &port);
  if (server == nullptr) return 1;
  std::unique_ptr<HealthReporter> health = StartHealth(server.get());
  if (health == nullptr) return 1;

  // Created once at start so that a missing GPU or a CPU-only build fails
  // the daemon at once, naming why, rather than every job later.
  absl::StatusOr<std::unique_ptr<Device>> made =
      CreateDevice(*device_spec, threads);
  if (!made.ok()) {
    AQ_LOG_ERROR("--device={}: {}", absl::GetFlag(FLAGS_device),
                 std::string(made.status().message()));
    return 2;
  }
  AgentOptions options;
  options.coordinator_address = absl::GetFlag(FLAGS_coordinator);
  options.info = DescribeWorker(**made, port);
  const std::unique_ptr<LinkProbeServer> link_probe = StartLinkProbe();
  if (link_probe != nullptr) {
    options.info.set_link_probe_port(link_probe->port());
  }
  options.control_token = *control_token;
  agent = std::make_unique<WorkerAgent>(options, &runtime, observed.get());
  agent->Start();
  HttpServing http;
  if (!StartHttp(&metrics, *security, agent.get(), &http)) return 1;
  health->Poll([&agent] { return agent->registered(); },
               absl::Milliseconds(250));
  AQ_LOG_INFO("worker {} serving on port {}, coordinator {}",
              options.info.worker_id(), port, options.coordinator_address);
  StopOnSignal(&runtime, agent.get(), health.get(), server.get());
  AQ_LOG_INFO("worker stopped");
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) {
  aqueduct::ParseDaemonFlags("worker", aqueduct::kDescription, "worker/main.cc",
                             argc, argv);
  return aqueduct::Main();
}
