// The coordinator daemon: holds the worker registry, the jobs and their
// plans, the version ledger and the rendezvous store, and serves the
// Coordinator gRPC service (plus grpc.health.v1 and server reflection).
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
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
#include "common/grpc_health.h"
#include "common/grpc_security.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/security.h"
#include "common/status.h"
#include "common/version.h"
#include "coordinator/core.h"
#include "coordinator/dashboard/dashboard.h"
#include "coordinator/grpc_worker_client.h"
#include "coordinator/metrics.h"
#include "coordinator/model_store.h"
#include "coordinator/service.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "host:port to serve on (port 0: pick a free port; see --port_file); "
          "a non-loopback host needs TLS (--tls_*) or --insecure");
ABSL_FLAG(int32_t, max_server_threads, 512,
          "most threads serving calls at once (a call beyond waits or is "
          "refused with RESOURCE_EXHAUSTED)");
ABSL_FLAG(int32_t, max_connections, aqueduct::kDefaultMaxConnections,
          "most TCP connections kept open at once, all listening ports "
          "together (gRPC, --health_listen, --http_listen), and at most half "
          "the descriptor limit (RLIMIT_NOFILE, raised to its hard limit at "
          "start); one beyond is closed at once");
ABSL_FLAG(bool, insecure, false,
          "allow serving plaintext on a non-loopback --listen (a trusted "
          "network only: anyone who reaches the port can act as any worker "
          "or user without --tokens_file)");
ABSL_FLAG(std::string, tokens_file, "",
          "file of bearer tokens 'TOKEN ROLE NAME' a line (ROLE: user or "
          "worker; mode 600); without it authentication is off, which "
          "only a loopback --listen allows unless --insecure");
ABSL_FLAG(std::vector<std::string>, allowed_worker_hosts, {},
          "hosts workers may advertise besides the address they call from "
          "(comma-separated; never resolved)");
ABSL_FLAG(std::string, port_file, "",
          "write the bound port to this file once serving");
ABSL_FLAG(
    std::string, state_dir, "",
    "directory for the coordinator's state: port and pid files, the "
    "job journal (jobs.journal), which a restart reads back, the "
    "jobs' logs and traces (logs/, traces/: aq logs and aq trace after "
    "a restart) and trained models (models/<job>.safetensors); created (mode "
    "0700, as are missing parents) if missing. One coordinator at a time: "
    "it holds coordinator.lock (with its pid) while it runs. Without it, "
    "models are kept in a new directory under the system's temporary "
    "directory");
ABSL_FLAG(std::vector<std::string>, checkpoint_root, {},
          "directories under which jobs may checkpoint (comma-separated, or "
          "the flag repeated): a spec's checkpoint.dir must lie under one, "
          "and the coordinator commits manifests, removes old versions and "
          "reads `aq submit --resume DIR` manifests only there. Default: "
          "none, and a job with a checkpoint.dir is refused");
ABSL_FLAG(int64_t, max_model_bytes, int64_t{64} << 30,
          "largest trained model a worker may upload");
ABSL_FLAG(int64_t, heartbeat_interval_ms, 1000, "how often workers heartbeat");
ABSL_FLAG(int32_t, suspect_after_missed, 3,
          "missed heartbeats after which a worker is SUSPECT");
ABSL_FLAG(int64_t, dead_after_ms, 10000,
          "time without a heartbeat after which a worker is DEAD");
ABSL_FLAG(int32_t, max_workers, 100000,
          "worker ids registered at once, beyond which registrations of new "
          "ids are refused (RESOURCE_EXHAUSTED)");
ABSL_FLAG(int64_t, forget_workers_after_ms, 600000,
          "DEAD and LEFT workers are forgotten (no longer listed) this long "
          "after they ended");
ABSL_FLAG(int64_t, max_store_value_bytes, int64_t{1} << 20,
          "largest value in the rendezvous store");
ABSL_FLAG(int32_t, max_store_keys_per_job, 4096,
          "most rendezvous store keys one job may hold");
ABSL_FLAG(int64_t, max_store_bytes_per_job, int64_t{16} << 20,
          "most bytes of keys and values one job may hold in the rendezvous "
          "store (so that one job cannot take it from the others)");
