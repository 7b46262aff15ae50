#include "coordinator/profile_cache.h"

#include <algorithm>

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

ModelProfile SlowestOf(const ModelProfile& a, const ModelProfile& b) {
  ModelProfile out = a;
  const int shared = std::min(a.nodes_size(), b.nodes_size());
  for (int i = 0; i < shared; ++i) {
    const LayerProfile& y = b.nodes(i);
    LayerProfile* x = out.mutable_nodes(i);
    if (x->id() != y.id()) continue;
    x->set_forward_ms(std::max(x->forward_ms(), y.forward_ms()));
    x->set_backward_ms(std::max(x->backward_ms(), y.backward_ms()));
    x->set_optimizer_ms(std::max(x->optimizer_ms(), y.optimizer_ms()));
    for (v1::RecomputeCost& cost : *x->mutable_recompute_costs()) {
      for (const v1::RecomputeCost& other : y.recompute_costs()) {
        if (other.mode() != cost.mode()) continue;
        cost.set_backward_ms(std::max(cost.backward_ms(), other.backward_ms()));
      }
    }
  }
  if (b.device() != a.device()) {
    out.set_device(
        absl::StrCat("slowest of ", a.device(), " and ", b.device()));
  }
  out.set_gemm_gflops(std::min(a.gemm_gflops(), b.gemm_gflops()));
  return out;
}

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
