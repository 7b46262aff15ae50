// The rendezvous store: a small key-value map the workers of a job use to
// exchange Gloo addresses and NCCL unique ids. Get can wait, with a
// deadline, for a key to be set; Add is an atomic counter (barriers).
//
// Thread-safe.
#ifndef AQUEDUCT_COORDINATOR_KV_STORE_H_
#define AQUEDUCT_COORDINATOR_KV_STORE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace aqueduct {

class KvStore {
 public:
  // Limits keep a misbehaving peer from filling the coordinator's memory.
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 1 << 20;
  static constexpr size_t kMaxEntries = 100000;

  // INVALID_ARGUMENT for an empty or oversized key or value;
  // RESOURCE_EXHAUSTED when the store is full.
  absl::Status Set(const std::string& key, const std::string& value);
  // Waits until `deadline` for the key; DEADLINE_EXCEEDED naming the key if
  // it never appears (NOT_FOUND when deadline is already past).
  absl::StatusOr<std::string> Get(const std::string& key, absl::Time deadline);
  // Adds delta to the counter at key (created at 0) and returns the result.
  // INVALID_ARGUMENT if the key holds a non-counter value.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  // Removes every key with this prefix (a finished job's keys).
  void DeletePrefix(const std::string& prefix);

 private:
  absl::Status CheckKey(const std::string& key) const;

  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_KV_STORE_H_
