// What the job journal says of each job, read at the coordinator's start:
// an index of its records by job, and the decision for each job (pure: the
// core applies it to its job table). Not thread-safe: plain values.
#ifndef AQUEDUCT_COORDINATOR_JOURNAL_RESTORE_H_
#define AQUEDUCT_COORDINATOR_JOURNAL_RESTORE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/control.pb.h"

namespace aqueduct {

// A journal's records by job: the last submission of each (in the order of
// first submission), its final status, its attempts' starts in order, and
// its committed checkpoints by version.
struct JournalIndex {
  std::map<std::string, v1::JobSubmitted> submitted;
  std::map<std::string, v1::JobStatus> finished;
  std::map<std::string, std::vector<v1::JobStarted>> started;
  std::map<std::string, std::map<int64_t, v1::CheckpointManifest>> checkpoints;
  std::vector<std::string> order;
};

// Indexes `records` (moved from).
JournalIndex IndexJournal(std::vector<v1::JournalRecord>& records);

// What becomes of a job at start.
enum class Restore {
  kFinished,  // It has a final status: shown as it ended.
  kAdopt,     // It started and did not end: taken back from its workers.
  kRequeue,   // Submitted, never started: PENDING again.
};

struct RestoreStep {
  std::string job_id;
  Restore how;
};

// Every submitted job of `index`, in submission order, with its fate.
std::vector<RestoreStep> PlanRestore(const JournalIndex& index);

// Keeps the newest `keep` versions of `committed` (older ones were removed
// from disk after later commits).
void KeepNewestCheckpoints(
    int keep, std::map<int64_t, v1::CheckpointManifest>* committed);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOURNAL_RESTORE_H_
