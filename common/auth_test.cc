#include "common/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

const std::string kAlice(40, 'a');
const std::string kWorker(40, 'w');

TEST(TokenTableTest, FindsEachTokensPrincipal) {
  absl::StatusOr<TokenTable> table =
      TokenTable::Parse("# comment\n\n" + kAlice + " user alice\n" + kWorker +
                            "\tworker   node-1:0\n",
                        "tokens");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 2);
  std::optional<Principal> alice = table->Find(kAlice);
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->role, Role::kUser);
  EXPECT_EQ(alice->name, "alice");
  std::optional<Principal> worker = table->Find(kWorker);
  ASSERT_TRUE(worker.has_value());
  EXPECT_EQ(worker->role, Role::kWorker);
  EXPECT_EQ(worker->name, "node-1:0");
  EXPECT_FALSE(table->Find(kAlice + "x").has_value());
  EXPECT_FALSE(table->Find(kAlice.substr(1)).has_value());
  EXPECT_FALSE(table->Find("").has_value());
}

TEST(TokenTableTest, RefusesBadLinesNamingTheLineWithoutTheToken) {
  auto short_token = TokenTable::Parse("abc user alice\n", "f");
  EXPECT_EQ(short_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_token.status().message().find("f:1"), std::string::npos);
  auto bad_role = TokenTable::Parse("\n" + kAlice + " root root\n", "f");
  EXPECT_NE(bad_role.status().message().find("f:2"), std::string::npos);
  EXPECT_NE(bad_role.status().message().find("is not user, admin or worker"),
            std::string::npos);
  auto admin = TokenTable::Parse(kAlice + " admin ops\n", "f");
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(admin->Find(kAlice)->role, Role::kAdmin);
  EXPECT_STREQ(RoleName(Role::kAdmin), "admin");
  EXPECT_EQ(bad_role.status().message().find(kAlice), std::string::npos);
  EXPECT_FALSE(TokenTable::Parse(kAlice + " user\n", "f").ok());
  EXPECT_FALSE(
      TokenTable::Parse(kAlice + " user a\n" + kAlice + " user b\n", "f").ok());
  EXPECT_FALSE(TokenTable::Parse("# nothing\n", "f").ok());
}

TEST(TokenTableTest, LoadRefusesAFileOthersMayRead) {
  const std::string path =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
      "/tokens";
  { std::ofstream(path) << kAlice << " user alice\n"; }
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  absl::StatusOr<TokenTable> open = TokenTable::Load(path);
  EXPECT_EQ(open.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos);
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  EXPECT_TRUE(TokenTable::Load(path).ok());
  EXPECT_FALSE(TokenTable::Load(path + ".missing").ok());
  EXPECT_FALSE(TokenTable::Load("/dev/null").ok());
}

TEST(AuthTest, BearerTokenAndRandomTokens) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  absl::StatusOr<std::string> a = NewRandomToken();
  absl::StatusOr<std::string> b = NewRandomToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
  EXPECT_TRUE(ConstantTimeEquals(*a, *a));
  EXPECT_FALSE(ConstantTimeEquals(*a, *b));
  EXPECT_FALSE(ConstantTimeEquals(*a, a->substr(1)));
}

TEST(AuthTest, SecureRandomBytesFillsWhatItIsAskedFor) {
  auto a = SecureRandomBytes(32), b = SecureRandomBytes(32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(SecureRandomBytes(0)->size(), 0u);
}

TEST(AuthTest, PeerHost) {
  EXPECT_EQ(PeerHost("ipv4:10.1.2.3:4567"), "10.1.2.3");
  EXPECT_EQ(PeerHost("ipv6:[::1]:4567"), "::1");
  EXPECT_EQ(PeerHost("ipv6:[::ffff:10.0.0.1]:80"), "10.0.0.1");
  EXPECT_EQ(PeerHost("unix:/tmp/s"), "");
}

TEST(AuthTest, AdvertisedAddressMustBeThePeersOwn) {
  EXPECT_TRUE(CheckAdvertisedAddress("10.0.0.5:7000", "10.0.0.5", {}).ok());
  EXPECT_TRUE(CheckAdvertisedAddress("[::1]:7000", "::1", {}).ok());
  absl::Status other = CheckAdvertisedAddress("10.0.0.6:7000", "10.0.0.5", {});
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("10.0.0.5"), std::string::npos);
  // Host names are never resolved: only an operator's list admits them.
  EXPECT_FALSE(
      CheckAdvertisedAddress("made-up.example:1", "10.0.0.5", {}).ok());
  EXPECT_TRUE(CheckAdvertisedAddress("node-3:1", "10.0.0.5", {"node-3"}).ok());
  EXPECT_EQ(CheckAdvertisedAddress("nope", "10.0.0.5", {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAdvertisedAddress("10.0.0.5:0", "10.0.0.5", {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAdvertisedAddress("10.0.0.5:70000", "10.0.0.5", {}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AuthTest, NonLoopbackListenNeedsTlsOrInsecure) {
  EXPECT_TRUE(CheckListenAddress("127.0.0.1:0", false, false).ok());
  EXPECT_TRUE(CheckListenAddress("localhost:7070", false, false).ok());
  EXPECT_TRUE(CheckListenAddress("[::1]:7070", false, false).ok());
  absl::Status any = CheckListenAddress("0.0.0.0:7070", false, false);
  EXPECT_EQ(any.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(any.message().find("--insecure"), std::string::npos);
  EXPECT_TRUE(CheckListenAddress("0.0.0.0:7070", true, false).ok());
  EXPECT_TRUE(CheckListenAddress("0.0.0.0:7070", false, true).ok());
  EXPECT_FALSE(CheckListenAddress("10.0.0.1", false, true).ok());
}

}  // namespace
}  // namespace aqueduct
