#include "worker/nn/tensor_parallel.h"

#include <algorithm>
#include <cmath>
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

// One row's share of the loss: max and sum of exp over this member's
// classes, and the target's logit if it is one of them.
struct RowParts {
  std::vector<float> max, sum, target;
};

}  // namespace

absl::StatusOr<LossOutput> VocabParallelCrossEntropy(
    Device& device, TensorParallelGroup& group, const Tensor& logits,
    const Tensor& labels, int64_t first_class, float grad_scale) {
  const int64_t classes = logits.shape()[logits.shape().rank() - 1];
  const int64_t rows = labels.numel();
  if (logits.dtype() != DType::kF32 || labels.dtype() != DType::kI32 ||
      logits.numel() != rows * classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary-parallel cross-entropy needs F32 logits [rows, classes] "
        "and I32 labels [rows]; got logits ",
        logits.shape().ToString(), " and labels ", labels.shape().ToString()));
  }
  std::vector<float> x(static_cast<size_t>(logits.numel()));
  std::vector<int32_t> y(static_cast<size_t>(rows));
  RETURN_IF_ERROR(device.CopyToHost(logits, x.data()));
  RETURN_IF_ERROR(device.CopyToHost(labels, y.data()));
  const int degree = group.size();
  RowParts p{std::vector<float>(rows), std::vector<float>(rows, 0.0f),
             std::vector<float>(rows, 0.0f)};
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = x.data() + r * classes;
    p.max[r] = *std::max_element(l, l + classes);
  }
  // The rows' maxima over the whole vocabulary: any shift common to the
  // members keeps exp finite; the largest is the whole softmax's.
  std::vector<float> maxima(static_cast<size_t>(rows) * degree);
  RETURN_IF_ERROR(group.AllGatherHost(p.max.data(), rows, maxima.data()));
  for (int64_t r = 0; r < rows; ++r) {
    for (int k = 0; k < degree; ++k) {
      p.max[r] = std::max(p.max[r], maxima[k * rows + r]);
    }
    const float* l = x.data() + r * classes;
    for (int64_t c = 0; c < classes; ++c) p.sum[r] += std::exp(l[c] - p.max[r]);
    const int64_t mine = y[r] - first_class;
    if (mine >= 0 && mine < classes) p.target[r] = l[mine];
  }
  RETURN_IF_ERROR(group.AllReduceHost(p.sum.data(), rows));
  RETURN_IF_ERROR(group.AllReduceHost(p.target.data(), rows));
  std::vector<float> losses(rows);
  for (int64_t r = 0; r < rows; ++r) {
    losses[r] = p.max[r] + std::log(p.sum[r]) - p.target[r];
    float* l = x.data() + r * classes;  // becomes dlogits in place
    const float inv_sum = 1.0f / p.sum[r];
    for (int64_t c = 0; c < classes; ++c) {
      const float softmax = std::exp(l[c] - p.max[r]) * inv_sum;
      l[c] = (softmax - (c + first_class == y[r] ? 1.0f : 0.0f)) * grad_scale;
    }
  }
  LossOutput out;
  ASSIGN_OR_RETURN(out.losses, device.Allocate(Shape({rows}), DType::kF32));
  ASSIGN_OR_RETURN(out.dlogits, device.Allocate(logits.shape(), DType::kF32));
  RETURN_IF_ERROR(device.CopyFromHost(losses.data(), out.losses));
  RETURN_IF_ERROR(device.CopyFromHost(x.data(), out.dlogits));
  return out;
}

absl::Status SumSequenceParallelGradients(const Model& model, Device& device,
                                          const ParameterSet& grads,
                                          TensorParallelGroup* group) {
  std::vector<const Tensor*> whole;
  for (int l = grads.begin; l < grads.end; ++l) {
    const Layer& layer = model.layer(l);
    if (!layer.shard().sequence) continue;
    const absl::Span<const Tensor> g = grads.ForLayer(l);
    for (size_t p = 0; p < g.size(); ++p) {
      if (layer.PartialOverRows(static_cast<int>(p))) whole.push_back(&g[p]);
    }
  }
  if (whole.empty()) return absl::OkStatus();
  if (group == nullptr) {
    return absl::FailedPreconditionError(
        "sequence-parallel gradients to sum but no tensor-parallel group");
  }
  size_t n = 0;
  for (const Tensor* t : whole) n += static_cast<size_t>(t->numel());
  std::vector<float> flat(n);
  size_t at = 0;
  for (const Tensor* t : whole) {
    RETURN_IF_ERROR(device.CopyToHost(*t, flat.data() + at));
    at += static_cast<size_t>(t->numel());
  }
  RETURN_IF_ERROR(group->AllReduceHost(flat.data(), n));
  at = 0;
  for (const Tensor* t : whole) {
    RETURN_IF_ERROR(device.CopyFromHost(flat.data() + at, *t));
    at += static_cast<size_t>(t->numel());
  }
  return absl::OkStatus();
}

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

absl::Status ProcessGroupTensorParallel::AllReduceHost(float* data, size_t n) {
  return group_->AllReduce(data, n, absl::Now() + timeout_);
}

absl::Status ProcessGroupTensorParallel::AllGatherHost(const float* in,
                                                       size_t n, float* out) {
  return group_->AllGather(in, n, out, absl::Now() + timeout_);
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

absl::Status ProcessGroupTensorParallel::AllGather(Device& device,
                                                   const Tensor& part,
                                                   const Tensor& whole) {
  const absl::Time deadline = absl::Now() + timeout_;
  const size_t n = static_cast<size_t>(part.numel());
  if (whole.numel() != part.numel() * size()) {
    return absl::InternalError(
        absl::StrCat("all-gather of ", part.shape().ToString(), " into ",
                     whole.shape().ToString(), " over ", size(), " members"));
  }
  if (device.kind() == DeviceKind::kCpu) {
    return group_->AllGather(part.f32(), n, whole.f32(), deadline);
  }
  staging_part_.resize(n);
  staging_.resize(n * size());
  RETURN_IF_ERROR(device.CopyToHost(part, staging_part_.data()));
  RETURN_IF_ERROR(
      group_->AllGather(staging_part_.data(), n, staging_.data(), deadline));
  return device.CopyFromHost(staging_.data(), whole);
}

absl::Status ProcessGroupTensorParallel::ReduceScatter(Device& device,
                                                       const Tensor& whole,
                                                       const Tensor& part) {
  const absl::Time deadline = absl::Now() + timeout_;
  const size_t n = static_cast<size_t>(part.numel());
  if (whole.numel() != part.numel() * size()) {
    return absl::InternalError(
        absl::StrCat("reduce-scatter of ", whole.shape().ToString(), " into ",
                     part.shape().ToString(), " over ", size(), " members"));
  }
  if (device.kind() == DeviceKind::kCpu) {
    return group_->ReduceScatter(whole.f32(), n, part.f32(), deadline);
  }
  staging_.resize(n * size());
  staging_part_.resize(n);
  RETURN_IF_ERROR(device.CopyToHost(whole, staging_.data()));
  RETURN_IF_ERROR(group_->ReduceScatter(staging_.data(), n,
                                        staging_part_.data(), deadline));
  return device.CopyFromHost(staging_part_.data(), part);
}

}  // namespace aqueduct
