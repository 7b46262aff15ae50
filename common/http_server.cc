#include "common/http_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_system.h"
#include "common/logging.h"

namespace aqueduct {
namespace {

constexpr char kCookie[] = "aq_token";
constexpr char kPlainText[] = "text/plain; charset=utf-8";
// TLS 1.2 and 1.3 only; GnuTLS's default suites within them.
constexpr char kTlsPriorities[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
// How often the header deadlines are checked.
constexpr absl::Duration kDeadlineTick = absl::Milliseconds(100);

using Pairs = std::vector<std::pair<std::string, std::string>>;

// A request as the routing sees it, whatever carried it.
struct Request {
  std::string method;
  std::string path;  // decoded, without the query
  Pairs headers;     // in arrival order
  Pairs params;      // query parameters, decoded, in order
};

struct Reply {
  int status = 200;
  std::string content_type = kPlainText;
  std::string body;
  Pairs headers;  // besides Content-Type
};

Reply TextReply(int status, std::string body) {
  Reply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

// Splits "host:port" or "[v6]:port"; false if malformed.
bool ParseListen(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  absl::string_view h(listen.data(), colon);
  if (absl::ConsumePrefix(&h, "[") && !absl::ConsumeSuffix(&h, "]")) {
    return false;
  }
  if (h.empty() || !absl::SimpleAtoi(listen.substr(colon + 1), port) ||
      *port < 0 || *port > 65535) {
    return false;
  }
  *host = std::string(h);
  return true;
}

// The OpenSSL error queue as text (cleared).
std::string SslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(e, buffer, sizeof(buffer));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buffer);
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// Checks that `cert_pem` starts with a certificate and that `key_pem` is
// its private key, so that Create() names the field that is wrong (GnuTLS,
// under libmicrohttpd, would only fail to start).
absl::Status CheckTlsMaterial(const std::string& cert_pem,
                              const std::string& key_pem) {
  ERR_clear_error();
  BIO* bio =
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* leaf = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (leaf == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTPS certificate (cert_file/cert_pem): ", SslErrors()));
  }
  ERR_clear_error();
  bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  const bool ok = key != nullptr && X509_check_private_key(leaf, key) == 1;
  EVP_PKEY_free(key);
  X509_free(leaf);
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTPS key (key_file/key_pem) unreadable or not the certificate's: ",
        SslErrors()));
  }
  return absl::OkStatus();
}

// Reads `path` into `*pem` unless `*pem` is set already.
absl::Status ReadPem(const std::string& path, const char* field,
                     std::string* pem) {
  if (!pem->empty() || path.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> text = DefaultFileSystem()->ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", text.status().message()));
  }
  *pem = *std::move(text);
  return absl::OkStatus();
}

std::string ErrnoText(int error) {
  char buffer[128];
  return strerror_r(error, buffer, sizeof(buffer));  // GNU: may not use it
}

// A listening, non-blocking TCP socket on `host`:`port`. SO_REUSEADDR but
// not SO_REUSEPORT, so that a second daemon cannot share the port and steal
// half the scrapes. UNAVAILABLE naming `listen` if no address of `host`
// can be bound.
absl::StatusOr<int> Listen(const std::string& host, int port,
                           const std::string& listen) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ",
                                               listen, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                a->ai_protocol);
    if (fd < 0) {
      why = ErrnoText(errno);
      continue;
    }
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        ::listen(fd, SOMAXCONN) != 0) {
      why = ErrnoText(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", listen, " (", why,
                     ": in use, or not an address of this host)"));
  }
  return fd;
}

// The local port of a bound socket; 0 if unknown.
int BoundPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return 0;
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

// `wanted`, lowered to half the open-file limit (leaving the rest to gRPC,
// files and the data plane) and raised to one connection per thread.
unsigned int ConnectionLimit(int wanted, int threads) {
  rlim_t limit = static_cast<rlim_t>(wanted);
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 &&
      files.rlim_cur != RLIM_INFINITY && limit > files.rlim_cur / 2) {
    limit = files.rlim_cur / 2;
    AQ_LOG_WARN(
        "HTTP: at most {} connections, half the open-file limit (ulimit -n "
        "{}), not {}",
        limit, files.rlim_cur, wanted);
  }
  return static_cast<unsigned int>(
      std::max<rlim_t>(limit, static_cast<rlim_t>(threads)));
}

