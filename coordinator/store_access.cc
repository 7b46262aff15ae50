#include "coordinator/store_access.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/input_checks.h"

namespace aqueduct {

StoreAccess::StoreAccess(const Registry& registry, const JobTable& jobs,
                         KvStore& store)
    : registry_(registry), jobs_(jobs), store_(store) {}

absl::Status StoreAccess::Set(const std::string& key,
                              const std::string& value) {
  RETURN_IF_ERROR(CheckWrite(key));
  return store_.Set(key, value);
}

absl::StatusOr<int64_t> StoreAccess::Add(const std::string& key,
                                         int64_t delta) {
  RETURN_IF_ERROR(CheckWrite(key));
  return store_.Add(key, delta);
}

absl::Status StoreAccess::CheckWorker(const std::string& worker_id,
                                      const std::string& key) const {
  ASSIGN_OR_RETURN(const StoreKey k, KvStore::ParseKey(key));
  auto worker = registry_.Get(worker_id);
  const bool live = worker.ok() && (worker->state() == v1::WORKER_HEALTHY ||
                                    worker->state() == v1::WORKER_SUSPECT);
  if (live && worker->job_id() == k.job_id) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "worker ", Shown(worker_id), " may not use the store keys of job ",
      k.job_id, ": it is not a live worker assigned to that job"));
}

absl::Status StoreAccess::CheckWrite(const std::string& key) const {
  ASSIGN_OR_RETURN(const StoreKey k, KvStore::ParseKey(key));
  const Job* job = jobs_.Get(k.job_id);
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("store key ", Quoted(key), ": job ",
                                            k.job_id, " does not exist"));
  }
  if (IsFinal(job->state) || k.attempt != job->attempt) {
    return absl::FailedPreconditionError(absl::StrCat(
        "store key ", Quoted(key), " is of attempt ", k.attempt, " of job ",
        job->id, ", which is not running (the job is ",
        JobStateName(job->state), " at attempt ", job->attempt, ")"));
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