ABSL_FLAG(int64_t, max_store_bytes, int64_t{256} << 20,
          "most bytes of keys and values the rendezvous store holds, all jobs "
          "together");
ABSL_FLAG(int32_t, max_waiting_calls, 64,
          "calls that wait at once (StoreGet with a wait, WatchJob, "
          "StreamLogs --follow: each holds a server thread), at most half "
          "for one job's store keys, for watches or for log follows, and a "
          "quarter for one user's watches and follows; more are refused "
          "(RESOURCE_EXHAUSTED; aq then polls)");
ABSL_FLAG(int64_t, max_store_wait_ms, 60000,
          "the longest a StoreGet waits for its key, whatever it asks");
ABSL_FLAG(int64_t, worker_rpc_timeout_ms, 10000,
          "deadline of AssignStage/StartJob/StopJob calls to workers");
ABSL_FLAG(int64_t, profile_timeout_ms, 300000,
          "deadline of a Profile call to a worker");
ABSL_FLAG(int64_t, wait_for_workers_ms, 0,
          "default time a job waits for enough healthy workers (0: until "
          "they are free, however long)");
ABSL_FLAG(int64_t, max_wait_for_workers_ms, 3600000,
          "the longest deadline a spec's pipeline.wait_for_workers_ms may "
          "set");
ABSL_FLAG(bool, reuse_profiles, true,
          "plan a model's later jobs from the profile measured for its first "
          "(on the same kind of worker), so that its plan does not change "
          "with the noise of a measurement");
ABSL_FLAG(int32_t, max_user_priority, 0,
          "the highest job priority a user credential may set (an admin "
          "credential: up to 1000)");
ABSL_FLAG(int32_t, max_pending_jobs, 1000,
          "pending jobs, all users together, beyond which submissions are "
          "refused (RESOURCE_EXHAUSTED)");
ABSL_FLAG(int32_t, max_jobs_per_user, 64,
          "unfinished jobs one user may have (callers without a credential "
          "count as one user)");
ABSL_FLAG(int64_t, reserve_after_ms, 300000,
          "after waiting this long, a job that the registered workers could "
          "run holds back the idle workers it needs: later jobs start only "
          "on idle workers beyond them (otherwise later jobs that fit start "
          "first)");
ABSL_FLAG(int32_t, max_message_bytes, 64 << 20,
          "largest gRPC message sent (a trace, a page of jobs)");
ABSL_FLAG(int32_t, max_receive_message_bytes, 8 << 20,
          "largest gRPC message accepted: larger ones are refused "
          "(RESOURCE_EXHAUSTED) from their length, before their body is "
          "held. Nothing the coordinator takes is larger than a few MiB: "
          "specs are at most 1 MiB, progress reports 4 MiB, model chunks "
          "1 MiB");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error, critical or off");
ABSL_FLAG(std::string, log_format, "text", "text or json (one object a line)");
constexpr char kDefaultHttpListen[] = "127.0.0.1:7080";
ABSL_FLAG(std::string, http_listen, kDefaultHttpListen,
          "host:port of the HTTP server for Prometheus metrics (/metrics) "
          "and the dashboard (port 0: pick a free one; the log says which); "
          "HTTPS with --tls_cert/--tls_key, and --tokens_file's tokens "
          "required when given; a non-loopback host needs both, or "
          "--insecure. Empty: none. The default, when its port is taken, "
          "is skipped with a warning");
ABSL_FLAG(std::string, health_listen, "",
          "host:port of a plaintext gRPC server carrying grpc.health.v1 "
          "alone, for probes that cannot do TLS (Kubernetes' gRPC probe); "
          "service \"\" is readiness, \"liveness\" liveness. It tells only "
          "those two states, so any address is allowed. Empty: none (the "
          "health service is on --listen too, with its TLS)");

