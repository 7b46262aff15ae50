// Remote::Failed: what aq says, and its exit code, for a failed call.
#include "client/remote.h"

#include <iostream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "client/cli.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// Runs remote.Failed(status) with std::cerr captured.
std::string FailedText(const absl::Status& status, int* code) {
  Remote remote("127.0.0.1:4242", nullptr);  // Failed() never calls it.
  std::ostringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  *code = remote.Failed(status);
  std::cerr.rdbuf(old);
  return captured.str();
}

TEST(RemoteFailedTest, UnimplementedSaysWhatTheAddressMayBe) {
  // What gRPC answers for a method the server lacks: no message at all.
  int code = 0;
  const std::string text = FailedText(absl::UnimplementedError(""), &code);
  EXPECT_EQ(code, kExitFailed);
  EXPECT_NE(
      text.find("127.0.0.1:4242 does not serve this call (UNIMPLEMENTED)"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("--health_listen"), std::string::npos) << text;
}

TEST(RemoteFailedTest, AnEmptyMessageNamesTheCode) {
  int code = 0;
  EXPECT_EQ(FailedText(absl::InternalError(""), &code), "aq: INTERNAL\n");
  EXPECT_EQ(code, kExitFailed);
  EXPECT_EQ(FailedText(absl::NotFoundError("job 'x' does not exist"), &code),
            "aq: job 'x' does not exist\n");
}

TEST(RemoteFailedTest, UnreachableExitsThree) {
  int code = 0;
  const std::string text =
      FailedText(absl::UnavailableError("connection refused"), &code);
  EXPECT_EQ(code, kExitUnreachable);
  EXPECT_NE(text.find("cannot reach the coordinator at 127.0.0.1:4242"),
            std::string::npos)
      << text;
}

// A TLS mismatch is named: a plaintext client closed on at once, a TLS
// client whose handshake failed; other failures get no hint.
TEST(RemoteTest, ATlsMismatchIsNamed) {
  const absl::Status closed = absl::UnavailableError(
      "failed to connect to all addresses; last error: UNAVAILABLE: "
      "ipv4:127.0.0.1:7070: Socket closed");
  EXPECT_NE(TlsMismatchHint(closed, false).find("speaks TLS"),
            std::string::npos);
  EXPECT_EQ(TlsMismatchHint(closed, true), "");
  const absl::Status handshake =
      absl::UnavailableError("Ssl handshake failed: SSL_ERROR_SSL");
  EXPECT_NE(TlsMismatchHint(handshake, true).find("TLS handshake failed"),
            std::string::npos);
  EXPECT_EQ(
      TlsMismatchHint(absl::UnavailableError("Connection refused"), false), "");
}

}  // namespace
}  // namespace aqueduct
