// HttpServer over real loopback sockets, with cpp-httplib's client: routes,
// 404, query parameters, the token check (header, URL, cookie), HTTPS with a
// certificate made here, and bind errors; and, with raw sockets, hostile
// clients: request bodies and other methods, hundreds of slow connections,
// a header that trickles in, a header flood, too many connections from one
// address.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

constexpr char kToken[] = "0123456789abcdef0123456789abcdef01234567";

// A raw TCP connection to 127.0.0.1:`port` from address `source` (any
// 127.x.y.z: all of 127/8 is loopback), for what cpp-httplib's client will
// not do. Closes on destruction.
class RawConnection {
 public:
  RawConnection(int port, const char* source = "127.0.0.1") {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    inet_pton(AF_INET, source, &address.sin_addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
        0) {
      Close();
      return;
    }
    address.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
        0) {
      Close();
    }
  }
  ~RawConnection() { Close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return fd_ >= 0; }

  // Sends all of `data`; false if the peer closed or reset (no SIGPIPE).
  bool Send(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n =
          send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // Waits up to `timeout` for bytes or the end of the stream; appends what
  // arrives to `*received`. False once the peer closed or reset.
  bool ReadSome(absl::Duration timeout, std::string* received) {
    pollfd p{fd_, POLLIN, 0};
    const int ready =
        poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    if (ready <= 0) return true;  // nothing yet
    char buffer[16384];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n <= 0) return false;  // closed (0) or reset
    received->append(buffer, static_cast<size_t>(n));
    return true;
  }

  // What arrives until the peer closes, or until `timeout`; `*closed` says
  // which.
  std::string ReadUntilClosed(absl::Duration timeout, bool* closed) {
    std::string received;
    const absl::Time deadline = absl::Now() + timeout;
    *closed = false;
    while (!*closed && absl::Now() < deadline) {
      *closed = !ReadSome(absl::Milliseconds(50), &received);
    }
    return received;
  }

  // Reads one response whose body has a Content-Length; its status, or -1
  // if the connection closed or `timeout` passed first.
  int ReadResponse(absl::Duration timeout) {
    std::string received;
    const absl::Time deadline = absl::Now() + timeout;
    size_t header_end = std::string::npos;
    size_t length = 0;
    while (absl::Now() < deadline) {
      if (!ReadSome(absl::Milliseconds(50), &received)) return -1;
      if (header_end == std::string::npos) {
        header_end = received.find("\r\n\r\n");
        if (header_end == std::string::npos) continue;
        const size_t at = received.find("Content-Length: ");
        if (at == std::string::npos ||
            !absl::SimpleAtoi(
                received.substr(at + 16, received.find('\r', at) - at - 16),
                &length)) {
          return -1;
        }
      }
      if (received.size() >= header_end + 4 + length) {
        int status = -1;
        if (!absl::SimpleAtoi(received.substr(9, 3), &status)) return -1;
        return status;
      }
    }
    return -1;
  }

 private:
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

// This process's resident memory, in bytes (0 if unknown).
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(
                             absl::StripPrefix(line, "VmRSS:"), "kB")),
                         &kib)) {
      return kib << 10;
    }
  }
  return 0;
}

constexpr char kGetHello[] = "GET /hello HTTP/1.1\r\nHost: test\r\n\r\n";

std::unique_ptr<HttpServer> StartServer(HttpServerOptions options) {
  if (options.listen.empty()) options.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Create(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  (*server)->Handle("/hello", [](const HttpRequest& request) {
    HttpResponse response;
    response.body = "hello";
    for (const auto& [name, value] : request.params) {
      response.body += " " + name + "=" + value;
    }
    return response;
  });
  (*server)->Handle("/teapot", [](const HttpRequest&) {
    HttpResponse response;
    response.status = 418;
    response.content_type = "application/json";
    response.body = "{}";
    return response;
  });
  absl::Status started = (*server)->Start();
  EXPECT_TRUE(started.ok()) << started;
  return *std::move(server);
}

TEST(HttpServerTest, RoutesExactPathsAndQueryParameters) {
  std::unique_ptr<HttpServer> server = StartServer({});
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->port(), 0);
  EXPECT_STREQ(server->scheme(), "http");
  httplib::Client client("127.0.0.1", server->port());
  httplib::Result r = client.Get("/hello?b=2&a=x%20y");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello a=x y b=2");
  EXPECT_EQ(r->get_header_value("Content-Type"),
            "text/plain; version=0.0.4; charset=utf-8");
  r = client.Get("/teapot");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 418);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  r = client.Get("/hello/more");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = client.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = client.Head("/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "");
}

