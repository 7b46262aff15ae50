#include "coordinator/jobs/pages.h"

#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(PagesTest, PageSizes) {
  EXPECT_EQ(*PageSize(0, 100, 1000, "page_size"), 100);
  EXPECT_EQ(*PageSize(1, 100, 1000, "page_size"), 1);
  EXPECT_EQ(*PageSize(1000, 100, 1000, "page_size"), 1000);
  EXPECT_EQ(*PageSize(1001, 100, 1000, "page_size"), 1000);
  EXPECT_EQ(*PageSize(int64_t{1} << 40, 100, 1000, "page_size"), 1000);
  const auto negative = PageSize(-1, 100, 1000, "ListJobsRequest.page_size");
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.status().message(),
            "ListJobsRequest.page_size=-1 must not be negative");
}

TEST(PagesTest, TokensRoundTripWithinARun) {
  EXPECT_EQ(*DecodePageToken("", 42, "page_token"), -1);
  for (int64_t position : {int64_t{0}, int64_t{1}, int64_t{1} << 50}) {
    const std::string token = EncodePageToken(0xfeedfacecafebeef, position);
    EXPECT_EQ(*DecodePageToken(token, 0xfeedfacecafebeef, "page_token"),
              position);
  }
}

TEST(PagesTest, ForeignAndMalformedTokensAreRefusedNamingTheField) {
  const std::string token = EncodePageToken(1, 5);
  const auto other_run = DecodePageToken(token, 2, "page_token");
  EXPECT_EQ(other_run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other_run.status().message().find(
                "page_token was issued before the coordinator restarted"),
            std::string::npos);
  for (const std::string& bad :
       {std::string("job-1"), std::string("!!"), std::string(300, 'A'),
        EncodePageToken(1, 5) + "x", std::string("cDE6MTotNQ")}) {
    const auto s = DecodePageToken(bad, 1, "page_token");
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.status().message().rfind("page_token ", 0), 0u) << bad;
  }
}

}  // namespace
}  // namespace aqueduct