const std::string* FindHeader(const Request& request, absl::string_view name) {
  for (const auto& [key, value] : request.headers) {
    if (absl::EqualsIgnoreCase(key, name)) return &value;
  }
  return nullptr;
}

// The token a request presents, and whether it came in the URL.
std::string PresentedToken(const Request& request, bool* from_url) {
  *from_url = false;
  if (const std::string* authorization = FindHeader(request, "Authorization")) {
    return std::string(BearerToken(*authorization));
  }
  for (const auto& [name, value] : request.params) {
    if (name == "token") {
      *from_url = true;
      return value;
    }
  }
  for (const auto& [name, value] : request.headers) {
    if (!absl::EqualsIgnoreCase(name, "Cookie")) continue;
    for (absl::string_view part : absl::StrSplit(value, ';')) {
      part = absl::StripAsciiWhitespace(part);
      if (absl::ConsumePrefix(&part, kCookie) &&
          absl::ConsumePrefix(&part, "=")) {
        return std::string(part);
      }
    }
  }
  return "";
}

// Checks the request's token; fills `reply` with a 401 and returns false if
// it is missing or unknown. A good token from the URL sets the cookie.
bool Authorize(const TokenTable& tokens, bool https, const Request& request,
               Reply* reply) {
  bool from_url = false;
  const std::string token = PresentedToken(request, &from_url);
  const char* reason = nullptr;
  if (token.empty()) {
    reason =
        "missing token: send 'Authorization: Bearer <token>' or open "
        "?token=<token> once\n";
  } else if (!tokens.Find(token).has_value()) {
    reason = "unknown token\n";
  }
  if (reason != nullptr) {
    *reply = TextReply(401, reason);
    reply->headers.emplace_back("WWW-Authenticate", "Bearer");
    return false;
  }
  if (from_url) {
    reply->headers.emplace_back(
        "Set-Cookie",
        absl::StrCat(kCookie, "=", token, "; Path=/; HttpOnly; SameSite=Strict",
                     https ? "; Secure" : ""));
  }
  return true;
}

// Whether the request announces a body (every route is a GET).
bool HasBody(const Request& request) {
  const std::string* length = FindHeader(request, "Content-Length");
  return (length != nullptr && *length != "0") ||
         FindHeader(request, "Transfer-Encoding") != nullptr;
}

// The time by which each connection's next request line and headers must
// have arrived. libmicrohttpd's own timeout is an idle one, which a client
// trickling a byte a second never reaches. Thread-safe.
class HeaderDeadlines {
 public:
  // A connection started; `fd` is its socket until Forget().
  void Start(const void* connection, int fd, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    entries_[connection] = Entry{fd, deadline};
  }
  // Its request's headers arrived: no deadline while it is answered (the
  // idle timeout bounds a slow reader).
  void Clear(const void* connection) {
    Rearm(connection, absl::InfiniteFuture());
  }
  // Its response was sent: the next request must arrive by `deadline`.
  void Rearm(const void* connection, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(connection);
    if (it != entries_.end()) it->second.deadline = deadline;
  }
  // It is closing; libmicrohttpd closes its socket after this returns.
  void Forget(const void* connection) {
    absl::MutexLock lock(&mu_);
    entries_.erase(connection);
  }
  // Shuts down the socket of every connection past its deadline:
  // libmicrohttpd then reads the end of the stream and closes it. Under the
  // lock, so that a socket (whose number may be reused) is never touched
  // after Forget(). Returns how many.
  int ShutDownExpired(absl::Time now) {
    absl::MutexLock lock(&mu_);
    int count = 0;
    for (auto& [connection, entry] : entries_) {
      if (entry.deadline > now) continue;
      shutdown(entry.fd, SHUT_RDWR);
      entry.deadline = absl::InfiniteFuture();
      ++count;
    }
    return count;
  }

 private:
  struct Entry {
    int fd;
    absl::Time deadline;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<const void*, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

// libmicrohttpd's daemon with the routes and the header deadlines. Routes
// are set before Start() and only read after; the deadlines are
// thread-safe; `mu_` guards the rest that the server's threads touch.
class HttpServer::Impl {
 public:
  Impl(HttpServerOptions options, std::string host, int port)
      : options_(std::move(options)),
        host_(std::move(host)),
        requested_port_(port) {}
  ~Impl();

  const HttpServerOptions& options() const { return options_; }
  void Handle(const std::string& path, HttpHandler handler) {
    handlers_[path] = std::move(handler);
  }
  // Binds and serves; the bound port.
  absl::StatusOr<int> Start();

