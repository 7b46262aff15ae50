#include "coordinator/profile_cache.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace aqueduct {

namespace {

// Deterministic bytes of a message (map order and unknown fields fixed).
std::string Bytes(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

}  // namespace

std::string ProfileCache::KeyOf(const JobSpec& spec,
                                const v1::DeviceInfo& device) {
  return absl::StrCat(Bytes(spec.model()), "|", Bytes(spec.data()), "|",
                      spec.batch_size(), "|", device.kind(), "|", device.name(),
                      "|", device.threads());
}

std::optional<ModelProfile> ProfileCache::Find(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = profiles_.find(key);
  if (it == profiles_.end()) return std::nullopt;
  return it->second;
}

void ProfileCache::Put(const std::string& key, const ModelProfile& profile) {
  absl::MutexLock lock(&mu_);
  if (capacity_ == 0) return;
  if (profiles_.count(key) == 0) {
    order_.push_back(key);
    while (order_.size() > capacity_) {
      profiles_.erase(order_.front());
      order_.pop_front();
    }
  }
  profiles_[key] = profile;
}

size_t ProfileCache::size() const {
  absl::MutexLock lock(&mu_);
  return profiles_.size();
}

}  // namespace aqueduct