namespace aqueduct {
namespace {

constexpr char kDescription[] =
    "The Aqueduct coordinator daemon: holds the worker registry, the jobs\n"
    "and their plans, the version ledger and the rendezvous store, and\n"
    "serves aqueduct.v1.Coordinator (plus grpc.health.v1 and reflection).\n"
    "SIGTERM or SIGINT stops it. Exit codes: 0 after a signal, 1 when it\n"
    "cannot start (the log says why), 2 for bad flags.\n";

// Logging from --log_level and --log_format; false (after saying why) if
// either is bad.
bool SetUpLogging() {
  logging::LoggingOptions log;
  log.level = absl::GetFlag(FLAGS_log_level);
  log.component = "coordinator";
  absl::Status s =
      logging::ParseFormat(absl::GetFlag(FLAGS_log_format), &log.format);
  if (s.ok()) s = logging::ConfigureLogging(log);
  if (!s.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(s.message()).c_str());
  }
  return s.ok();
}

constexpr int64_t kHourMs = int64_t{3600} * 1000;
constexpr int64_t kDayMs = 24 * kHourMs;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The values each integer flag may take (exit 2 beyond, naming the flag
// and its range); the rules between flags are in OptionsFromFlags.
const std::vector<FlagRange>& FlagRanges() {
  static const auto* ranges = new std::vector<FlagRange>{
      {"max_server_threads", 16, 65536},
      {"max_connections", 16, 1 << 20},
      {"max_message_bytes", 1 << 20, kInt32Max},
      {"max_receive_message_bytes", 1 << 20, kInt32Max},
      {"max_model_bytes", 1, int64_t{1} << 50},
      {"heartbeat_interval_ms", 1, kHourMs},
      {"suspect_after_missed", 1, 1000},
      {"dead_after_ms", 2, kDayMs},
      {"max_workers", 1, 1000000},
      {"forget_workers_after_ms", 0, 30 * kDayMs},
      {"max_store_value_bytes", 1, 1 << 30},
      {"max_store_keys_per_job", 1, 1 << 24},
      {"max_store_bytes_per_job", 1, int64_t{1} << 40},
      {"max_store_bytes", 1, int64_t{1} << 40},
      {"max_waiting_calls", 1, 32768},
      {"max_store_wait_ms", 1, kDayMs},
      {"worker_rpc_timeout_ms", 1, kDayMs},
      {"profile_timeout_ms", 1, kDayMs},
      {"wait_for_workers_ms", 0, 7 * kDayMs},
      {"max_user_priority", -1000, 1000},
      {"max_wait_for_workers_ms", 1, 7 * kDayMs},
      {"max_pending_jobs", 1, 1000000},
      {"max_jobs_per_user", 1, 1000000},
      {"reserve_after_ms", 0, 7 * kDayMs},
  };
  return *ranges;
}

// The rules between flags; false (after saying which) if one is broken.
bool FlagRelationsHold() {
  const int64_t value_bytes = absl::GetFlag(FLAGS_max_store_value_bytes);
  const int64_t job_bytes = absl::GetFlag(FLAGS_max_store_bytes_per_job);
  const char* broken = nullptr;
  if (job_bytes < value_bytes) {
    broken =
        "--max_store_bytes_per_job must be at least --max_store_value_bytes";
  } else if (absl::GetFlag(FLAGS_max_store_bytes) < job_bytes) {
    broken = "--max_store_bytes must be at least --max_store_bytes_per_job";
  } else if (absl::GetFlag(FLAGS_dead_after_ms) <=
             absl::GetFlag(FLAGS_heartbeat_interval_ms)) {
    broken = "--dead_after_ms must be more than --heartbeat_interval_ms";
  } else if (absl::GetFlag(FLAGS_max_waiting_calls) >
             absl::GetFlag(FLAGS_max_server_threads) / 2) {
    // Each waiting call holds a server thread: the others need some.
    broken = "--max_waiting_calls must be at most half --max_server_threads";
  }
  if (broken != nullptr) AQ_LOG_ERROR("{}", broken);
  return broken == nullptr;
}

// The queue's limits from the flags (jobs/queue.h).
void QueueOptionsFromFlags(CoordinatorOptions* options) {
  options->max_wait_for_workers =
      absl::Milliseconds(absl::GetFlag(FLAGS_max_wait_for_workers_ms));
  options->max_pending_jobs = absl::GetFlag(FLAGS_max_pending_jobs);
  options->max_jobs_per_user = absl::GetFlag(FLAGS_max_jobs_per_user);
  options->reserve_after =
      absl::Milliseconds(absl::GetFlag(FLAGS_reserve_after_ms));
}

// The bounds on workers, the rendezvous store and waiting calls from the
// flags.
void LimitOptionsFromFlags(CoordinatorOptions* options) {
  options->registry.max_workers = absl::GetFlag(FLAGS_max_workers);
  options->registry.forget_after =
      absl::Milliseconds(absl::GetFlag(FLAGS_forget_workers_after_ms));
  options->max_waiting_calls = absl::GetFlag(FLAGS_max_waiting_calls);
  options->max_store_wait =
      absl::Milliseconds(absl::GetFlag(FLAGS_max_store_wait_ms));
  options->store.max_value_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_store_value_bytes));
  options->store.max_keys_per_job =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_store_keys_per_job));
  options->store.max_bytes_per_job =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_store_bytes_per_job));
  options->store.max_total_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_store_bytes));
}