 private:
  static MHD_Result OnRequest(void* cls, MHD_Connection* connection,
                              const char* url, const char* method,
                              const char* version, const char* upload_data,
                              size_t* upload_data_size, void** request_state);
  static void OnConnection(void* cls, MHD_Connection* connection,
                           void** socket_context,
                           MHD_ConnectionNotificationCode code);
  static void OnCompleted(void* cls, MHD_Connection* connection,
                          void** request_state,
                          MHD_RequestTerminationCode code);
  static void OnLog(void* cls, const char* format, va_list args);

  bool https() const { return !options_.cert_pem.empty(); }
  absl::Time NextDeadline() const {
    return absl::Now() + absl::Seconds(options_.timeout_seconds);
  }
  // The answer to `request`: 413 with a body, 405 unless GET or HEAD, 401
  // without a good token, 404 off the routes, else the route's handler.
  Reply Route(const Request& request) const;
  // libmicrohttpd's options for serving on `listen_fd`.
  std::vector<MHD_OptionItem> DaemonOptions(int listen_fd);
  // The loop of `deadline_thread_`: cuts connections past their deadline
  // every kDeadlineTick until the destructor sets `stopping_`.
  void EnforceDeadlines();

  const HttpServerOptions options_;
  const std::string host_;
  const int requested_port_;
  std::map<std::string, HttpHandler> handlers_;
  HeaderDeadlines deadlines_;
  MHD_Daemon* daemon_ = nullptr;
  std::thread deadline_thread_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::string start_log_ ABSL_GUARDED_BY(mu_);  // messages until started
};

Reply HttpServer::Impl::Route(const Request& request) const {
  if (HasBody(request)) return TextReply(413, "request bodies are refused\n");
  if (request.method != "GET" && request.method != "HEAD") {
    Reply reply = TextReply(405, "only GET and HEAD are served\n");
    reply.headers.emplace_back("Allow", "GET, HEAD");
    return reply;
  }
  Reply reply;
  if (options_.tokens != nullptr &&
      !Authorize(*options_.tokens, https(), request, &reply)) {
    return reply;
  }
  auto it = handlers_.find(request.path);
  if (it == handlers_.end()) {
    return TextReply(404, absl::StrCat("no page at ", request.path, "\n"));
  }
  HttpRequest handler_request;
  handler_request.path = request.path;
  for (const auto& [name, value] : request.params) {
    if (name != "token") handler_request.params.emplace(name, value);
  }
  HttpResponse response = it->second(handler_request);
  reply.status = response.status;
  reply.content_type = std::move(response.content_type);
  reply.body = std::move(response.body);
  return reply;
}

namespace {

MHD_Result Collect(void* cls, MHD_ValueKind, const char* key,
                   const char* value) {
  static_cast<Pairs*>(cls)->emplace_back(key != nullptr ? key : "",
                                         value != nullptr ? value : "");
  return MHD_YES;
}

Request ReadRequest(MHD_Connection* connection, const char* url,
                    const char* method) {
  Request request;
  request.method = method;
  request.path = url;
  MHD_get_connection_values(connection, MHD_HEADER_KIND, &Collect,
                            &request.headers);
  MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &Collect,
                            &request.params);
  return request;
}

MHD_Result QueueReply(MHD_Connection* connection, Reply& reply) {
  MHD_Response* response = MHD_create_response_from_buffer(
      reply.body.size(), reply.body.data(), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  bool ok = MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                                    reply.content_type.c_str()) == MHD_YES;
  for (const auto& [name, value] : reply.headers) {
    ok = ok && MHD_add_response_header(response, name.c_str(), value.c_str()) ==
                   MHD_YES;
  }
  const MHD_Result queued =
      ok ? MHD_queue_response(connection, static_cast<unsigned>(reply.status),
                              response)
         : MHD_NO;
  MHD_destroy_response(response);
  return queued;
}

}  // namespace

// Called once a request's line and headers are in, then once it is whole.
// A request announcing a body is refused at the first call, before the body
// is read (libmicrohttpd then closes the connection); any other is answered
// at the second (an answer queued at the first call would close a
// keep-alive connection too). MHD_NO closes the connection.
MHD_Result HttpServer::Impl::OnRequest(void* cls, MHD_Connection* connection,
                                       const char* url, const char* method,
                                       const char* /*version*/,
                                       const char* /*upload_data*/,
                                       size_t* upload_data_size,
                                       void** request_state) {
  Impl* self = static_cast<Impl*>(cls);
  const bool first_call = *request_state == nullptr;
  if (first_call) {
    *request_state = self;  // any non-null mark
    self->deadlines_.Clear(connection);
  } else if (*upload_data_size != 0) {
    return MHD_NO;  // a body no header announced
  }
  Reply reply;
  // No exception may unwind through libmicrohttpd's C frames.
  try {
    const Request request = ReadRequest(connection, url, method);
    if (first_call && !HasBody(request)) return MHD_YES;
    reply = self->Route(request);
  } catch (...) {
    reply = TextReply(500, "internal error\n");
  }
  return QueueReply(connection, reply);
}

void HttpServer::Impl::OnConnection(void* cls, MHD_Connection* connection,
                                    void** /*socket_context*/,
                                    MHD_ConnectionNotificationCode code) {
  Impl* self = static_cast<Impl*>(cls);
  if (code != MHD_CONNECTION_NOTIFY_STARTED) {
    self->deadlines_.Forget(connection);
    return;
  }
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (info != nullptr) {
    self->deadlines_.Start(connection, info->connect_fd, self->NextDeadline());
  }
}

void HttpServer::Impl::OnCompleted(void* cls, MHD_Connection* connection,
                                   void** /*request_state*/,
                                   MHD_RequestTerminationCode /*code*/) {
  Impl* self = static_cast<Impl*>(cls);
  self->deadlines_.Rearm(connection, self->NextDeadline());
}

// libmicrohttpd's messages: kept for Start()'s error until it has started,
// then logged at debug level (an attack would otherwise flood the log with
// "connection limit reached").
void HttpServer::Impl::OnLog(void* cls, const char* format, va_list args) {
  Impl* self = static_cast<Impl*>(cls);
  char buffer[512];
  vsnprintf(buffer, sizeof(buffer), format, args);
  absl::string_view message = absl::StripTrailingAsciiWhitespace(buffer);
  absl::MutexLock lock(&self->mu_);
  if (self->started_) {
    AQ_LOG_DEBUG("HTTP: {}", std::string(message));
  } else {
    absl::StrAppend(&self->start_log_, self->start_log_.empty() ? "" : "; ",
                    message);
  }
}

std::vector<MHD_OptionItem> HttpServer::Impl::DaemonOptions(int listen_fd) {
  auto number = [](MHD_OPTION option, intptr_t value) {
    return MHD_OptionItem{option, value, nullptr};
  };
  auto callback = [this](MHD_OPTION option, auto* function) {
    return MHD_OptionItem{option, reinterpret_cast<intptr_t>(function), this};
  };
  auto text = [](MHD_OPTION option, const std::string& value) {
    return MHD_OptionItem{option, 0, const_cast<char*>(value.c_str())};
  };
  std::vector<MHD_OptionItem> items = {
      number(MHD_OPTION_LISTEN_SOCKET, listen_fd),
      number(MHD_OPTION_THREAD_POOL_SIZE, options_.threads),
      number(MHD_OPTION_CONNECTION_LIMIT,
             ConnectionLimit(options_.max_connections, options_.threads)),
      number(MHD_OPTION_PER_IP_CONNECTION_LIMIT,
             options_.max_connections_per_ip),
      number(MHD_OPTION_CONNECTION_TIMEOUT, options_.timeout_seconds),
      number(MHD_OPTION_CONNECTION_MEMORY_LIMIT, options_.max_request_bytes),
      callback(MHD_OPTION_NOTIFY_CONNECTION, &OnConnection),
      callback(MHD_OPTION_NOTIFY_COMPLETED, &OnCompleted),
      callback(MHD_OPTION_EXTERNAL_LOGGER, &OnLog),
  };
  if (https()) {
    items.push_back(text(MHD_OPTION_HTTPS_MEM_CERT, options_.cert_pem));
    items.push_back(text(MHD_OPTION_HTTPS_MEM_KEY, options_.key_pem));
    items.push_back(MHD_OptionItem{MHD_OPTION_HTTPS_PRIORITIES, 0,
                                   const_cast<char*>(kTlsPriorities)});
  }
  items.push_back(number(MHD_OPTION_END, 0));
  return items;
}

absl::StatusOr<int> HttpServer::Impl::Start() {
  absl::StatusOr<int> fd = Listen(host_, requested_port_, options_.listen);
  if (!fd.ok()) return fd.status();
  const int port = BoundPort(*fd);
  // libmicrohttpd owns the socket from here. On a failed start it closes it
  // on some paths and not others, so it is not closed here (that could
  // close a descriptor reused meanwhile): a start that fails may leave it
  // open.
  std::vector<MHD_OptionItem> items = DaemonOptions(*fd);
  const unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                             MHD_USE_ITC | MHD_USE_ERROR_LOG |
                             (https() ? MHD_USE_TLS : 0);
  daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &OnRequest, this,
                             MHD_OPTION_ARRAY, items.data(), MHD_OPTION_END);
  absl::MutexLock lock(&mu_);
  if (daemon_ == nullptr) {
    return absl::InternalError(absl::StrCat("HTTP server on ", options_.listen,
                                            " did not start: ", start_log_));
  }
  started_ = true;
  deadline_thread_ = std::thread([this] { EnforceDeadlines(); });
  return port;
}

