#include "coordinator/kv_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "coordinator/input_checks.h"

namespace aqueduct {

namespace {

constexpr char kJobsPrefix[] = "jobs/";

absl::Status BadKey(const std::string& key, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("store key ", Quoted(key), " ", why,
                   "; keys read jobs/<job id>/a<attempt>/<name>"));
}

// The job id of a key ParseKey accepted.
std::string JobOf(const std::string& key) {
  const size_t begin = sizeof(kJobsPrefix) - 1;
  return key.substr(begin, key.find('/', begin) - begin);
}

}  // namespace

KvStore::KvStore(const KvStoreOptions& options) : options_(options) {}

absl::StatusOr<StoreKey> KvStore::ParseKey(const std::string& key) {
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key ", Quoted(key), " has ", key.size(),
                     " bytes; the limit is ", kMaxKeyBytes));
  }
  if (!absl::StartsWith(key, kJobsPrefix)) {
    return BadKey(key, "is not under jobs/");
  }
  const size_t begin = sizeof(kJobsPrefix) - 1;
  const size_t job_end = key.find('/', begin);
  if (job_end == std::string::npos) return BadKey(key, "names no attempt");
  StoreKey parsed;
  parsed.job_id = key.substr(begin, job_end - begin);
  if (!CheckName("job id", parsed.job_id, kMaxJobIdBytes).ok()) {
    return BadKey(key, "does not name a job id");
  }
  const size_t attempt_end = key.find('/', job_end + 1);
  if (attempt_end == std::string::npos || key[job_end + 1] != 'a') {
    return BadKey(key, "names no attempt");
  }
  const std::string attempt =
      key.substr(job_end + 2, attempt_end - job_end - 2);
  if (attempt.empty() || attempt.size() > 9 ||
      !std::all_of(attempt.begin(), attempt.end(),
                   [](char c) {
                     return absl::ascii_isdigit(static_cast<unsigned char>(c));
                   }) ||
      !absl::SimpleAtoi(attempt, &parsed.attempt)) {
    return BadKey(key, "names no attempt");
  }
  const absl::string_view rest = absl::string_view(key).substr(attempt_end + 1);
  if (rest.empty()) return BadKey(key, "has no name after the attempt");
  for (char c : rest) {
    if (c <= ' ' || c > '~') {
      return BadKey(key, "holds a byte that is not printable ASCII");
    }
  }
  return parsed;
}

absl::Status KvStore::RoomLocked(const std::string& key, const std::string& job,
                                 size_t value_bytes) const {
  auto it = values_.find(key);
  const size_t old_bytes =
      it == values_.end() ? 0 : it->first.size() + it->second.size();
  auto used = job_use_.find(job);
  const JobUse use = used == job_use_.end() ? JobUse{} : used->second;
  if (it == values_.end() && use.keys >= options_.max_keys_per_job) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job ", job, " holds ", use.keys,
        " store keys, the most a job may (--max_store_keys_per_job=",
        options_.max_keys_per_job, ")"));
  }
  // No overflow: sizes are bounded by kMaxKeyBytes and max_value_bytes.
  const size_t new_bytes = key.size() + value_bytes;
  if (use.bytes - old_bytes + new_bytes > options_.max_bytes_per_job) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job ", job, " holds ", use.bytes, " store bytes; ", new_bytes,
        " more would pass its limit (--max_store_bytes_per_job=",
        options_.max_bytes_per_job, ")"));
  }
  if (bytes_ - old_bytes + new_bytes > options_.max_total_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the store holds ", bytes_, " bytes; ", new_bytes,
                     " more would pass its limit (--max_store_bytes=",
                     options_.max_total_bytes, ")"));
  }
  return absl::OkStatus();
}

void KvStore::PutLocked(const std::string& key, const std::string& job,
                        std::string value) {
  auto [it, added] = values_.try_emplace(key);
  JobUse& use = job_use_[job];
  if (added) {
    ++use.keys;
    use.bytes += key.size();
    bytes_ += key.size();
  } else {
    use.bytes -= it->second.size();
    bytes_ -= it->second.size();
  }
  use.bytes += value.size();
  bytes_ += value.size();
  it->second = std::move(value);
}

absl::Status KvStore::Set(const std::string& key, const std::string& value) {
  absl::StatusOr<StoreKey> parsed = ParseKey(key);
  if (!parsed.ok()) return parsed.status();
  if (value.size() > options_.max_value_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store value for ", Quoted(key), " has ", value.size(),
                     " bytes; the limit is ", options_.max_value_bytes,
                     " (--max_store_value_bytes)"));
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = RoomLocked(key, parsed->job_id, value.size()); !s.ok()) {
    return s;
  }
  PutLocked(key, parsed->job_id, value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvStore::Get(const std::string& key,
                                         absl::Time deadline) {
  if (absl::StatusOr<StoreKey> parsed = ParseKey(key); !parsed.ok()) {
    return parsed.status();
  }
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return values_.count(key) > 0;
  };
  AwaitMonotonic(mu_, absl::Condition(&present), deadline);
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::DeadlineExceededError(
        absl::StrCat("store key ", Quoted(key), " was not set in time"));
  }
  return it->second;
}

absl::StatusOr<int64_t> KvStore::Add(const std::string& key, int64_t delta) {
  absl::StatusOr<StoreKey> parsed = ParseKey(key);
  if (!parsed.ok()) return parsed.status();
  absl::MutexLock lock(&mu_);
  int64_t value = 0;
  auto it = values_.find(key);
  if (it != values_.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key ", Quoted(key), " does not hold a counter"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    return absl::OutOfRangeError(
        absl::StrCat("store counter ", Quoted(key), " holds ", value,
                     "; adding ", delta, " would overflow 64 bits"));
  }
  std::string text = absl::StrCat(sum);
  if (absl::Status s = RoomLocked(key, parsed->job_id, text.size()); !s.ok()) {
    return s;
  }
  PutLocked(key, parsed->job_id, std::move(text));
  return sum;
}

void KvStore::DeletePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  auto it = values_.lower_bound(prefix);
  while (it != values_.end() &&
         it->first.compare(0, prefix.size(), prefix) == 0) {
    const size_t bytes = it->first.size() + it->second.size();
    auto used = job_use_.find(JobOf(it->first));
    if (used != job_use_.end()) {
      used->second.bytes -= bytes;
      if (--used->second.keys == 0) job_use_.erase(used);
    }
    bytes_ -= bytes;
    it = values_.erase(it);
  }
}

size_t KvStore::keys() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

size_t KvStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

size_t KvStore::keys_of_job(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = job_use_.find(job_id);
  return it == job_use_.end() ? 0 : it->second.keys;
}

size_t KvStore::bytes_of_job(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = job_use_.find(job_id);
  return it == job_use_.end() ? 0 : it->second.bytes;
}

}  // namespace aqueduct
