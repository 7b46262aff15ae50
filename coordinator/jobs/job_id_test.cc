#include "coordinator/jobs/job_id.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(JobIdTest, ReadablePrefixAndSixtyFourRandomBits) {
  auto id = NewJobId("65f0a1b2", 7);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string prefix = "job-65f0a1b2-7-";
  ASSERT_EQ(id->rfind(prefix, 0), 0u) << *id;
  const std::string random = id->substr(prefix.size());
  EXPECT_EQ(random.size(), 16u);
  EXPECT_EQ(random.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(JobIdNumber(*id, "65f0a1b2"), 7);
}

TEST(JobIdTest, IdsDoNotRepeatAndDifferInTheirRandomPart) {
  std::set<std::string> ids, randoms;
  for (int i = 0; i < 1000; ++i) {
    auto id = NewJobId("1", 1);  // Same prefix: only randomness differs.
    ASSERT_TRUE(id.ok());
    ids.insert(*id);
  }
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(JobIdTest, NumbersOfOlderIdsAndOtherRuns) {
  EXPECT_EQ(JobIdNumber("job-65f0a1b2-12", "65f0a1b2"), 12);  // Old form.
  EXPECT_EQ(JobIdNumber("job-65f0a1b2-12-0123456789abcdef", "65f0a1b2"), 12);
  EXPECT_EQ(JobIdNumber("job-65f0a1b3-12-0123456789abcdef", "65f0a1b2"),
            std::nullopt);
  EXPECT_EQ(JobIdNumber("job-65f0a1b2-12-abc", "65f0a1b2"), std::nullopt);
  EXPECT_EQ(JobIdNumber("job-65f0a1b2-x", "65f0a1b2"), std::nullopt);
  EXPECT_EQ(JobIdNumber("job-nope", "65f0a1b2"), std::nullopt);
}

}  // namespace
}  // namespace aqueduct
