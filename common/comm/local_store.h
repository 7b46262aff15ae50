// LocalRendezvousStore: a RendezvousStore in this process (tests, and
// single-process pipelines). Thread-safe.
#ifndef AQUEDUCT_COMMON_COMM_LOCAL_STORE_H_
#define AQUEDUCT_COMMON_COMM_LOCAL_STORE_H_

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/comm/rendezvous_store.h"

namespace aqueduct {

class LocalRendezvousStore final : public RendezvousStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    absl::MutexLock lock(&mu_);
    values_[key] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration wait) override {
    absl::MutexLock lock(&mu_);
    auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> bool {
      return values_.count(key) > 0;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&present), wait)) {
      return absl::DeadlineExceededError(
          absl::StrCat("store key '", key, "' was not set in time"));
    }
    return values_[key];
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_LOCAL_STORE_H_