// Every route is a GET: a request announcing a body is answered 413 before
// the body is read, and the connection closed; other methods get 405.
TEST(HttpServerTest, RefusesBodiesAndOtherMethods) {
  std::unique_ptr<HttpServer> server = StartServer({});
  ASSERT_NE(server, nullptr);
  const std::string bodies[] = {
      "POST /hello HTTP/1.1\r\nHost: test\r\nContent-Length: 1048576\r\n\r\n",
      "GET /hello HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n",
  };
  for (const std::string& request : bodies) {
    RawConnection connection(server->port());
    ASSERT_TRUE(connection.ok());
    ASSERT_TRUE(connection.Send(request));
    bool closed = false;
    const std::string response =
        connection.ReadUntilClosed(absl::Seconds(10), &closed);
    EXPECT_TRUE(closed) << request;
    EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 413 ")) << response;
  }
  RawConnection connection(server->port());
  ASSERT_TRUE(connection.ok());
  ASSERT_TRUE(connection.Send("DELETE /hello HTTP/1.1\r\nHost: test\r\n\r\n"));
  EXPECT_EQ(connection.ReadResponse(absl::Seconds(10)), 405);
  // The connection goes on serving GETs.
  ASSERT_TRUE(connection.Send(kGetHello));
  EXPECT_EQ(connection.ReadResponse(absl::Seconds(10)), 200);
}

// Hundreds of connections holding half a request header hold no thread:
// another client is answered at once (cpp-httplib's 4 threads, each held
// for its 5 s read timeout, kept every page waiting for minutes).
TEST(HttpServerTest, SlowClientsDoNotStallOthers) {
  HttpServerOptions options;
  options.max_connections_per_ip = 1000;  // all from 127.0.0.1 here
  std::unique_ptr<HttpServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 300; ++i) {
    slow.push_back(std::make_unique<RawConnection>(server->port()));
    ASSERT_TRUE(slow.back()->ok()) << i;
    ASSERT_TRUE(slow.back()->Send("GET /hello HTTP/1.1\r\nHost: te")) << i;
  }
  httplib::Client client("127.0.0.1", server->port());
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(10, 0);
  const absl::Time start = absl::Now();
  httplib::Result r = client.Get("/hello");
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(r) << httplib::to_string(r.error()) << " after " << took;
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(took, absl::Seconds(3));
}

// A request line and headers must arrive within timeout_seconds however
// slowly they trickle (libmicrohttpd's own timeout is an idle one), and an
// idle connection is closed after it too.
TEST(HttpServerTest, SlowAndIdleConnectionsAreCut) {
  HttpServerOptions options;
  options.timeout_seconds = 1;
  std::unique_ptr<HttpServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  RawConnection idle(server->port());
  RawConnection trickle(server->port());
  ASSERT_TRUE(idle.ok());
  ASSERT_TRUE(trickle.ok());
  const absl::Time start = absl::Now();
  ASSERT_TRUE(trickle.Send("GET /hello HTTP/1.1\r\nX-Slow: "));
  bool trickle_open = true;
  std::string received;
  // A byte every 100 ms, until the server closes it (or 10 s pass).
  while (trickle_open && absl::Now() - start < absl::Seconds(10)) {
    trickle_open = trickle.ReadSome(absl::Milliseconds(100), &received) &&
                   trickle.Send("a");
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_FALSE(trickle_open) << "still open after " << took;
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(4));
  EXPECT_EQ(received, "");
  bool closed = false;
  idle.ReadUntilClosed(absl::Seconds(10), &closed);
  EXPECT_TRUE(closed);
  // A connection that keeps to the deadline is served.
  RawConnection prompt(server->port());
  ASSERT_TRUE(prompt.ok());
  ASSERT_TRUE(prompt.Send(kGetHello));
  EXPECT_EQ(prompt.ReadResponse(absl::Seconds(10)), 200);
}