// The core's options from the flags; false (after saying why) if a flag
// is out of its range or they contradict each other.
bool OptionsFromFlags(CoordinatorOptions* options) {
  if (absl::Status s = CheckFlagRanges(FlagRanges()); !s.ok()) {
    AQ_LOG_ERROR("{}", std::string(s.message()));
    return false;
  }
  if (!FlagRelationsHold()) return false;
  options->registry.heartbeat_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  options->registry.suspect_after_missed =
      absl::GetFlag(FLAGS_suspect_after_missed);
  options->registry.dead_after =
      absl::Milliseconds(absl::GetFlag(FLAGS_dead_after_ms));
  options->registry.version = kVersion;
  options->worker_rpc_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_worker_rpc_timeout_ms));
  options->profile_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_profile_timeout_ms));
  const int64_t wait_ms = absl::GetFlag(FLAGS_wait_for_workers_ms);
  options->default_wait_for_workers =
      wait_ms > 0 ? absl::Milliseconds(wait_ms) : absl::InfiniteDuration();
  options->max_user_priority = absl::GetFlag(FLAGS_max_user_priority);
  options->reuse_profiles = absl::GetFlag(FLAGS_reuse_profiles);
  QueueOptionsFromFlags(options);
  LimitOptionsFromFlags(options);
  absl::StatusOr<PathRoots> roots =
      PathRoots::Make("the coordinator's --checkpoint_root",
                      absl::GetFlag(FLAGS_checkpoint_root));
  if (!roots.ok()) {
    AQ_LOG_ERROR("{}", std::string(roots.status().message()));
    return false;
  }
  options->checkpoint_roots = *std::move(roots);
  return true;
}

// Warns when others may enter --state_dir: its journal holds every job's
// spec and owner. (Not changed here: --state_dir may name a directory
// others share, such as /var/lib.)
void WarnIfShared(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    AQ_LOG_WARN(
        "--state_dir {} is mode {:o}: other users may read the jobs' specs, "
        "logs and models in it; chmod 700 it",
        dir, st.st_mode & 07777);
  }
}

// Locks --state_dir for this process's life: a second coordinator there
// would compact the journal under the first and lose its jobs.
absl::StatusOr<std::unique_ptr<FileLock>> LockStateDir(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<FileLock>> lock =
      FileLock::Acquire(dir + "/coordinator.lock");
  if (absl::IsFailedPrecondition(lock.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--state_dir ", dir, " is in use by another coordinator: ",
        lock.status().message(), "; stop it, or give another --state_dir"));
  }
  if (!lock.ok()) {
    return absl::Status(lock.status().code(),
                        absl::StrCat("--state_dir: ", lock.status().message()));
  }
  if (!(*lock)->pid_error().empty()) {
    AQ_LOG_WARN(
        "{} (locked all the same: a second coordinator will not name "
        "this one)",
        (*lock)->pid_error());
  }
  return lock;
}

// Creates --state_dir if missing, locks it and opens the job journal in
// it (which, on a full disk, serves without recording new jobs: see
// CoordinatorCore::OpenJournal). The lock is null without --state_dir.
absl::StatusOr<std::unique_ptr<FileLock>> OpenStateDir(CoordinatorCore* core) {
  const std::string dir = absl::GetFlag(FLAGS_state_dir);
  if (dir.empty()) return nullptr;
  if (absl::Status s = MakeDirectories(dir, 0700); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("--state_dir: ", s.message()));
  }
  WarnIfShared(dir);
  ASSIGN_OR_RETURN(std::unique_ptr<FileLock> lock, LockStateDir(dir));
  RETURN_IF_ERROR(core->OpenJournal(dir + "/jobs.journal"));
  return lock;
}

