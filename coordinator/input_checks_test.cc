#include "coordinator/input_checks.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/escaping.h"
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
  // Issue 22, item 11: C1 controls and bytes that are not UTF-8 too.
  EXPECT_EQ(CheckText("info.host",
                      "a\xc2\x9b"
                      "2J",
                      256)
                .message(),
            "info.host='a\\xc2\\x9b\\x32J' holds a control character");
  EXPECT_EQ(CheckText("info.host", "a\xff", 256).message(),
            "info.host='a\\xff' is not valid UTF-8");
  EXPECT_FALSE(CheckText("info.host", "a\tb", 256).ok());
}

// Issue 22, item 11: what a terminal acts on, found and made visible.
TEST(InputChecksTest, FindControlFindsWhatATerminalActsOn) {
  constexpr size_t npos = absl::string_view::npos;
  EXPECT_EQ(FindControl("", false), npos);
  EXPECT_EQ(FindControl("plain ASCII ~!", false), npos);
  EXPECT_EQ(FindControl("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", false),
            npos);  // é, €, an emoji.
  EXPECT_EQ(FindControl("a\tb", true), npos);
  EXPECT_EQ(FindControl("a\tb", false), 1u);
  EXPECT_EQ(FindControl(std::string("ab\0c", 4), true), 2u);
  EXPECT_EQ(FindControl("x\x1b[2J", true), 1u);
  EXPECT_EQ(FindControl("x\r\n", true), 1u);
  EXPECT_EQ(FindControl("xy\x7f", true), 2u);
  EXPECT_EQ(FindControl("x\xc2\x85", true), 1u);    // U+0085, C1 NEL.
  EXPECT_EQ(FindControl("x\xc2\xa0", true), npos);  // U+00A0 is not C1.
  for (const char* bad :
       {"x\x80", "x\xc2", "x\xc0\xaf", "x\xe0\x80\xaf", "x\xed\xa0\x80",
        "x\xf4\x90\x80\x80", "x\xff", "x\xe2\x82"}) {
    EXPECT_EQ(FindControl(bad, true), 1u) << absl::CHexEscape(bad);
  }
}

TEST(InputChecksTest, EscapeControlsShowsEachByteAsHex) {
  EXPECT_EQ(EscapeControls("step 3\tloss 0.5 caf\xc3\xa9"),
            "step 3\tloss 0.5 caf\xc3\xa9");
  EXPECT_EQ(EscapeControls("\x1b[2J\x1b]0;owned\x07"),
            "\\x1b[2J\\x1b]0;owned\\x07");
  EXPECT_EQ(EscapeControls("a\r\nINFO forged"), "a\\x0d\\x0aINFO forged");
  EXPECT_EQ(EscapeControls(std::string("nul\0", 4)), "nul\\x00");
  EXPECT_EQ(EscapeControls("del\x7f c1\xc2\x9b bad\xff\xc2"),
            "del\\x7f c1\\xc2\\x9b bad\\xff\\xc2");
  // Nothing a terminal acts on is left.
  const std::string escaped = EscapeControls("\x1b\x9b\xc2\x9b\r\n\x07");
  EXPECT_EQ(FindControl(escaped, true), absl::string_view::npos) << escaped;
  // Cut before the character or escape that would pass the limit.
  EXPECT_EQ(EscapeControls("ab\x1b", 5), "ab");
  EXPECT_EQ(EscapeControls("ab\x1b", 6), "ab\\x1b");
  EXPECT_EQ(EscapeControls("a\xe2\x82\xac", 3), "a");
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
