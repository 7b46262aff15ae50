#include "client/list_pages.h"

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/control.pb.h"

namespace aqueduct {
namespace {

// A coordinator's jobs `ids`, served `page` at a time with the index of
// the next as the token; counts the calls.
struct FakeJobs {
  std::vector<std::string> ids;
  int calls = 0;
  absl::StatusOr<v1::ListJobsResponse> operator()(
      const v1::ListJobsRequest& request) {
    ++calls;
    EXPECT_EQ(request.page_size(), 3);
    const size_t from =
        request.page_token().empty() ? 0 : std::stoul(request.page_token());
    v1::ListJobsResponse response;
    size_t i = from;
    for (; i < ids.size() && i < from + 3; ++i) {
      response.add_jobs()->set_job_id(ids[i]);
    }
    if (i < ids.size()) response.set_next_page_token(std::to_string(i));
    return response;
  }
};

std::vector<std::string> Ids(const v1::ListJobsResponse& response) {
  std::vector<std::string> ids;
  for (const v1::JobStatus& j : response.jobs()) ids.push_back(j.job_id());
  return ids;
}

TEST(ListPagesTest, EveryPageMergedIntoOneResponse) {
  FakeJobs fake;
  for (int i = 0; i < 8; ++i) fake.ids.push_back("job-" + std::to_string(i));
  std::ostringstream warnings;
  auto all = FetchAllPages<v1::ListJobsRequest, v1::ListJobsResponse>(
      v1::ListJobsRequest(), 3, "jobs", std::ref(fake), warnings);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(Ids(*all), fake.ids);
  EXPECT_EQ(all->next_page_token(), "");
  EXPECT_EQ(fake.calls, 3);
  EXPECT_EQ(warnings.str(), "");
}

TEST(ListPagesTest, AnErrorOnAnyPageIsReturned) {
  int calls = 0;
  std::ostringstream warnings;
  auto failed = FetchAllPages<v1::ListJobsRequest, v1::ListJobsResponse>(
      v1::ListJobsRequest(), 3, "jobs",
      [&](const v1::ListJobsRequest&) -> absl::StatusOr<v1::ListJobsResponse> {
        if (++calls == 2) return absl::UnavailableError("gone");
        v1::ListJobsResponse r;
        r.add_jobs()->set_job_id("a");
        r.set_next_page_token("t");
        return r;
      },
      warnings);
  EXPECT_EQ(failed.status(), absl::UnavailableError("gone"));
}

TEST(ListPagesTest, ACoordinatorThatNeverEndsIsCutOff) {
  int calls = 0;
  std::ostringstream warnings;
  // Always a new token.
  auto endless = FetchAllPages<v1::ListJobsRequest, v1::ListJobsResponse>(
      v1::ListJobsRequest(), 3, "jobs",
      [&](const v1::ListJobsRequest&) -> absl::StatusOr<v1::ListJobsResponse> {
        v1::ListJobsResponse r;
        r.add_jobs()->set_job_id("a");
        r.set_next_page_token(std::to_string(++calls));
        return r;
      },
      warnings);
  ASSERT_TRUE(endless.ok());
  EXPECT_EQ(calls, kMaxListPages);
  EXPECT_EQ(endless->jobs_size(), kMaxListPages);
  EXPECT_EQ(warnings.str(),
            "aq: showing the first 1000 pages of jobs; the coordinator has "
            "more\n");
  // A token sent before ends the listing at once.
  calls = 0;
  warnings.str("");
  auto cycle = FetchAllPages<v1::ListJobsRequest, v1::ListJobsResponse>(
      v1::ListJobsRequest(), 3, "jobs",
      [&](const v1::ListJobsRequest&) -> absl::StatusOr<v1::ListJobsResponse> {
        v1::ListJobsResponse r;
        r.add_jobs()->set_job_id("a");
        r.set_next_page_token(++calls % 2 ? "x" : "y");
        return r;
      },
      warnings);
  EXPECT_EQ(calls, 3);
  EXPECT_NE(warnings.str().find("sent the same page of jobs again"),
            std::string::npos);
}

}  // namespace
}  // namespace aqueduct
