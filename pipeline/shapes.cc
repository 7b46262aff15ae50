#include "pipeline/shapes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status.h"

namespace aqueduct {

SymbolicShape SymbolicShape::Known(std::vector<int64_t> dims) {
  SymbolicShape s;
  s.rank_known = true;
  s.dims = std::move(dims);
  return s;
}

int64_t SymbolicShape::LastDim() const {
  if (!rank_known) return last;
  return dims.empty() ? kUnknownDim : dims.back();
}

bool SymbolicShape::FullyKnown() const {
  if (!rank_known) return false;
  for (int64_t d : dims) {
    if (d == kUnknownDim) return false;
  }
  return true;
}

std::string SymbolicShape::ToString() const {
  auto dim = [](std::string* out, int64_t d) {
    absl::StrAppend(out, d == kUnknownDim ? "?" : absl::StrCat(d));
  };
  if (!rank_known) {
    return last == kUnknownDim ? "[...]" : absl::StrCat("[..., ", last, "]");
  }
  return absl::StrCat("[", absl::StrJoin(dims, ", ", dim), "]");
}

namespace {

std::string Field(int index, absl::string_view kind) {
  return absl::StrCat("model.layers[", index, "].", kind);
}

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

absl::Status CheckPositive(int64_t value, int index, absl::string_view field) {
  if (value > 0) return absl::OkStatus();
  return Invalid(
      absl::StrCat(Field(index, field), "=", value, " must be positive"));
}

absl::Status CheckRank3(const SymbolicShape& in, int index,
                        absl::string_view kind) {
  if (!in.rank_known || in.dims.size() == 3) return absl::OkStatus();
  return Invalid(absl::StrCat(
      Field(index, kind),
      " expects [channels, height, width] per sample; the previous layer's "
      "output is ",
      in.ToString()));
}

// The input's dimensions as [channels, height, width], unknown where the
// rank is.
std::vector<int64_t> Chw(const SymbolicShape& in) {
  if (in.rank_known) return in.dims;
  return {kUnknownDim, kUnknownDim, kUnknownDim};
}

// Output side of a window over `size` (unknown stays unknown); an error if
// the padded input is smaller than the kernel.
absl::StatusOr<int64_t> WindowOut(int64_t size, int64_t kernel, int64_t stride,
                                  int64_t padding) {
  if (size == kUnknownDim) return kUnknownDim;
  if (size + 2 * padding < kernel) return Invalid("");
  return (size + 2 * padding - kernel) / stride + 1;
}

absl::StatusOr<SymbolicShape> Window(const SymbolicShape& in, int index,
                                     absl::string_view field, int64_t channels,
                                     int64_t kernel, int64_t stride,
                                     int64_t padding) {
  const std::vector<int64_t> chw = Chw(in);
  auto h = WindowOut(chw[1], kernel, stride, padding);
  auto w = WindowOut(chw[2], kernel, stride, padding);
  if (!h.ok() || !w.ok()) {
    return Invalid(absl::StrCat(Field(index, field), "=", kernel,
                                " is larger than the padded input ",
                                in.ToString()));
  }
  return SymbolicShape::Known({channels, *h, *w});
}

absl::StatusOr<SymbolicShape> Linear(const LinearSpec& s, int index,
                                     const SymbolicShape& in) {
  RETURN_IF_ERROR(CheckPositive(s.in_features(), index, "linear.in_features"));
  RETURN_IF_ERROR(
      CheckPositive(s.out_features(), index, "linear.out_features"));
  const int64_t last = in.LastDim();
  const bool rank0 = in.rank_known && in.dims.empty();
  if (rank0 || (last != kUnknownDim && last != s.in_features())) {
    const bool vector = in.rank_known && in.dims.size() == 1;
    return Invalid(absl::StrCat(
        Field(index, "linear.in_features"), "=", s.in_features(),
        " does not match the previous layer's output ",
        vector ? in.ToString().substr(1, in.ToString().size() - 2)
               : absl::StrCat(in.ToString(),
                              " (linear applies to the last dimension; add a "
                              "flatten layer)")));
  }
  SymbolicShape out = in;
  if (out.rank_known) {
    out.dims.back() = s.out_features();
  } else {
    out.last = s.out_features();
  }
  return out;
}

absl::StatusOr<SymbolicShape> Conv2d(const Conv2dSpec& s, int index,
                                     const SymbolicShape& in) {
  RETURN_IF_ERROR(CheckRank3(in, index, "conv2d"));
  RETURN_IF_ERROR(CheckPositive(s.in_channels(), index, "conv2d.in_channels"));
  RETURN_IF_ERROR(
      CheckPositive(s.out_channels(), index, "conv2d.out_channels"));
  RETURN_IF_ERROR(CheckPositive(s.kernel_size(), index, "conv2d.kernel_size"));
  const int64_t stride = s.has_stride() ? s.stride() : 1;
  RETURN_IF_ERROR(CheckPositive(stride, index, "conv2d.stride"));
  if (s.padding() < 0) {
    return Invalid(absl::StrCat(Field(index, "conv2d.padding"), "=",
                                s.padding(), " must not be negative"));
  }
  const int64_t channels = Chw(in)[0];
  if (channels != kUnknownDim && channels != s.in_channels()) {
    return Invalid(
        absl::StrCat(Field(index, "conv2d.in_channels"), "=", s.in_channels(),
                     " does not match the previous layer's output channels ",
                     channels, " (shape ", in.ToString(), ")"));
  }
  return Window(in, index, "conv2d.kernel_size", s.out_channels(),
                s.kernel_size(), stride, s.padding());
}

absl::StatusOr<SymbolicShape> MaxPool2d(const MaxPool2dSpec& s, int index,
                                        const SymbolicShape& in) {
  RETURN_IF_ERROR(CheckRank3(in, index, "max_pool2d"));
  RETURN_IF_ERROR(
      CheckPositive(s.kernel_size(), index, "max_pool2d.kernel_size"));
  const int64_t stride = s.has_stride() ? s.stride() : s.kernel_size();
  RETURN_IF_ERROR(CheckPositive(stride, index, "max_pool2d.stride"));
  if (s.padding() < 0 || s.padding() > s.kernel_size() / 2) {
    return Invalid(absl::StrCat(Field(index, "max_pool2d.padding"), "=",
                                s.padding(), " must be in [0, kernel_size/2]"));
  }
  return Window(in, index, "max_pool2d.kernel_size", Chw(in)[0],
                s.kernel_size(), stride, s.padding());
}

absl::StatusOr<SymbolicShape> LayerNorm(const LayerNormSpec& s, int index,
                                        const SymbolicShape& in) {
  const int64_t last = in.LastDim();
  if ((in.rank_known && in.dims.empty()) ||
      (last != kUnknownDim && last != s.normalized_shape()) ||
      s.normalized_shape() <= 0) {
    return Invalid(absl::StrCat(
        Field(index, "layer_norm.normalized_shape"), "=", s.normalized_shape(),
        " does not match the last dimension of the previous layer's output ",
        in.ToString()));
  }
  const float eps = s.has_eps() ? s.eps() : 1e-5f;
  if (!(eps > 0)) {
    return Invalid(absl::StrCat(Field(index, "layer_norm.eps"), "=", eps,
                                " must be positive"));
  }
  SymbolicShape out = in;
  if (!out.rank_known) out.last = s.normalized_shape();
  return out;
}

SymbolicShape Flatten(const SymbolicShape& in) {
  if (!in.rank_known) return SymbolicShape::Known({kUnknownDim});
  int64_t n = 1;
  for (int64_t d : in.dims) {
    if (d == kUnknownDim) return SymbolicShape::Known({kUnknownDim});
    n *= d;
  }
  return SymbolicShape::Known({n});
}

absl::Status CheckDelay(const DelaySpec& s, int index) {
  if (s.forward_ms() >= 0 && s.forward_ms() <= 60000 && s.backward_ms() >= 0 &&
      s.backward_ms() <= 60000) {
    return absl::OkStatus();
  }
  return Invalid(absl::StrCat(
      Field(index, "delay"), ": forward_ms=", s.forward_ms(),
      " and backward_ms=", s.backward_ms(), " must be in [0, 60000]"));
}

absl::Status CheckNotEmpty(const SymbolicShape& in, int index) {
  for (int64_t d : in.dims) {
    if (d != kUnknownDim && d <= 0) {
      return Invalid(absl::StrCat(Field(index, "kind"),
                                  ": the previous layer's output ",
                                  in.ToString(), " is empty"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SymbolicShape> InferLayerShape(const LayerSpec& spec, int index,
                                              const SymbolicShape& in) {
  RETURN_IF_ERROR(CheckNotEmpty(in, index));
  switch (spec.kind_case()) {
    case LayerSpec::kLinear:
      return Linear(spec.linear(), index, in);
    case LayerSpec::kRelu:
    case LayerSpec::kGelu:
      return in;
    case LayerSpec::kDropout: {
      const float p = spec.dropout().p();
      if (!(p >= 0 && p < 1)) {
        return Invalid(absl::StrCat(Field(index, "dropout.p"), "=", p,
                                    " must be in [0, 1)"));
      }
      return in;
    }
    case LayerSpec::kFlatten:
      return Flatten(in);
    case LayerSpec::kConv2D:
      return Conv2d(spec.conv2d(), index, in);
    case LayerSpec::kMaxPool2D:
      return MaxPool2d(spec.max_pool2d(), index, in);
    case LayerSpec::kLayerNorm:
      return LayerNorm(spec.layer_norm(), index, in);
    case LayerSpec::kDelay:
      RETURN_IF_ERROR(CheckDelay(spec.delay(), index));
      return in;
    case LayerSpec::KIND_NOT_SET:
      break;
  }
  return Invalid(
      absl::StrCat("model.layers[", index,
                   "] has no layer kind (set one of linear, relu, gelu, "
                   "dropout, flatten, conv2d, max_pool2d, layer_norm, delay)"));
}

absl::StatusOr<std::vector<SymbolicShape>> InferModelShapes(
    const ModelSpec& model, const SymbolicShape& input) {
  if (model.layers().empty()) return Invalid("model.layers is empty");
  std::vector<SymbolicShape> out;
  SymbolicShape shape = input;
  for (int i = 0; i < model.layers_size(); ++i) {
    ASSIGN_OR_RETURN(shape, InferLayerShape(model.layers(i), i, shape));
    out.push_back(shape);
  }
  return out;
}

}  // namespace aqueduct
