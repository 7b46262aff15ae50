#include "coordinator/kv_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace aqueduct {

absl::Status KvStore::CheckKey(const std::string& key) const {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store key must have 1 to ", kMaxKeyBytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

absl::Status KvStore::Set(const std::string& key, const std::string& value) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store value for '", key, "' has ", value.size(),
                     " bytes; the limit is ", kMaxValueBytes));
  }
  absl::MutexLock lock(&mu_);
  if (values_.size() >= kMaxEntries && values_.count(key) == 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the store holds ", kMaxEntries, " keys already"));
  }
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvStore::Get(const std::string& key,
                                         absl::Time deadline) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return values_.count(key) > 0;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&present), deadline)) {
    if (deadline <= absl::Now()) {
      return absl::DeadlineExceededError(
          absl::StrCat("store key '", key, "' was not set in time"));
    }
  }
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::DeadlineExceededError(
        absl::StrCat("store key '", key, "' was not set in time"));
  }
  return it->second;
}

absl::StatusOr<int64_t> KvStore::Add(const std::string& key, int64_t delta) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  int64_t value = 0;
  auto it = values_.find(key);
  if (it != values_.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key '", key, "' does not hold a counter"));
  }
  if (it == values_.end() && values_.size() >= kMaxEntries) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the store holds ", kMaxEntries, " keys already"));
  }
  value += delta;
  values_[key] = absl::StrCat(value);
  return value;
}

void KvStore::DeletePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  auto it = values_.lower_bound(prefix);
  while (it != values_.end() &&
         it->first.compare(0, prefix.size(), prefix) == 0) {
    it = values_.erase(it);
  }
}

}  // namespace aqueduct