void HttpServer::Impl::EnforceDeadlines() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), kDeadlineTick)) {
        return;
      }
    }
    const int cut = deadlines_.ShutDownExpired(absl::Now());
    if (cut > 0) {
      AQ_LOG_DEBUG("HTTP: closed {} connection(s) whose request took over {} s",
                   cut, options_.timeout_seconds);
    }
  }
}

HttpServer::Impl::~Impl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (deadline_thread_.joinable()) deadline_thread_.join();
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(
    HttpServerOptions options) {
  std::string host;
  int port = 0;
  if (!ParseListen(options.listen, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP listen address '", options.listen, "' is not host:port"));
  }
  if (options.threads < 1 || options.timeout_seconds < 1 ||
      options.max_connections < 1 || options.max_connections_per_ip < 1 ||
      options.max_request_bytes < 1024) {
    return absl::InvalidArgumentError(
        "HTTP server needs threads, timeout_seconds, max_connections and "
        "max_connections_per_ip >= 1 and max_request_bytes >= 1024");
  }
  if (absl::Status s =
          ReadPem(options.cert_file, "cert_file", &options.cert_pem);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadPem(options.key_file, "key_file", &options.key_pem);
      !s.ok()) {
    return s;
  }
  if (options.cert_pem.empty() != options.key_pem.empty()) {
    return absl::InvalidArgumentError(
        "HTTPS needs both a certificate and its key (cert_file, key_file)");
  }
  if (!options.cert_pem.empty()) {
    if (absl::Status s = CheckTlsMaterial(options.cert_pem, options.key_pem);
        !s.ok()) {
      return s;
    }
  }
  return std::unique_ptr<HttpServer>(new HttpServer(
      std::make_unique<Impl>(std::move(options), std::move(host), port)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() = default;

const char* HttpServer::scheme() const {
  return impl_->options().cert_pem.empty() ? "http" : "https";
}

void HttpServer::Handle(const std::string& path, HttpHandler handler) {
  impl_->Handle(path, std::move(handler));
}

absl::Status HttpServer::Start() {
  if (port_ != 0) return absl::FailedPreconditionError("already started");
  absl::StatusOr<int> port = impl_->Start();
  if (!port.ok()) return port.status();
  port_ = *port;
  return absl::OkStatus();
}

absl::StatusOr<HttpServerOptions> DaemonHttpOptions(const std::string& flag,
                                                    const std::string& listen,
                                                    const std::string& cert_pem,
                                                    const std::string& key_pem,
                                                    const TokenTable* tokens,
                                                    bool insecure) {
  const bool tls = !cert_pem.empty() && !key_pem.empty();
  absl::Status s = CheckListenAddress(listen, tls, insecure);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrReplaceAll(s.message(), {{"--listen", flag}}));
  }
  // Without tokens anyone reaching the port reads the metrics (and the
  // dashboard's job names and losses): loopback only, as for gRPC.
  if (tokens == nullptr && !CheckListenAddress(listen, false, insecure).ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, " ", listen,
                     " is not a loopback address and authentication is off: "
                     "give --tokens_file (docs/security.md), or --insecure"));
  }
  HttpServerOptions options;
  options.listen = listen;
  options.cert_pem = cert_pem;
  options.key_pem = key_pem;
  options.tokens = tokens;
  return options;
}

}  // namespace aqueduct