// Endless headers are cut once they pass max_request_bytes (431, then
// closed), the server's memory does not follow the flood, and the server
// goes on serving.
TEST(HttpServerTest, HeaderFloodIsCutAtTheLimit) {
  HttpServerOptions options;
  options.max_request_bytes = 64 << 10;
  std::unique_ptr<HttpServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  const int64_t resident_before = ResidentBytes();
  RawConnection flood(server->port());
  ASSERT_TRUE(flood.ok());
  ASSERT_TRUE(flood.Send("GET /hello HTTP/1.1\r\nHost: test\r\n"));
  const std::string line = "X-Flood: " + std::string(1000, 'a') + "\r\n";
  constexpr int64_t kCap = int64_t{32} << 20;  // what it would send at most
  int64_t sent = 0;
  std::string response;
  bool open = true;
  while (open && sent < kCap) {
    open = flood.Send(line) && flood.ReadSome(absl::ZeroDuration(), &response);
    if (open) sent += static_cast<int64_t>(line.size());
  }
  // The flood stopped because the server cut it, after the limit plus what
  // the two sockets' buffers hold.
  EXPECT_LT(sent, kCap);
  EXPECT_GE(sent, options.max_request_bytes / 2);
  EXPECT_LT(sent, options.max_request_bytes + (int64_t{8} << 20));
  bool closed = false;
  response += flood.ReadUntilClosed(absl::Seconds(10), &closed);
  EXPECT_TRUE(closed);
  // The 431 may be lost to the reset that unread bytes cause.
  if (!response.empty()) {
    EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 431 ")) << response;
  }
  EXPECT_LT(ResidentBytes() - resident_before, int64_t{16} << 20);
  RawConnection after(server->port());
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(after.Send(kGetHello));
  EXPECT_EQ(after.ReadResponse(absl::Seconds(10)), 200);
}

// A client address holds at most max_connections_per_ip connections; more
// are closed on arrival, other addresses are served, and a freed slot is
// taken again.
TEST(HttpServerTest, LimitsConnectionsPerAddress) {
  HttpServerOptions options;
  options.max_connections_per_ip = 4;
  std::unique_ptr<HttpServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(
        std::make_unique<RawConnection>(server->port(), "127.0.0.2"));
    ASSERT_TRUE(held.back()->ok());
    ASSERT_TRUE(held.back()->Send(kGetHello));
    ASSERT_EQ(held.back()->ReadResponse(absl::Seconds(10)), 200) << i;
  }
  RawConnection fifth(server->port(), "127.0.0.2");
  ASSERT_TRUE(fifth.ok());
  fifth.Send(kGetHello);  // may already fail: the server closed it
  bool closed = false;
  EXPECT_EQ(fifth.ReadUntilClosed(absl::Seconds(10), &closed), "");
  EXPECT_TRUE(closed);
  RawConnection other(server->port(), "127.0.0.3");
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other.Send(kGetHello));
  EXPECT_EQ(other.ReadResponse(absl::Seconds(10)), 200);
  held.pop_back();
  // The server notices the close soon: retry until a new one is served.
  int status = -1;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (status != 200 && absl::Now() < deadline) {
    RawConnection again(server->port(), "127.0.0.2");
    ASSERT_TRUE(again.ok());
    if (again.Send(kGetHello)) status = again.ReadResponse(absl::Seconds(2));
  }
  EXPECT_EQ(status, 200);
}

