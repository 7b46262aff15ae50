#include "common/http_server.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_system.h"
#include "common/logging.h"

namespace aqueduct {
namespace {

constexpr char kCookie[] = "aq_token";
// Every route is a GET: a request body has no use, so keep it tiny.
constexpr size_t kMaxPayloadBytes = 4096;
// Requests one connection may make before the server closes it, so that a
// client cannot hold one of the few threads for ever.
constexpr size_t kKeepAliveMaxCount = 20;

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

// Loads a PEM certificate chain and its key into `ctx`; the error names
// what was wrong.
absl::Status ConfigureTls(SSL_CTX* ctx, const std::string& cert_pem,
                          const std::string& key_pem) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION);
  ERR_clear_error();
  BIO* bio =
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* leaf = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  bool ok = leaf != nullptr && SSL_CTX_use_certificate(ctx, leaf) == 1;
  X509_free(leaf);
  // The rest of the chain (intermediates), if any.
  while (ok) {
    X509* extra = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    if (extra == nullptr) break;
    if (SSL_CTX_add_extra_chain_cert(ctx, extra) != 1) {
      X509_free(extra);
      ok = false;
    }
  }
  BIO_free(bio);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTPS certificate (cert_file/cert_pem): ", SslErrors()));
  }
  ERR_clear_error();
  bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1 &&
       SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(key);
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

// The token a request presents, and whether it came in the URL.
std::string PresentedToken(const httplib::Request& req, bool* from_url) {
  *from_url = false;
  if (req.has_header("Authorization")) {
    return std::string(BearerToken(req.get_header_value("Authorization")));
  }
  if (req.has_param("token")) {
    *from_url = true;
    return req.get_param_value("token");
  }
  for (size_t i = 0; i < req.get_header_value_count("Cookie"); ++i) {
    for (absl::string_view part :
         absl::StrSplit(req.get_header_value("Cookie", i), ';')) {
      part = absl::StripAsciiWhitespace(part);
      if (absl::ConsumePrefix(&part, kCookie) &&
          absl::ConsumePrefix(&part, "=")) {
        return std::string(part);
      }
    }
  }
  return "";
}

// Checks the request's token; fills `res` with a 401 and returns false if
// it is missing or unknown. A good token from the URL sets the cookie.
bool Authorize(const TokenTable& tokens, bool https,
               const httplib::Request& req, httplib::Response& res) {
  bool from_url = false;
  const std::string token = PresentedToken(req, &from_url);
  const char* reason = nullptr;
  if (token.empty()) {
    reason =
        "missing token: send 'Authorization: Bearer <token>' or open "
        "?token=<token> once\n";
  } else if (!tokens.Find(token).has_value()) {
    reason = "unknown token\n";
  }
  if (reason != nullptr) {
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(reason, "text/plain; charset=utf-8");
    return false;
  }
  if (from_url) {
    res.set_header(
        "Set-Cookie",
        absl::StrCat(kCookie, "=", token, "; Path=/; HttpOnly; SameSite=Strict",
                     https ? "; Secure" : ""));
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(
    HttpServerOptions options) {
  std::string host;
  int port = 0;
  if (!ParseListen(options.listen, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP listen address '", options.listen, "' is not host:port"));
  }
  if (options.threads < 1 || options.timeout_seconds < 1) {
    return absl::InvalidArgumentError(
        "HTTP server needs threads >= 1 and timeout_seconds >= 1");
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
  std::unique_ptr<httplib::Server> server;
  if (options.cert_pem.empty()) {
    server = std::make_unique<httplib::Server>();
  } else {
    absl::Status tls;
    server = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
      tls = ConfigureTls(&ctx, options.cert_pem, options.key_pem);
      return tls.ok();
    });
    if (!tls.ok()) return tls;
    if (!server->is_valid()) {
      return absl::InternalError("HTTPS: cannot create an OpenSSL context");
    }
  }
  return std::unique_ptr<HttpServer>(
      new HttpServer(std::move(options), host, port, std::move(server)));
}

HttpServer::HttpServer(HttpServerOptions options, std::string host, int port,
                       std::unique_ptr<httplib::Server> server)
    : options_(std::move(options)),
      host_(std::move(host)),
      requested_port_(port),
      server_(std::move(server)) {}

const char* HttpServer::scheme() const {
  return options_.cert_pem.empty() ? "http" : "https";
}

void HttpServer::Handle(const std::string& path, HttpHandler handler) {
  handlers_[path] = std::move(handler);
}

// Bounds the server and routes every GET through the token check and the
// exact-path table (cpp-httplib matches regular expressions; paths here are
// plain strings).
void HttpServer::Install() {
  const int threads = options_.threads;
  server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  server_->set_read_timeout(options_.timeout_seconds, 0);
  server_->set_write_timeout(options_.timeout_seconds, 0);
  server_->set_keep_alive_timeout(options_.timeout_seconds);
  server_->set_keep_alive_max_count(kKeepAliveMaxCount);
  server_->set_payload_max_length(kMaxPayloadBytes);
  // cpp-httplib's default also sets SO_REUSEPORT, which lets a second
  // daemon bind the same port and steal half the scrapes: REUSEADDR only.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const bool https = !options_.cert_pem.empty();
  server_->set_pre_routing_handler(
      [this, https](const httplib::Request& req, httplib::Response& res) {
        if (options_.tokens != nullptr &&
            !Authorize(*options_.tokens, https, req, res)) {
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  server_->Get(".*", [this](const httplib::Request& req,
                            httplib::Response& res) {
    auto it = handlers_.find(req.path);
    if (it == handlers_.end()) {
      res.status = 404;
      res.set_content(absl::StrCat("no page at ", req.path, "\n"),
                      "text/plain; charset=utf-8");
      return;
    }
    HttpRequest request;
    request.path = req.path;
    for (const auto& [name, value] : req.params) {
      if (name != "token") request.params.emplace(name, value);
    }
    HttpResponse response = it->second(request);
    res.status = response.status;
    res.set_content(std::move(response.body), response.content_type.c_str());
  });
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        res.set_content("internal error\n", "text/plain; charset=utf-8");
      });
}

absl::Status HttpServer::Start() {
  if (port_ != 0) return absl::FailedPreconditionError("already started");
  Install();
  const std::string address = options_.listen;
  if (requested_port_ == 0) {
    port_ = server_->bind_to_any_port(host_);
  } else if (server_->bind_to_port(host_, requested_port_)) {
    port_ = requested_port_;
  }
  if (port_ <= 0) {
    port_ = 0;
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", address,
                     " (in use, or not an address of this host)"));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() only takes effect once the accept loop runs: wait for it, so
  // that the destructor never races it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!server_->is_running() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!server_->is_running()) {
    return absl::InternalError(
        absl::StrCat("HTTP server on ", address, " did not start in 10 s"));
  }
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

HttpServer::~HttpServer() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace aqueduct
