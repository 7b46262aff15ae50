#include "coordinator/jobs/queue.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

constexpr absl::Duration kReserveAfter = absl::Minutes(5);

QueuedJob Job(int least, int wanted, absl::Duration waited) {
  QueuedJob j;
  j.least = least;
  j.wanted = wanted;
  j.waited = waited;
  return j;
}

QueuedJob New(int workers) { return Job(workers, workers, absl::Seconds(1)); }

QueuedJob Old(int workers) { return Job(workers, workers, kReserveAfter); }

struct Case {
  std::string what;
  std::vector<QueuedJob> queue;
  int idle;
  int live;
  std::vector<int> placed;
};

TEST(QueueTest, PlacementTable) {
  const std::vector<Case> cases = {
      {"nothing pending", {}, 4, 4, {}},
      {"no idle worker", {New(1), New(1)}, 0, 4, {0, 0}},
      {"first in, first placed", {New(2), New(2), New(1)}, 4, 4, {2, 2, 0}},
      {"backfill: a job that cannot start does not block later ones",
       {New(8), New(1), New(2)},
       4,
       4,
       {0, 1, 2}},
      {"100,000 workers asked of 4: skipped even after a long wait",
       {Job(100000, 100000, absl::Hours(1)), New(1)},
       4,
       4,
       {0, 1}},
      {"a starving job that fits the cluster holds the idle workers it "
       "needs",
       {Old(3), New(1), New(1)},
       2,
       4,
       {0, 0, 0}},
      {"later jobs use the idle workers beyond a hold",
       {Old(3), New(1), New(2)},
       5,
       8,
       {3, 1, 0}},
      {"beyond the hold, not into it",
       {Old(6), New(1), New(2)},
       4,
       8,
       {0, 0, 0}},
      {"holds add up in submission order",
       {Old(3), Old(3), New(1)},
       4,
       8,
       {3, 0, 0}},
      {"a young big job holds nothing", {New(6), New(1)}, 4, 8, {0, 1}},
      {"a restarted job starts on fewer workers",
       {Job(1, 4, absl::Seconds(1)), New(1)},
       3,
       4,
       {3, 0}},
      {"each takes what it wants at most",
       {Job(1, 2, absl::Seconds(1)), New(1)},
       5,
       5,
       {2, 1}},
      {"a hold counts only what the job needs to start",
       {Job(2, 4, kReserveAfter), New(1)},
       3,
       4,
       {3, 0}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(PlaceQueuedJobs(c.queue, c.idle, c.live, kReserveAfter), c.placed)
        << c.what;
  }
}

// A stream of 1-worker jobs cannot keep a 4-worker job from starting once
// it has waited reserve_after: workers that free up go to it.
TEST(QueueTest, ABigJobIsNotStarvedBySmallOnes) {
  std::vector<QueuedJob> queue = {New(4), New(1), New(1), New(1)};
  // 3 of 4 workers busy with earlier small jobs, 1 idle.
  EXPECT_EQ(PlaceQueuedJobs(queue, 1, 4, kReserveAfter),
            (std::vector<int>{0, 1, 0, 0}));
  queue[0].waited = kReserveAfter;
  for (int idle = 1; idle < 4; ++idle) {
    EXPECT_EQ(PlaceQueuedJobs(queue, idle, 4, kReserveAfter),
              (std::vector<int>{0, 0, 0, 0}))
        << idle << " idle";
  }
  EXPECT_EQ(PlaceQueuedJobs(queue, 4, 4, kReserveAfter),
            (std::vector<int>{4, 0, 0, 0}));
}

QueuedJob At(int priority, int workers, int64_t seq,
             absl::Duration waited = absl::Seconds(1)) {
  QueuedJob j = Job(workers, workers, waited);
  j.priority = priority;
  j.seq = seq;
  return j;
}

TEST(QueueTest, PriorityThenSubmissionOrder) {
  EXPECT_TRUE(QueueBefore(At(5, 1, 9), At(0, 1, 1)));
  EXPECT_TRUE(QueueBefore(At(0, 1, 1), At(0, 1, 2)));
  EXPECT_FALSE(QueueBefore(At(-1, 1, 1), At(0, 1, 2)));
}

// A waiting job holds its workers from lower priorities at once, from its
// own only after reserve_after.
TEST(QueueTest, HigherPrioritiesHoldAtOnce) {
  // 2 idle of 4: the priority-5 job needs 3 and waits.
  EXPECT_EQ(PlaceQueuedJobs({At(5, 3, 1), At(5, 1, 2), At(0, 1, 3)}, 2, 4,
                            kReserveAfter),
            (std::vector<int>{0, 1, 0}));
  // Its own priority backfills until it has waited reserve_after.
  EXPECT_EQ(PlaceQueuedJobs({At(5, 3, 1, kReserveAfter), At(5, 1, 2)}, 2, 4,
                            kReserveAfter),
            (std::vector<int>{0, 0}));
  // Beyond its hold, lower priorities start; a job the cluster cannot run
  // holds nothing.
  EXPECT_EQ(PlaceQueuedJobs({At(5, 3, 1), At(0, 1, 2)}, 4, 6, kReserveAfter),
            (std::vector<int>{3, 1}));
  EXPECT_EQ(PlaceQueuedJobs({At(5, 9, 1), At(0, 1, 2)}, 2, 4, kReserveAfter),
            (std::vector<int>{0, 1}));
}

TEST(QueueTest, AdmissionLimits) {
  QueueLimits limits;
  limits.max_pending = 3;
  limits.max_per_user = 2;
  EXPECT_TRUE(AdmitJob(limits, 2, 1, "alice").ok());
  const absl::Status full = AdmitJob(limits, 3, 0, "alice");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(),
            "the queue is full: 3 jobs are pending, the most the coordinator "
            "accepts (--max_pending_jobs); submit again once some have "
            "started");
  const absl::Status mine = AdmitJob(limits, 0, 2, "alice");
  EXPECT_EQ(mine.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(mine.message(),
            "user 'alice' has 2 unfinished jobs, the most one user may have "
            "(--max_jobs_per_user); submit again once some have finished or "
            "cancel some");
  EXPECT_NE(AdmitJob(limits, 0, 2, "")
                .message()
                .find("unauthenticated callers have 2 unfinished jobs"),
            std::string::npos);
}

}  // namespace
}  // namespace aqueduct