// Where trained models are kept: <state_dir>/models (absolute: the path is
// recorded with each job and shown to users), or without --state_dir a new
// directory under the system's temporary directory (logged). Empty (after
// logging why) if that cannot be created.
std::string ModelsDir() {
  std::error_code error;
  const std::string state_dir = absl::GetFlag(FLAGS_state_dir);
  if (!state_dir.empty()) {
    std::filesystem::path dir = std::filesystem::absolute(state_dir, error);
    if (error) dir = state_dir;
    return (dir.lexically_normal() / "models").string();
  }
  std::string dir = (std::filesystem::temp_directory_path(error) /
                     "aqueduct-coordinator-XXXXXX")
                        .string();
  if (error || mkdtemp(dir.data()) == nullptr) {
    AQ_LOG_ERROR(
        "cannot create a directory for trained models ({}); give "
        "--state_dir",
        dir);
    return "";
  }
  AQ_LOG_INFO("no --state_dir: trained models are kept in {}/models", dir);
  return dir + "/models";
}

// The trained models' store; null (after logging why) if it cannot be
// opened.
std::unique_ptr<ModelStore> OpenModelStore() {
  ModelStoreOptions options;
  options.max_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  options.dir = ModelsDir();
  if (options.dir.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<ModelStore>> store = ModelStore::Open(options);
  if (!store.ok()) {
    AQ_LOG_ERROR("{}", store.status().ToString());
    return nullptr;
  }
  return *std::move(store);
}

// The coordinator's credentials from the TLS and token flags; false (after
// saying why) if they are bad or do not allow --listen.
bool SecurityFromFlags(SecurityConfig* config,
                       std::optional<TokenTable>* tokens) {
  absl::StatusOr<SecurityConfig> read = SecurityConfigFromFlags(true);
  absl::Status s = read.status();
  // A key that is not the certificate's would fail every handshake, and
  // gRPC would say only that it cannot listen.
  if (s.ok() && !read->cert_pem.empty()) {
    s = CheckKeyPair(read->cert_pem, read->key_pem);
  }
  const std::string& tokens_file = absl::GetFlag(FLAGS_tokens_file);
  if (s.ok() && !tokens_file.empty()) {
    absl::StatusOr<TokenTable> table = TokenTable::Load(tokens_file);
    s = table.ok() ? absl::OkStatus()
                   : absl::Status(table.status().code(),
                                  absl::StrCat("--tokens_file: ",
                                               table.status().message()));
    if (s.ok()) *tokens = *std::move(table);
  }
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (s.ok()) {
    s = CheckListenAddress(absl::GetFlag(FLAGS_listen), read->tls(), insecure);
  }
  // Without tokens anyone reaching the port is trusted: loopback only.
  if (s.ok() && tokens_file.empty() &&
      !CheckListenAddress(absl::GetFlag(FLAGS_listen), false, insecure).ok()) {
    s = absl::FailedPreconditionError(
        "--listen is not a loopback address and authentication is off: give "
        "--tokens_file (docs/security.md), or --insecure");
  }
  if (!s.ok()) {
    AQ_LOG_ERROR("{}", std::string(s.message()));
    return false;
  }
  *config = *std::move(read);
  AQ_LOG_INFO("TLS {}, authentication {}", config->tls() ? "on" : "off",
              tokens->has_value() ? "on" : "off");
  return true;
}

// A connection that has not completed its TLS and HTTP/2 handshakes by
// then is closed (gRPC's default: 120 s), so that silent connections hold
// their place under --max_connections for less long.
constexpr int kHandshakeTimeoutMs = 20000;

// Serves `service` on --listen; null (after logging why) if it cannot.
std::unique_ptr<grpc::Server> StartServer(GrpcCoordinatorService* service,
                                          const SecurityConfig& security,
                                          int* port,
                                          CoordinatorMetrics* metrics) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      absl::GetFlag(FLAGS_listen),
      ServerCredentials(security, ClientCertificates::kVerifyIfSent), port);
  // Each call in flight holds a thread of gRPC's synchronous server: bound
  // them, so a flood of calls is refused (RESOURCE_EXHAUSTED) instead of
  // growing the process.
  grpc::ResourceQuota quota("coordinator");
  quota.SetMaxThreads(absl::GetFlag(FLAGS_max_server_threads));
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(
      absl::GetFlag(FLAGS_max_receive_message_bytes));
  builder.SetMaxSendMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             kHandshakeTimeoutMs);
  builder.RegisterService(service);
  // Times every call for /metrics (coordinator/metrics.h).
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(CoordinatorMetrics::NewInterceptorFactory(metrics));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    AQ_LOG_ERROR("cannot listen on {}", absl::GetFlag(FLAGS_listen));
    return nullptr;
  }
  AQ_LOG_INFO("coordinator {} serving on port {}", kVersion, *port);
  return server;
}

