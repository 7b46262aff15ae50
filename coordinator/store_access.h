// Who may use the rendezvous store (kv_store.h), and when (issue 22): a
// store key "jobs/<J>/a<attempt>/..." is written only while job J runs that
// attempt, and read or written only by a live worker assigned to job J.
//
// Thread-safety: not thread-safe; requires the core's mutex (the core
// holds it ABSL_GUARDED_BY that mutex, with the registry and the job table
// it reads), so that a job's keys cannot be written after it ends. The
// store itself is thread-safe.
#ifndef AQUEDUCT_COORDINATOR_STORE_ACCESS_H_
#define AQUEDUCT_COORDINATOR_STORE_ACCESS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/job_table.h"
#include "coordinator/kv_store.h"
#include "coordinator/registry.h"

namespace aqueduct {

class StoreAccess {
 public:
  // Keeps the references; all must outlive it.
  StoreAccess(const Registry& registry, const JobTable& jobs, KvStore& store);

  // Set and Add for the attempt the job runs now: NOT_FOUND for an unknown
  // job, FAILED_PRECONDITION for a finished job or another attempt, then
  // KvStore's errors (INVALID_ARGUMENT for a key of another shape).
  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  // OK only if `worker_id` is a live worker (healthy or suspect) assigned
  // to the job of `key`: PERMISSION_DENIED naming the worker and the job
  // otherwise; INVALID_ARGUMENT for a key of another shape.
  absl::Status CheckWorker(const std::string& worker_id,
                           const std::string& key) const;

 private:
  // The job of `key` runs the key's attempt.
  absl::Status CheckWrite(const std::string& key) const;

  const Registry& registry_;
  const JobTable& jobs_;
  KvStore& store_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_STORE_ACCESS_H_
