// The rendezvous store: a small key-value map the workers of a job use to
// exchange Gloo addresses and NCCL unique ids. Get can wait, with a
// deadline, for a key to be set; Add is an atomic counter (barriers).
//
// Keys are scoped to a job attempt: "jobs/<job id>/a<attempt>/<rest>",
// the shape of a StageAssignment's rendezvous_key (driver.cc) followed by
// what the communicator adds; any other key is refused. Who may use a
// job's keys is the coordinator's decision (CoordinatorCore::StoreSet and
// CheckStoreAccess), not the store's.
//
// Bounds, so that no peer can fill the coordinator's memory: a key's size,
// a value's size, the keys and the bytes of one job, and the bytes of every
// key and value together. A job's keys are deleted when it ends (DeletePrefix).
//
// Thread-safe.
#ifndef AQUEDUCT_COORDINATOR_KV_STORE_H_
#define AQUEDUCT_COORDINATOR_KV_STORE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace aqueduct {

struct KvStoreOptions {
  // Largest value (INVALID_ARGUMENT beyond).
  size_t max_value_bytes = size_t{1} << 20;
  // Most keys under one job (RESOURCE_EXHAUSTED beyond).
  size_t max_keys_per_job = 4096;
  // Most bytes of keys and values under one job (RESOURCE_EXHAUSTED
  // beyond), so that one job cannot take the whole store from the others.
  size_t max_bytes_per_job = size_t{16} << 20;
  // Most bytes of keys and values in the whole store (RESOURCE_EXHAUSTED
  // beyond).
  size_t max_total_bytes = size_t{256} << 20;
};

// The job attempt a key belongs to.
struct StoreKey {
  std::string job_id;
  int attempt = 0;
};

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = 512;
  static constexpr size_t kMaxJobIdBytes = 128;

  explicit KvStore(const KvStoreOptions& options = {});

  // The job attempt of a key "jobs/<job id>/a<attempt>/<rest>": a job id
  // of [A-Za-z0-9._:@-], an attempt in decimal, a non-empty rest of
  // printable ASCII, at most kMaxKeyBytes in all. INVALID_ARGUMENT saying
  // what is wrong otherwise.
  static absl::StatusOr<StoreKey> ParseKey(const std::string& key);

  // INVALID_ARGUMENT for a malformed key or a value over max_value_bytes;
  // RESOURCE_EXHAUSTED naming the limit when the job has max_keys_per_job
  // keys, or the job would hold more than max_bytes_per_job or the store
  // more than max_total_bytes.
  absl::Status Set(const std::string& key, const std::string& value);
  // Waits until `deadline` for the key; DEADLINE_EXCEEDED naming the key if
  // it never appears (also when the deadline has already passed).
  // INVALID_ARGUMENT for a malformed key.
  absl::StatusOr<std::string> Get(const std::string& key, absl::Time deadline);
  // Adds delta to the counter at key (created at 0) and returns the result.
  // INVALID_ARGUMENT if the key holds a non-counter value; OUT_OF_RANGE
  // when the sum does not fit in 64 bits (the counter is unchanged); the
  // errors of Set for a new key.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  // Removes every key with this prefix (a finished job's keys).
  void DeletePrefix(const std::string& prefix);

  // What the store holds: keys, bytes of keys and values, keys of a job.
  size_t keys() const;
  size_t bytes() const;
  size_t keys_of_job(const std::string& job_id) const;
  size_t bytes_of_job(const std::string& job_id) const;

  const KvStoreOptions& options() const { return options_; }

 private:
  // Room for `key` (of `job`) to hold `value_bytes`, replacing what it
  // holds; RESOURCE_EXHAUSTED naming the limit otherwise.
  absl::Status RoomLocked(const std::string& key, const std::string& job,
                          size_t value_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PutLocked(const std::string& key, const std::string& job,
                 std::string value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const KvStoreOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  // Keys and bytes held per job id (no entry: none).
  struct JobUse {
    size_t keys = 0;
    size_t bytes = 0;
  };
  std::map<std::string, JobUse> job_use_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_KV_STORE_H_
