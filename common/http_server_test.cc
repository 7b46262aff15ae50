// HttpServer over real loopback sockets, with cpp-httplib's client: routes,
// 404, query parameters, the token check (header, URL, cookie), HTTPS with a
// certificate made here, and bind errors.
#include "common/http_server.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

constexpr char kToken[] = "0123456789abcdef0123456789abcdef01234567";

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
}

TEST(HttpServerTest, RefusesLargeBodies) {
  std::unique_ptr<HttpServer> server = StartServer({});
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  httplib::Result r =
      client.Post("/hello", std::string(1 << 20, 'x'), "text/plain");
  // Either a 413 or the connection closed on the oversized body.
  if (r) EXPECT_EQ(r->status, 413);
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