// The HTTP server on --http_listen with /metrics (and the dashboard's
// routes); null with OK when --http_listen is empty. Its handlers read
// `core` and `metrics`, which must outlive it.
absl::StatusOr<std::unique_ptr<HttpServer>> StartHttp(
    CoordinatorCore* core, CoordinatorMetrics* metrics,
    const SecurityConfig& security, const TokenTable* tokens) {
  const std::string listen = absl::GetFlag(FLAGS_http_listen);
  if (listen.empty()) return nullptr;
  ASSIGN_OR_RETURN(HttpServerOptions options,
                   DaemonHttpOptions("--http_listen", listen, security.cert_pem,
                                     security.key_pem, tokens,
                                     absl::GetFlag(FLAGS_insecure)));
  ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> server,
                   HttpServer::Create(std::move(options)));
  server->Handle("/metrics", [core, metrics](const HttpRequest&) {
    HttpResponse response;
    response.body = metrics->Render(*core, absl::Now());
    return response;
  });
  // The dashboard's page and JSON APIs (coordinator/dashboard).
  AddDashboardRoutes(core, server.get(), absl::GetFlag(FLAGS_listen));
  absl::Status started = server->Start();
  // The default port may be another coordinator's on this host (tests run
  // several): then serve without metrics rather than not at all. A port
  // given explicitly must be had.
  if (absl::IsUnavailable(started) && listen == kDefaultHttpListen) {
    AQ_LOG_WARN("{}: no metrics or dashboard; give --http_listen",
                std::string(started.message()));
    return nullptr;
  }
  RETURN_IF_ERROR(started);
  AQ_LOG_INFO("metrics on {}://{}:{}/metrics", server->scheme(),
              listen.substr(0, listen.rfind(':')), server->port());
  return server;
}

// --port_file (an error if it cannot be written: its reader waits for
// it), then the port and pid files in --state_dir, which a full disk may
// refuse: that is logged, and the coordinator serves all the same (the
// log says the port too).
absl::Status WriteStateFiles(int port) {
  const std::string port_text = absl::StrCat(port, "\n");
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    RETURN_IF_ERROR(
        WriteFileAtomically(absl::GetFlag(FLAGS_port_file), port_text));
  }
  const std::string dir = absl::GetFlag(FLAGS_state_dir);
  if (dir.empty()) return absl::OkStatus();
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"coordinator.port", port_text},
        {"coordinator.pid", absl::StrCat(getpid(), "\n")}}) {
    if (absl::Status s = WriteFileAtomically(dir + "/" + name, text); !s.ok()) {
      AQ_LOG_WARN("{}; serving on port {} all the same",
                  std::string(s.message()), port);
    }
  }
  return absl::OkStatus();
}

// Caps accepted connections at --max_connections (common/daemon.h) and
// says what is in force.
int LimitConnections() {
  const int cap =
      LimitIncomingConnections(absl::GetFlag(FLAGS_max_connections));
  AQ_LOG_INFO("descriptor limit {}: at most {} connections at once",
              DescriptorLimit(), cap);
  return cap;
}

