// The coordinator's profiles of models it has measured, reused by later
// jobs of the same model on the same kind of worker: a model's plan then
// does not change from one submission to the next with the noise of one
// measurement (under load the same spec once got six different plans from
// eight profiles). Bounded; the oldest entry goes first.
//
// Thread-safety: thread-safe.
#ifndef AQUEDUCT_COORDINATOR_PROFILE_CACHE_H_
#define AQUEDUCT_COORDINATOR_PROFILE_CACHE_H_

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "proto/service_types.h"

namespace aqueduct {

class ProfileCache {
 public:
  explicit ProfileCache(size_t capacity = 64) : capacity_(capacity) {}

  // What a profile depends on: the model, the data (its samples' shape),
  // the batch size, and the measuring worker's device and threads.
  static std::string KeyOf(const JobSpec& spec, const v1::DeviceInfo& device);

  std::optional<ModelProfile> Find(const std::string& key) const;
  void Put(const std::string& key, const ModelProfile& profile);
  size_t size() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::map<std::string, ModelProfile> profiles_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // Oldest first.
};

// Each node's slowest times of `a` and `b` (profiles of one model on two
// kinds of worker), the other fields `a`'s; the device names both and the
// GEMM throughput is the lower. A node the two do not share keeps `a`'s.
ModelProfile SlowestOf(const ModelProfile& a, const ModelProfile& b);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PROFILE_CACHE_H_
