#include "worker/nn/tensor_parallel.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

namespace {

std::vector<float> FloatsOf(const HostTensor& t) {
  std::vector<float> v(t.data.size() / sizeof(float));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(float));
  return v;
}

HostTensor TensorOf(const std::vector<float>& v, Shape shape) {
  HostTensor t;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data.resize(v.size() * sizeof(float));
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

}  // namespace

ParamSplit SplitOfTensor(const Model& model, const std::string& name) {
  constexpr char kPrefix[] = "layers.";
  if (name.rfind(kPrefix, 0) != 0) return {};
  const size_t dot = name.find('.', sizeof(kPrefix) - 1);
  int layer = -1;
  if (dot == std::string::npos ||
      !absl::SimpleAtoi(
          name.substr(sizeof(kPrefix) - 1, dot - (sizeof(kPrefix) - 1)),
          &layer) ||
      layer < 0 || layer >= model.num_layers()) {
    return {};
  }
  const std::string rest = name.substr(dot + 1);
  const Layer& l = model.layer(layer);
  const std::vector<ParamSpec> params = l.Params();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& p = params[i].name;
    if (rest == p || rest.rfind(p + ".", 0) == 0) {
      return l.SplitOf(static_cast<int>(i));
    }
  }
  return {};
}

absl::StatusOr<SafetensorsFile> ShardFile(const SafetensorsFile& whole,
                                          const Model& model,
                                          const TensorShard& shard) {
  if (shard.degree == 1) return whole;
  SafetensorsFile out;
  out.metadata = whole.metadata;
  for (const auto& [name, t] : whole.tensors) {
    const ParamSplit split = SplitOfTensor(model, name);
    if (split.dim < 0) {
      out.tensors[name] = t;
      continue;
    }
    if (t.dtype != DType::kF32 || split.dim >= t.shape.rank() ||
        t.shape[split.dim] % (split.blocks * shard.degree) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " ", t.shape.ToString(),
                       " cannot be split across a "
                       "tensor-parallel degree of ",
                       shard.degree));
    }
    std::vector<int64_t> dims = t.shape.dims();
    dims[split.dim] /= shard.degree;
    out.tensors[name] =
        TensorOf(ShardOfWhole(FloatsOf(t), t.shape, split, shard),
                 Shape(std::move(dims)));
  }
  return out;
}

absl::StatusOr<SafetensorsFile> GatherWholeFile(const SafetensorsFile& part,
                                                const Model& model,
                                                ProcessGroup& group,
                                                absl::Time deadline) {
  if (group.size() == 1) return part;
  SafetensorsFile out;
  out.metadata = part.metadata;
  const int degree = group.size();
  for (const auto& [name, t] : part.tensors) {
    const ParamSplit split = SplitOfTensor(model, name);
    if (split.dim < 0 || t.dtype != DType::kF32) {
      out.tensors[name] = t;
      continue;
    }
    const std::vector<float> mine = FloatsOf(t);
    std::vector<float> all(mine.size() * static_cast<size_t>(degree));
    RETURN_IF_ERROR(
        group.AllGather(mine.data(), mine.size(), all.data(), deadline));
    std::vector<std::vector<float>> parts(degree);
    for (int r = 0; r < degree; ++r) {
      parts[r].assign(all.begin() + r * mine.size(),
                      all.begin() + (r + 1) * mine.size());
    }
    const Shape whole = WholeShape(t.shape, split, degree);
    out.tensors[name] = TensorOf(WholeOfShards(parts, whole, split), whole);
  }
  return out;
}

absl::Status ProcessGroupTensorParallel::AllReduce(Device& device,
                                                   const Tensor& t) {
  const absl::Time deadline = absl::Now() + timeout_;
  const size_t n = static_cast<size_t>(t.numel());
  if (device.kind() == DeviceKind::kCpu) {
    return group_->AllReduce(t.f32(), n, deadline);
  }
  staging_.resize(n);
  RETURN_IF_ERROR(device.CopyToHost(t, staging_.data()));
  RETURN_IF_ERROR(group_->AllReduce(staging_.data(), n, deadline));
  return device.CopyFromHost(staging_.data(), t);
}

}  // namespace aqueduct