TEST(HttpServerTest, TokensAreRequiredWhenGiven) {
  absl::StatusOr<TokenTable> tokens =
      TokenTable::Parse(std::string(kToken) + " user alice\n", "test");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  HttpServerOptions options;
  options.tokens = &*tokens;
  std::unique_ptr<HttpServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());

  httplib::Result r = client.Get("/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("missing token"), std::string::npos) << r->body;
  // No route is revealed without a token.
  r = client.Get("/nowhere");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);

  r = client.Get("/hello", {{"Authorization", "Bearer wrong-token"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("unknown token"), std::string::npos);

  r = client.Get("/hello",
                 {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Set-Cookie"));

  // The token in the URL is accepted once, kept from handlers, and turned
  // into an HttpOnly cookie; the cookie then suffices.
  r = client.Get(std::string("/hello?token=") + kToken + "&x=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello x=1");
  const std::string cookie = r->get_header_value("Set-Cookie");
  EXPECT_EQ(cookie, std::string("aq_token=") + kToken +
                        "; Path=/; HttpOnly; SameSite=Strict");
  r = client.Get("/hello",
                 {{"Cookie", std::string("other=1; aq_token=") + kToken}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = client.Get("/hello", {{"Cookie", "aq_token=nope"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = client.Get("/hello?token=nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

// A self-signed certificate for 127.0.0.1 and its key, as PEM.
void MakeCertificate(std::string* cert_pem, std::string* key_pem) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(
      name, "CN", MBSTRING_ASC,
      reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  ASSERT_GT(X509_sign(cert, key, EVP_sha256()), 0);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  cert_pem->assign(data, n);
  BIO_free(bio);
  bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  n = BIO_get_mem_data(bio, &data);
  key_pem->assign(data, n);
  BIO_free(bio);
  X509_free(cert);
  EVP_PKEY_free(key);
}

TEST(HttpServerTest, ServesHttpsWithTheGivenCertificate) {
  HttpServerOptions options;
  MakeCertificate(&options.cert_pem, &options.key_pem);
  ASSERT_FALSE(options.cert_pem.empty());
  std::unique_ptr<HttpServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  EXPECT_STREQ(server->scheme(), "https");

  httplib::SSLClient tls("127.0.0.1", server->port());
  tls.enable_server_certificate_verification(false);
  httplib::Result r = tls.Get("/hello");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");

  // Plain HTTP to the HTTPS port gets no page.
  httplib::Client plain("127.0.0.1", server->port());
  plain.set_read_timeout(2, 0);
  r = plain.Get("/hello");
  EXPECT_TRUE(!r || r->status != 200);
}

TEST(HttpServerTest, BadOptionsNameTheField) {
  HttpServerOptions options;
  options.listen = "no-port";
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Create(options);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("no-port"), std::string::npos);

  options.listen = "127.0.0.1:0";
  options.cert_file = "/nonexistent/cert.pem";
  options.key_file = "/nonexistent/key.pem";
  server = HttpServer::Create(options);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("cert_file"), std::string::npos)
      << server.status();

  options.cert_file.clear();
  options.key_file.clear();
  options.cert_pem = "not a certificate";
  options.key_pem = "not a key";
  server = HttpServer::Create(options);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("certificate"), std::string::npos)
      << server.status();
}

TEST(HttpServerTest, BindErrorNamesTheAddress) {
  std::unique_ptr<HttpServer> first = StartServer({});
  ASSERT_NE(first, nullptr);
  HttpServerOptions options;
  options.listen = "127.0.0.1:" + std::to_string(first->port());
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Create(options);
  ASSERT_TRUE(second.ok());
  absl::Status s = (*second)->Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(options.listen), std::string::npos) << s;
  EXPECT_EQ((*second)->port(), 0);

  // An address that is not this host's.
  options.listen = "192.0.2.1:0";
  second = HttpServer::Create(options);
  ASSERT_TRUE(second.ok());
  s = (*second)->Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("192.0.2.1"), std::string::npos) << s;
}

TEST(HttpServerTest, StopsWhileIdleAndAfterServing) {
  for (int i = 0; i < 20; ++i) {
    std::unique_ptr<HttpServer> server = StartServer({});
    ASSERT_NE(server, nullptr);
    if (i % 2 == 0) {
      httplib::Client client("127.0.0.1", server->port());
      ASSERT_TRUE(client.Get("/hello"));
    }
  }
}

TEST(DaemonHttpOptionsTest, AppliesTheListenRule) {
  absl::StatusOr<TokenTable> tokens =
      TokenTable::Parse(std::string(kToken) + " user alice\n", "test");
  ASSERT_TRUE(tokens.ok());
  // Loopback: anything goes.
  EXPECT_TRUE(
      DaemonHttpOptions("--http_listen", "127.0.0.1:0", "", "", nullptr, false)
          .ok());
  // Elsewhere: TLS and tokens, or --insecure.
  absl::StatusOr<HttpServerOptions> o =
      DaemonHttpOptions("--http_listen", "0.0.0.0:0", "", "", &*tokens, false);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--http_listen"), std::string::npos)
      << o.status();
  o = DaemonHttpOptions("--http_listen", "0.0.0.0:0", "C", "K", nullptr, false);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--tokens_file"), std::string::npos);
  o = DaemonHttpOptions("--http_listen", "0.0.0.0:0", "C", "K", &*tokens,
                        false);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cert_pem, "C");
  EXPECT_EQ(o->tokens, &*tokens);
  EXPECT_TRUE(
      DaemonHttpOptions("--http_listen", "0.0.0.0:0", "", "", nullptr, true)
          .ok());
}

}  // namespace
}  // namespace aqueduct
