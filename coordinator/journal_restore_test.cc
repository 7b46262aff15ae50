#include "coordinator/journal_restore.h"

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

v1::JournalRecord Submitted(const std::string& id) {
  v1::JournalRecord r;
  r.mutable_submitted()->set_job_id(id);
  return r;
}
v1::JournalRecord Started(const std::string& id, int attempt) {
  v1::JournalRecord r;
  r.mutable_started()->set_job_id(id);
  r.mutable_started()->set_attempt(attempt);
  return r;
}
v1::JournalRecord Finished(const std::string& id, v1::JobState state) {
  v1::JournalRecord r;
  r.mutable_finished()->set_job_id(id);
  r.mutable_finished()->set_state(state);
  return r;
}
v1::JournalRecord Checkpoint(const std::string& id, int64_t version) {
  v1::JournalRecord r;
  r.mutable_checkpoint()->set_job_id(id);
  r.mutable_checkpoint()->set_version(version);
  return r;
}

TEST(JournalRestoreTest, EachJobGetsItsFateInSubmissionOrder) {
  std::vector<v1::JournalRecord> records = {
      Submitted("b"),      Submitted("a"),
      Started("b", 0),     Checkpoint("b", 10),
      Checkpoint("b", 20), Started("b", 1),
      Submitted("c"),      Finished("a", v1::JOB_CANCELLED),
      Started("c", 0),     Finished("c", v1::JOB_SUCCEEDED),
      Submitted("d"),
  };
  const JournalIndex index = IndexJournal(records);
  EXPECT_EQ(index.order, (std::vector<std::string>{"b", "a", "c", "d"}));
  ASSERT_EQ(index.started.at("b").size(), 2u);
  EXPECT_EQ(index.started.at("b")[1].attempt(), 1);
  EXPECT_EQ(index.checkpoints.at("b").size(), 2u);
  EXPECT_EQ(index.finished.at("a").state(), v1::JOB_CANCELLED);
  const std::vector<RestoreStep> steps = PlanRestore(index);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].job_id, "b");
  EXPECT_EQ(steps[0].how, Restore::kAdopt);
  EXPECT_EQ(steps[1].how, Restore::kFinished);  // Never back to life.
  EXPECT_EQ(steps[2].how, Restore::kFinished);
  EXPECT_EQ(steps[3].how, Restore::kRequeue);
}

TEST(JournalRestoreTest, ASecondSubmissionOfAnIdKeepsItsPlace) {
  std::vector<v1::JournalRecord> records = {Submitted("x"), Submitted("y"),
                                            Submitted("x")};
  EXPECT_EQ(IndexJournal(records).order, (std::vector<std::string>{"x", "y"}));
}

TEST(JournalRestoreTest, OnlyTheNewestCheckpointsAreKept) {
  std::map<int64_t, v1::CheckpointManifest> committed;
  for (int64_t v : {5, 10, 15, 20}) committed[v].set_version(v);
  KeepNewestCheckpoints(2, &committed);
  ASSERT_EQ(committed.size(), 2u);
  EXPECT_EQ(committed.begin()->first, 15);
  KeepNewestCheckpoints(5, &committed);
  EXPECT_EQ(committed.size(), 2u);
}

}  // namespace
}  // namespace aqueduct
