#include "coordinator/input_checks.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(InputChecksTest, QuotedCutsAndEscapes) {
  EXPECT_EQ(Quoted("w1"), "'w1'");
  EXPECT_EQ(Quoted("a\nb"), "'a\\nb'");
  const std::string huge(4096, 'x');
  EXPECT_EQ(Quoted(huge), "'" + std::string(64, 'x') + "...' (4096 bytes)");
}

TEST(InputChecksTest, ShownNamesAreQuotedOnlyWhenOdd) {
  EXPECT_EQ(Shown("w1"), "w1");
  EXPECT_EQ(Shown("w 1"), "'w 1'");
  EXPECT_EQ(Shown(""), "''");
  EXPECT_EQ(Shown(std::string(200, 'w')).size(), 64u + 17u);
}

TEST(InputChecksTest, Names) {
  EXPECT_TRUE(CheckName("worker_id", "host-1.example:gpu0@rack_2", 128).ok());
  EXPECT_EQ(CheckName("worker_id", "", 128).message(), "worker_id is empty");
  const absl::Status long_id =
      CheckName("worker_id", std::string(4096, 'w'), 128);
  EXPECT_EQ(long_id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(long_id.message(), "worker_id has 4096 bytes; the limit is 128 ('" +
                                   std::string(64, 'w') + "...' (4096 bytes))");
  EXPECT_EQ(CheckName("worker_id", "a/b", 128).message(),
            "worker_id='a/b' may hold only letters, digits and . _ : @ -");
  EXPECT_FALSE(CheckName("worker_id", "a b", 128).ok());
  EXPECT_FALSE(CheckName("worker_id", std::string("a\0b", 3), 128).ok());
}

TEST(InputChecksTest, Text) {
  EXPECT_TRUE(CheckText("info.device.name", "", 256).ok());
  EXPECT_TRUE(
      CheckText("info.device.name", "cpu (OpenBLAS 2 threads) é", 256).ok());
  EXPECT_EQ(CheckText("info.host", std::string(257, 'h'), 256).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckText("info.host", "a\nINFO forged", 256).message(),
            "info.host='a\\nINFO forged' holds a control character");
}

TEST(InputChecksTest, Addresses) {
  for (const char* good : {"127.0.0.1:7071", "worker-3.example.com:1",
                           "[::1]:65535", "[fe80::1%eth0]:7071", "h_1:80"}) {
    EXPECT_TRUE(CheckAddress("info.address", good).ok()) << good;
  }
  for (const char* bad :
       {"", "host", ":80", "host:", "host:0", "host:65536", "host:+80",
        "host:8o", "ho st:80", "[::1:80", "[]:80", "host:123456", "a/b:80"}) {
    const absl::Status s = CheckAddress("info.address", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().rfind("info.address", 0), 0u) << s.message();
  }
  EXPECT_EQ(CheckAddress("info.address", "h:0").message(),
            "info.address='h:0' is not host:port: the port must be in 1-65535");
  const absl::Status huge =
      CheckAddress("info.address", std::string(4096, 'a') + ":1");
  EXPECT_NE(huge.message().find("the limit is 255"), std::string::npos);
}

TEST(InputChecksTest, Numbers) {
  EXPECT_TRUE(CheckInt("step", 3000, 0, 3000).ok());
  EXPECT_EQ(
      CheckInt("stages[0].committed_version",
               std::numeric_limits<int64_t>::max(), 0, 3000,
               "the job's total steps")
          .message(),
      "stages[0].committed_version=9223372036854775807 is outside [0, 3000] "
      "(the job's total steps)");
  EXPECT_FALSE(CheckInt("count", -1, 0, 10).ok());
  EXPECT_TRUE(CheckFinite("utilization", 1, 0, 1).ok());
  EXPECT_EQ(CheckFinite("stages[0].utilization",
                        -std::numeric_limits<double>::infinity(), 0, 1)
                .message(),
            "stages[0].utilization=-inf is not a finite number in [0, 1]");
  EXPECT_FALSE(CheckFinite("u", std::nan(""), 0, 1).ok());
  EXPECT_FALSE(CheckFinite("u", 1.5, 0, 1).ok());
}

}  // namespace
}  // namespace aqueduct
