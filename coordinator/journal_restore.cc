#include "coordinator/journal_restore.h"

#include <utility>

namespace aqueduct {

JournalIndex IndexJournal(std::vector<v1::JournalRecord>& records) {
  JournalIndex index;
  for (v1::JournalRecord& r : records) {
    if (r.has_submitted()) {
      const std::string id = r.submitted().job_id();
      if (index.submitted.count(id) == 0) index.order.push_back(id);
      index.submitted[id] = std::move(*r.mutable_submitted());
    } else if (r.has_finished()) {
      index.finished[r.finished().job_id()] = std::move(*r.mutable_finished());
    } else if (r.has_started()) {
      index.started[r.started().job_id()].push_back(
          std::move(*r.mutable_started()));
    } else if (r.has_checkpoint()) {
      const v1::CheckpointManifest& m = r.checkpoint();
      index.checkpoints[m.job_id()][m.version()] = m;
    }
  }
  return index;
}

std::vector<RestoreStep> PlanRestore(const JournalIndex& index) {
  std::vector<RestoreStep> steps;
  steps.reserve(index.order.size());
  for (const std::string& id : index.order) {
    Restore how = Restore::kRequeue;
    if (index.finished.count(id) > 0) {
      how = Restore::kFinished;
    } else if (index.started.count(id) > 0) {
      how = Restore::kAdopt;
    }
    steps.push_back({id, how});
  }
  return steps;
}

void KeepNewestCheckpoints(
    int keep, std::map<int64_t, v1::CheckpointManifest>* committed) {
  while (static_cast<int>(committed->size()) > keep) {
    committed->erase(committed->begin());
  }
}

}  // namespace aqueduct