// Says, at most every 10 s, how many connections the cap refused since it
// last said.
void ReportRefusedConnections(int cap, int64_t* reported,
                              std::chrono::steady_clock::time_point* next) {
  const auto now = std::chrono::steady_clock::now();
  const int64_t refused = RefusedConnections();
  if (now < *next || refused == *reported) return;
  AQ_LOG_WARN(
      "refused {} connection(s): {} were open, the most --max_connections "
      "and the descriptor limit allow",
      refused - *reported, cap);
  *reported = refused;
  *next = now + std::chrono::seconds(10);
}

// Ticks the core until SIGTERM or SIGINT, then shuts the server down.
void ServeUntilSignal(CoordinatorCore* core, grpc::Server* server,
                      int connection_cap) {
  std::atomic<bool> stopping{false};
  std::thread ticker([&] {
    int64_t refused_reported = 0;
    std::chrono::steady_clock::time_point next_report;  // Long past.
    for (int64_t tick = 1; !stopping; ++tick) {
      core->Tick();
      ReportRefusedConnections(connection_cap, &refused_reported, &next_report);
      // Every 5 s: what a burst of large calls left freed goes back.
      if (tick % 50 == 0) ReturnFreeMemory();
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  const int signal = WaitForTerminationSignal();
  AQ_LOG_INFO("signal {}: shutting down", signal);
  stopping = true;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(3));
  ticker.join();
  server->Wait();
}

int Main() {
  if (!SetUpLogging()) return 2;
  CoordinatorOptions options;
  if (!OptionsFromFlags(&options)) return 2;
  SecurityConfig security_config;
  std::optional<TokenTable> tokens;
  if (!SecurityFromFlags(&security_config, &tokens)) return 2;
  const int connection_cap = LimitConnections();
  BlockTerminationSignals();
  // Before the journal is read, so that a liveness probe answers (and
  // readiness says NOT_SERVING) while a long journal replays.
  absl::StatusOr<std::unique_ptr<HealthReporter>> health =
      HealthReporter::Start(absl::GetFlag(FLAGS_health_listen),
                            "--health_listen");
  if (!health.ok()) {
    AQ_LOG_ERROR("{}", std::string(health.status().message()));
    return 1;
  }
  GrpcWorkerClients clients(ChannelCredentials(security_config));
  CoordinatorCore core(options, RealClock::Get(), clients.Factory());
  // Held until Main returns: one coordinator per --state_dir.
  absl::StatusOr<std::unique_ptr<FileLock>> state_lock = OpenStateDir(&core);
  if (!state_lock.ok()) {
    AQ_LOG_ERROR("{}", state_lock.status().ToString());
    return 1;
  }
  std::unique_ptr<ModelStore> models = OpenModelStore();
  if (models == nullptr) return 1;
  GrpcCoordinatorService service(
      &core, models.get(),
      ServiceSecurity{
          tokens.has_value() ? &*tokens : nullptr, security_config.tls(),
          absl::GetFlag(FLAGS_allowed_worker_hosts), true,
          [&clients](const std::string& address, const std::string& token) {
            clients.SetControlToken(address, token);
          },
          [&core](const std::string& worker, const std::string& key) {
            return core.CheckStoreAccess(worker, key);
          }});
  int port = 0;
  CoordinatorMetrics metrics;  // outlives `server` (its interceptor)
  std::unique_ptr<grpc::Server> server =
      StartServer(&service, security_config, &port, &metrics);
  if (server == nullptr) return 1;
  absl::StatusOr<std::unique_ptr<HttpServer>> http =
      StartHttp(&core, &metrics, security_config,
                tokens.has_value() ? &*tokens : nullptr);
  if (!http.ok()) {
    AQ_LOG_ERROR("{}", std::string(http.status().message()));
    return 1;
  }
  (*health)->AddServer(server.get());
  (*health)->SetReady(true);
  if (absl::Status s = WriteStateFiles(port); !s.ok()) {
    AQ_LOG_ERROR("{}", s.ToString());
    return 1;
  }
  ServeUntilSignal(&core, server.get(), connection_cap);
  (*health)->Shutdown();  // before `server` goes: it reports there
  AQ_LOG_INFO("coordinator stopped");
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) {
  aqueduct::ParseDaemonFlags("coordinator", aqueduct::kDescription,
                             "coordinator/main.cc", argc, argv);
  return aqueduct::Main();
}
