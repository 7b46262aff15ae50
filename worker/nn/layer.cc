#include "worker/nn/layer.h"

#include <chrono>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "pipeline/shapes.h"
#include "worker/nn/llama.h"
#include "worker/nn/transformer.h"

namespace aqueduct {

namespace {

// Fills `out` with U(-bound, bound) from (seed, layer, param).
void UniformInit(uint64_t seed, int layer, int param, float bound,
                 std::vector<float>* out) {
  const uint64_t key = MixKey(seed, static_cast<uint64_t>(layer) + 1,
                              static_cast<uint64_t>(param) + 1);
  for (size_t i = 0; i < out->size(); ++i) {
    (*out)[i] = (2.0f * DropoutUniform(key, i) - 1.0f) * bound;
  }
}

// Rows of a tensor whose last dimension is `cols`.
int64_t RowsOf(const Tensor& t, int64_t cols) { return t.numel() / cols; }

// ---------------------------------------------------------------- Linear

void WeightGradNow(Device& dev, const DeferredLinearGrad& g) {
  const float beta = g.accumulate ? 1.0f : 0.0f;
  // dW[out, in] = dy^T x.
  dev.Gemm(true, false, g.out, g.in, g.rows, 1.0f, g.dy.f32(), g.out, g.x.f32(),
           g.in, beta, g.dw.f32(), g.in);
  if (g.has_bias) dev.SumRows(g.dy.f32(), g.rows, g.out, beta, g.db.f32());
}

class LinearLayer final : public Layer {
 public:
  // With a shard of degree t: column-parallel, member r holding outputs
  // [r, r + 1) * out / t (a vocabulary-parallel head: its logits stay
  // split; backward sums the input gradient over the group).
  LinearLayer(int index, Shape in, Shape out, int64_t in_features,
              int64_t out_features, bool bias, TensorShard shard)
      : Layer(index, std::move(in), std::move(out), shard),
        in_(in_features),
        out_(out_features / shard.degree),
        bias_(bias) {}

  std::string kind() const override { return "linear"; }

  std::vector<ParamSpec> Params() const override {
    std::vector<ParamSpec> p = {{"weight", Shape({out_, in_})}};
    if (bias_) p.push_back({"bias", Shape({out_})});
    return p;
  }

  ParamSplit SplitOf(int) const override {
    return shard().degree > 1 ? ParamSplit{0, 1} : ParamSplit{};
  }

  void InitParams(uint64_t seed,
                  std::vector<std::vector<float>>* values) const override {
    // PyTorch: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(in), 1/sqrt(in)),
    // and the same bound for the bias.
    const float bound = 1.0f / std::sqrt(static_cast<float>(in_));
    InitShards(
        *this, values,
        [&](int i, const std::string&, const Shape&, std::vector<float>* v) {
          UniformInit(seed, index(), i, bound, v);
        });
  }

  absl::Status Forward(Device& dev, absl::Span<const Tensor> params,
                       const Tensor& x, const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override {
    const int64_t rows = RowsOf(x, in_);
    std::vector<int64_t> dims = x.shape().dims();
    dims.back() = out_;
    ASSIGN_OR_RETURN(*y, dev.Allocate(Shape(std::move(dims)), DType::kF32));
    dev.Gemm(false, true, rows, out_, in_, 1.0f, x.f32(), in_, params[0].f32(),
             in_, 0.0f, y->f32(), out_);
    if (bias_) dev.AddBias(y->f32(), params[1].f32(), rows, out_, false);
    if (ctx.training) cache->tensors = {x};
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor> params,
                        const LayerCache& cache, const Tensor& dy,
                        const PassContext& ctx, Tensor* dx,
                        absl::Span<const Tensor> grads,
                        bool accumulate) const override {
    return BackwardInput(dev, params, cache, dy, ctx, dx, grads, accumulate,
                         nullptr);
  }

  absl::Status BackwardInput(Device& dev, absl::Span<const Tensor> params,
                             const LayerCache& cache, const Tensor& dy,
                             const PassContext& ctx, Tensor* dx,
                             absl::Span<const Tensor> grads, bool accumulate,
                             DeferredGrads* deferred) const override {
    const Tensor& x = cache.tensors[0];
    const int64_t rows = RowsOf(x, in_);
    LinearWeightGrad(dev, x, dy, rows, in_, out_, grads[0],
                     bias_ ? &grads[1] : nullptr, accumulate, deferred);
    if (dx != nullptr) {
      ASSIGN_OR_RETURN(*dx, dev.Allocate(x.shape(), DType::kF32));
      dev.Gemm(false, false, rows, in_, out_, 1.0f, dy.f32(), out_,
               params[0].f32(), in_, 0.0f, dx->f32(), in_);
      RETURN_IF_ERROR(SumOverTensorGroup(dev, ctx, shard(), index(), *dx));
    }
    return absl::OkStatus();
  }

  double ForwardFlopsPerSample() const override {
    return 2.0 * static_cast<double>(input_shape().numel() / in_) * in_ * out_;
  }

 private:
  int64_t in_, out_;
  bool bias_;
};

// ---------------------------------------------------------------- ReLU

class ReluLayer final : public Layer {
 public:
  ReluLayer(int index, Shape shape) : Layer(index, shape, shape) {}
  std::string kind() const override { return "relu"; }

  absl::Status Forward(Device& dev, absl::Span<const Tensor>, const Tensor& x,
                       const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override {
    // In place: a layer's output is saved for backward only by ReLU itself,
    // whose saved values max(x, 0) this leaves unchanged.
    *y = x;
    dev.Relu(x.f32(), y->f32(), x.numel());
    if (ctx.training) cache->tensors = {*y};
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor>,
                        const LayerCache& cache, const Tensor& dy,
                        const PassContext&, Tensor* dx,
                        absl::Span<const Tensor>, bool) const override {
    if (dx == nullptr) return absl::OkStatus();
    *dx = dy;
    dev.ReluBackward(cache.tensors[0].f32(), dy.f32(), dx->f32(), dy.numel());
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------------- GELU

class GeluLayer final : public Layer {
 public:
  GeluLayer(int index, Shape shape) : Layer(index, shape, shape) {}
  std::string kind() const override { return "gelu"; }

  absl::Status Forward(Device& dev, absl::Span<const Tensor>, const Tensor& x,
                       const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override {
    ASSIGN_OR_RETURN(*y, dev.Allocate(x.shape(), DType::kF32));
    dev.Gelu(x.f32(), y->f32(), x.numel());
    if (ctx.training) cache->tensors = {x};
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor>,
                        const LayerCache& cache, const Tensor& dy,
                        const PassContext&, Tensor* dx,
                        absl::Span<const Tensor>, bool) const override {
    if (dx == nullptr) return absl::OkStatus();
    *dx = dy;
    dev.GeluBackward(cache.tensors[0].f32(), dy.f32(), dx->f32(), dy.numel());
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------------- Dropout

class DropoutLayer final : public Layer {
 public:
  DropoutLayer(int index, Shape shape, float p, uint64_t seed)
      : Layer(index, shape, shape), p_(p), seed_(seed) {}
  std::string kind() const override { return "dropout"; }

  absl::Status Forward(Device& dev, absl::Span<const Tensor>, const Tensor& x,
                       const PassContext& ctx, Tensor* y,
                       LayerCache*) const override {
    if (!ctx.training || p_ == 0) {
      *y = x;
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(*y, dev.Allocate(x.shape(), DType::kF32));
    dev.Dropout(x.f32(), y->f32(), x.numel(), p_, Key(ctx), Offset(x, ctx));
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor>,
                        const LayerCache&, const Tensor& dy,
                        const PassContext& ctx, Tensor* dx,
                        absl::Span<const Tensor>, bool) const override {
    if (dx == nullptr) return absl::OkStatus();
    *dx = dy;
    // The mask is a function of the key: d(x*mask*s)/dx = mask*s.
    if (p_ != 0) {
      dev.Dropout(dy.f32(), dx->f32(), dy.numel(), p_, Key(ctx),
                  Offset(dy, ctx));
    }
    return absl::OkStatus();
  }

 private:
  static uint64_t Offset(const Tensor& t, const PassContext& ctx) {
    const int64_t rows = t.shape()[0];
    return rows == 0 ? 0 : ctx.sample_offset * (t.numel() / rows);
  }
  uint64_t Key(const PassContext& ctx) const {
    return MixKey(seed_, static_cast<uint64_t>(index()) + 0x100000,
                  ctx.minibatch);
  }
  float p_;
  uint64_t seed_;
};

// ---------------------------------------------------------------- Flatten

class FlattenLayer final : public Layer {
 public:
  FlattenLayer(int index, Shape in) : Layer(index, in, Shape({in.numel()})) {}
  std::string kind() const override { return "flatten"; }

  absl::Status Forward(Device&, absl::Span<const Tensor>, const Tensor& x,
                       const PassContext&, Tensor* y,
                       LayerCache*) const override {
    *y = x.Reshape(output_shape().WithLeading(x.shape()[0]));
    return absl::OkStatus();
  }

  absl::Status Backward(Device&, absl::Span<const Tensor>, const LayerCache&,
                        const Tensor& dy, const PassContext&, Tensor* dx,
                        absl::Span<const Tensor>, bool) const override {
    if (dx != nullptr) {
      *dx = dy.Reshape(input_shape().WithLeading(dy.shape()[0]));
    }
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------------- Conv2d

class Conv2dLayer final : public Layer {
 public:
  Conv2dLayer(int index, Shape in, Shape out, Window2d window,
              int64_t out_channels, bool bias)
      : Layer(index, std::move(in), std::move(out)),
        w_(window),
        out_channels_(out_channels),
        bias_(bias) {}

  std::string kind() const override { return "conv2d"; }

  std::vector<ParamSpec> Params() const override {
    std::vector<ParamSpec> p = {
        {"weight", Shape({out_channels_, w_.channels, w_.kernel, w_.kernel})}};
    if (bias_) p.push_back({"bias", Shape({out_channels_})});
    return p;
  }

  void InitParams(uint64_t seed,
                  std::vector<std::vector<float>>* values) const override {
    const float bound = 1.0f / std::sqrt(static_cast<float>(Patch()));
    for (size_t i = 0; i < values->size(); ++i) {
      UniformInit(seed, index(), static_cast<int>(i), bound, &(*values)[i]);
    }
  }

  absl::Status Forward(Device& dev, absl::Span<const Tensor> params,
                       const Tensor& x, const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override {
    const int64_t batch = x.shape()[0];
    const int64_t plane = w_.out_height() * w_.out_width();
    ASSIGN_OR_RETURN(
        Tensor col, dev.Allocate(Shape({Patch(), batch * plane}), DType::kF32));
    dev.Im2Col(x.f32(), batch, w_, col.f32());
    ASSIGN_OR_RETURN(
        Tensor ycb,
        dev.Allocate(Shape({out_channels_, batch * plane}), DType::kF32));
    dev.Gemm(false, false, out_channels_, batch * plane, Patch(), 1.0f,
             params[0].f32(), Patch(), col.f32(), batch * plane, 0.0f,
             ycb.f32(), batch * plane);
    ASSIGN_OR_RETURN(
        *y, dev.Allocate(output_shape().WithLeading(batch), DType::kF32));
    dev.SwapAxes01(ycb.f32(), out_channels_, batch, plane,
                   bias_ ? params[1].f32() : nullptr, y->f32());
    if (ctx.training) cache->tensors = {x};
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor> params,
                        const LayerCache& cache, const Tensor& dy,
                        const PassContext&, Tensor* dx,
                        absl::Span<const Tensor> grads,
                        bool accumulate) const override {
    const Tensor& x = cache.tensors[0];
    const int64_t batch = x.shape()[0];
    const int64_t plane = w_.out_height() * w_.out_width();
    const float beta = accumulate ? 1.0f : 0.0f;
    if (bias_) {
      dev.SumChannels(dy.f32(), batch, out_channels_, plane, beta,
                      grads[1].f32());
    }
    // dy [B, Cout, P] -> [Cout, B*P].
    ASSIGN_OR_RETURN(
        Tensor dycb,
        dev.Allocate(Shape({out_channels_, batch * plane}), DType::kF32));
    dev.SwapAxes01(dy.f32(), batch, out_channels_, plane, nullptr, dycb.f32());
    // The columns are recomputed rather than kept: memory for in-flight
    // minibatches matters more than one im2col.
    ASSIGN_OR_RETURN(
        Tensor col, dev.Allocate(Shape({Patch(), batch * plane}), DType::kF32));
    dev.Im2Col(x.f32(), batch, w_, col.f32());
    // dW[Cout, Patch] = dycb col^T.
    dev.Gemm(false, true, out_channels_, Patch(), batch * plane, 1.0f,
             dycb.f32(), batch * plane, col.f32(), batch * plane, beta,
             grads[0].f32(), Patch());
    if (dx != nullptr) {
      // dcol[Patch, B*P] = W^T dycb, written over col.
      dev.Gemm(true, false, Patch(), batch * plane, out_channels_, 1.0f,
               params[0].f32(), Patch(), dycb.f32(), batch * plane, 0.0f,
               col.f32(), batch * plane);
      ASSIGN_OR_RETURN(*dx, dev.Allocate(x.shape(), DType::kF32));
      dev.Col2Im(col.f32(), batch, w_, dx->f32());
    }
    return absl::OkStatus();
  }

  double ForwardFlopsPerSample() const override {
    return 2.0 * Patch() * out_channels_ * w_.out_height() * w_.out_width();
  }

 private:
  int64_t Patch() const { return w_.channels * w_.kernel * w_.kernel; }
  Window2d w_;
  int64_t out_channels_;
  bool bias_;
};

// ---------------------------------------------------------------- MaxPool2d

class MaxPool2dLayer final : public Layer {
 public:
  MaxPool2dLayer(int index, Shape in, Shape out, Window2d window)
      : Layer(index, std::move(in), std::move(out)), w_(window) {}
  std::string kind() const override { return "max_pool2d"; }

  absl::Status Forward(Device& dev, absl::Span<const Tensor>, const Tensor& x,
                       const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override {
    const int64_t batch = x.shape()[0];
    const Shape out = output_shape().WithLeading(batch);
    ASSIGN_OR_RETURN(*y, dev.Allocate(out, DType::kF32));
    ASSIGN_OR_RETURN(Tensor argmax, dev.Allocate(out, DType::kI32));
    dev.MaxPool(x.f32(), batch * w_.channels, w_, y->f32(), argmax.i32());
    if (ctx.training) cache->tensors = {argmax};
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor>,
                        const LayerCache& cache, const Tensor& dy,
                        const PassContext&, Tensor* dx,
                        absl::Span<const Tensor>, bool) const override {
    if (dx == nullptr) return absl::OkStatus();
    const int64_t batch = dy.shape()[0];
    ASSIGN_OR_RETURN(
        *dx, dev.Allocate(input_shape().WithLeading(batch), DType::kF32));
    dev.MaxPoolBackward(dy.f32(), cache.tensors[0].i32(), batch * w_.channels,
                        w_, dx->f32());
    return absl::OkStatus();
  }

 private:
  Window2d w_;
};

// ---------------------------------------------------------------- LayerNorm

class LayerNormLayer final : public Layer {
 public:
  LayerNormLayer(int index, Shape shape, int64_t cols, float eps)
      : Layer(index, shape, shape), cols_(cols), eps_(eps) {}
  std::string kind() const override { return "layer_norm"; }

  std::vector<ParamSpec> Params() const override {
    return {{"weight", Shape({cols_})}, {"bias", Shape({cols_})}};
  }

  void InitParams(uint64_t,
                  std::vector<std::vector<float>>* values) const override {
    std::fill((*values)[0].begin(), (*values)[0].end(), 1.0f);
    std::fill((*values)[1].begin(), (*values)[1].end(), 0.0f);
  }

  absl::Status Forward(Device& dev, absl::Span<const Tensor> params,
                       const Tensor& x, const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override {
    const int64_t rows = RowsOf(x, cols_);
    ASSIGN_OR_RETURN(*y, dev.Allocate(x.shape(), DType::kF32));
    ASSIGN_OR_RETURN(Tensor mean, dev.Allocate(Shape({rows}), DType::kF32));
    ASSIGN_OR_RETURN(Tensor rstd, dev.Allocate(Shape({rows}), DType::kF32));
    dev.LayerNorm(x.f32(), params[0].f32(), params[1].f32(), rows, cols_, eps_,
                  y->f32(), mean.f32(), rstd.f32());
    if (ctx.training) cache->tensors = {x, mean, rstd};
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor> params,
                        const LayerCache& cache, const Tensor& dy,
                        const PassContext&, Tensor* dx,
                        absl::Span<const Tensor> grads,
                        bool accumulate) const override {
    const Tensor& x = cache.tensors[0];
    const int64_t rows = RowsOf(x, cols_);
    float* dx_data = nullptr;
    if (dx != nullptr) {
      ASSIGN_OR_RETURN(*dx, dev.Allocate(x.shape(), DType::kF32));
      dx_data = dx->f32();
    }
    dev.LayerNormBackward(dy.f32(), x.f32(), params[0].f32(),
                          cache.tensors[1].f32(), cache.tensors[2].f32(), rows,
                          cols_, dx_data, grads[0].f32(), grads[1].f32(),
                          accumulate);
    return absl::OkStatus();
  }

 private:
  int64_t cols_;
  float eps_;
};

// ---------------------------------------------------------------- Delay

// Holds the thread for `ms`, as a compute layer of that cost would: a
// sleep wakes late by a scheduler-dependent margin (0.2 ms on average for
// 5 ms on the development VM), so sleep until 1 ms before the end and
// yield-spin through the rest.
void HoldThreadFor(double ms) {
  if (ms <= 0) return;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double, std::milli>(ms));
  const Clock::duration slack = std::chrono::milliseconds(1);
  if (Clock::now() + slack < end) std::this_thread::sleep_until(end - slack);
  while (Clock::now() < end) std::this_thread::yield();
}

class DelayLayer final : public Layer {
 public:
  DelayLayer(int index, Shape shape, double forward_ms, double backward_ms,
             double weight_ms)
      : Layer(index, shape, shape),
        forward_ms_(forward_ms),
        backward_ms_(backward_ms),
        weight_ms_(weight_ms) {}
  std::string kind() const override { return "delay"; }

  absl::Status Forward(Device&, absl::Span<const Tensor>, const Tensor& x,
                       const PassContext&, Tensor* y,
                       LayerCache*) const override {
    HoldThreadFor(forward_ms_);
    *y = x;
    return absl::OkStatus();
  }

  absl::Status Backward(Device&, absl::Span<const Tensor>, const LayerCache&,
                        const Tensor& dy, const PassContext&, Tensor* dx,
                        absl::Span<const Tensor>, bool) const override {
    HoldThreadFor(backward_ms_);
    if (dx != nullptr) *dx = dy;
    return absl::OkStatus();
  }

  // The weight gradient's part of the backward waits for W.
  absl::Status BackwardInput(Device&, absl::Span<const Tensor>,
                             const LayerCache&, const Tensor& dy,
                             const PassContext&, Tensor* dx,
                             absl::Span<const Tensor>, bool,
                             DeferredGrads* deferred) const override {
    const double later = deferred != nullptr ? weight_ms_ : 0;
    HoldThreadFor(backward_ms_ - later);
    if (deferred != nullptr) deferred->delay_ms += later;
    if (dx != nullptr) *dx = dy;
    return absl::OkStatus();
  }

 private:
  double forward_ms_, backward_ms_, weight_ms_;
};

// ---------------------------------------------------------------- Factories
// The spec and its shapes were checked by InferLayerShape
// (pipeline/shapes.h), the one place the layers' shape rules live; these
// only build.

using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

Window2d WindowOf(const Shape& in, int64_t kernel, int64_t stride,
                  int64_t padding) {
  return Window2d{in[0], in[1], in[2], kernel, stride, padding};
}

LayerOr MakeLinear(const LinearSpec& s, int index, const Shape& in,
                   const Shape& out, const TensorShard& shard) {
  if (s.out_features() % shard.degree != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", index, "].linear.out_features=", s.out_features(),
        " cannot be split across a tensor-parallel degree of ", shard.degree));
  }
  std::vector<int64_t> dims = out.dims();
  if (!dims.empty()) dims.back() /= shard.degree;
  return std::unique_ptr<Layer>(std::make_unique<LinearLayer>(
      index, in, Shape(std::move(dims)), s.in_features(), s.out_features(),
      !s.has_bias() || s.bias(), shard));
}

LayerOr MakeConv2d(const Conv2dSpec& s, int index, const Shape& in,
                   const Shape& out) {
  const Window2d w = WindowOf(in, s.kernel_size(),
                              s.has_stride() ? s.stride() : 1, s.padding());
  return std::unique_ptr<Layer>(std::make_unique<Conv2dLayer>(
      index, in, out, w, s.out_channels(), !s.has_bias() || s.bias()));
}

LayerOr MakeMaxPool2d(const MaxPool2dSpec& s, int index, const Shape& in,
                      const Shape& out) {
  const Window2d w =
      WindowOf(in, s.kernel_size(),
               s.has_stride() ? s.stride() : s.kernel_size(), s.padding());
  return std::unique_ptr<Layer>(
      std::make_unique<MaxPool2dLayer>(index, in, out, w));
}

LayerOr MakeLayerNorm(const LayerNormSpec& s, int index, const Shape& in) {
  const float eps = s.has_eps() ? s.eps() : 1e-5f;
  return std::unique_ptr<Layer>(
      std::make_unique<LayerNormLayer>(index, in, s.normalized_shape(), eps));
}

// Builds the layer `spec` describes once its shapes are known good.
LayerOr Make(const LayerSpec& spec, int index, const Shape& in,
             const Shape& out, uint64_t seed, const TensorShard& shard) {
  switch (spec.kind_case()) {
    case LayerSpec::kLinear:
      return MakeLinear(spec.linear(), index, in, out, shard);
    case LayerSpec::kRelu:
      return std::unique_ptr<Layer>(std::make_unique<ReluLayer>(index, in));
    case LayerSpec::kGelu:
      return std::unique_ptr<Layer>(std::make_unique<GeluLayer>(index, in));
    case LayerSpec::kDropout:
      return std::unique_ptr<Layer>(
          std::make_unique<DropoutLayer>(index, in, spec.dropout().p(), seed));
    case LayerSpec::kFlatten:
      return std::unique_ptr<Layer>(std::make_unique<FlattenLayer>(index, in));
    case LayerSpec::kConv2D:
      return MakeConv2d(spec.conv2d(), index, in, out);
    case LayerSpec::kMaxPool2D:
      return MakeMaxPool2d(spec.max_pool2d(), index, in, out);
    case LayerSpec::kLayerNorm:
      return MakeLayerNorm(spec.layer_norm(), index, in);
    case LayerSpec::kDelay:
      return std::unique_ptr<Layer>(std::make_unique<DelayLayer>(
          index, in, spec.delay().forward_ms(), spec.delay().backward_ms(),
          spec.delay().weight_ms()));
    case LayerSpec::kTokenEmbedding:
    case LayerSpec::kPositionEmbedding:
    case LayerSpec::kCausalSelfAttention:
    case LayerSpec::kTransformerBlock:
      return MakeTransformerLayer(spec, index, in, out, seed, shard);
    case LayerSpec::kRmsNorm:
    case LayerSpec::kLlamaBlock:
      return MakeLlamaLayer(spec, index, in, seed, shard);
    case LayerSpec::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model.layers[", index, "] has no layer kind"));
}

}  // namespace

void Layer::InitParams(uint64_t, std::vector<std::vector<float>>*) const {}

namespace {

// The group a member's layer runs its collectives in: ctx's, when it is
// the shard's.
absl::Status CheckGroup(const PassContext& ctx, const TensorShard& shard,
                        int layer) {
  if (ctx.tensor != nullptr && ctx.tensor->size() == shard.degree &&
      ctx.tensor->rank() == shard.rank) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "layers.", layer, " is member ", shard.rank,
      " of a tensor-parallel group of ", shard.degree, " but runs in ",
      ctx.tensor == nullptr ? std::string("none")
                            : absl::StrCat("member ", ctx.tensor->rank(),
                                           " of ", ctx.tensor->size())));
}

// [rows, C] of a [..., C] tensor, when the rows split into `parts`.
absl::StatusOr<Tensor> AsRows(const Tensor& t, int parts, int layer) {
  const Shape& s = t.shape();
  const int64_t cols = s.rank() == 0 ? 1 : s[s.rank() - 1];
  const int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  if (rows % parts != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers.", layer, ": ", rows,
                     " positions do not split into sequence-parallel parts of ",
                     parts, " members"));
  }
  return t.Reshape(Shape({rows, cols}));
}

}  // namespace

absl::Status SumOverTensorGroup(Device& dev, const PassContext& ctx,
                                const TensorShard& shard, int layer,
                                const Tensor& t) {
  if (shard.degree == 1) return absl::OkStatus();
  RETURN_IF_ERROR(CheckGroup(ctx, shard, layer));
  return ctx.tensor->AllReduce(dev, t);
}

absl::StatusOr<Tensor> GatherSequence(Device& dev, const PassContext& ctx,
                                      const TensorShard& shard, int layer,
                                      const Tensor& part) {
  RETURN_IF_ERROR(CheckGroup(ctx, shard, layer));
  ASSIGN_OR_RETURN(const Tensor rows, AsRows(part, 1, layer));
  ASSIGN_OR_RETURN(
      Tensor whole,
      dev.Allocate(Shape({rows.shape()[0] * shard.degree, rows.shape()[1]}),
                   DType::kF32));
  RETURN_IF_ERROR(ctx.tensor->AllGather(dev, part, whole));
  return whole;
}

absl::StatusOr<Tensor> ScatterSequence(Device& dev, const PassContext& ctx,
                                       const TensorShard& shard, int layer,
                                       const Tensor& whole) {
  RETURN_IF_ERROR(CheckGroup(ctx, shard, layer));
  ASSIGN_OR_RETURN(const Tensor rows, AsRows(whole, shard.degree, layer));
  ASSIGN_OR_RETURN(
      Tensor part,
      dev.Allocate(Shape({rows.shape()[0] / shard.degree, rows.shape()[1]}),
                   DType::kF32));
  RETURN_IF_ERROR(ctx.tensor->ReduceScatter(dev, whole, part));
  return part;
}

absl::StatusOr<Tensor> SequencePart(Device& dev, const TensorShard& shard,
                                    int layer, const Tensor& whole) {
  ASSIGN_OR_RETURN(const Tensor rows, AsRows(whole, shard.degree, layer));
  const int64_t n = rows.shape()[0] / shard.degree;
  ASSIGN_OR_RETURN(Tensor part,
                   dev.Allocate(Shape({n, rows.shape()[1]}), DType::kF32));
  dev.Copy(rows.Rows(shard.rank * n, (shard.rank + 1) * n), part);
  return part;
}

void InitShards(const Layer& layer, std::vector<std::vector<float>>* values,
                const std::function<void(int, const std::string&, const Shape&,
                                         std::vector<float>*)>& fill) {
  const std::vector<ParamSpec> specs = layer.Params();
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSplit split = layer.SplitOf(static_cast<int>(i));
    const Shape whole = WholeShape(specs[i].shape, split, layer.shard().degree);
    std::vector<float> v(static_cast<size_t>(whole.numel()));
    fill(static_cast<int>(i), specs[i].name, whole, &v);
    (*values)[i] = ShardOfWhole(v, whole, split, layer.shard());
  }
}

Shape WholeShape(const Shape& shard, const ParamSplit& split, int degree) {
  if (split.dim < 0) return shard;
  std::vector<int64_t> dims = shard.dims();
  dims[split.dim] *= degree;
  return Shape(std::move(dims));
}

namespace {

// A split tensor as [outer, blocks, degree, part, inner]: member r holds
// [outer, blocks, part, inner] of it.
struct SplitView {
  int64_t outer = 1, blocks = 1, part = 1, inner = 1;
};

SplitView ViewOf(const Shape& whole, const ParamSplit& split, int degree) {
  SplitView v;
  for (int i = 0; i < split.dim; ++i) v.outer *= whole[i];
  for (int i = split.dim + 1; i < whole.rank(); ++i) v.inner *= whole[i];
  v.blocks = split.blocks;
  v.part = whole[split.dim] / (split.blocks * degree);
  return v;
}

// Copies member r's runs between the whole tensor and its part.
template <typename Fn>
void ForEachRun(const SplitView& v, int degree, int r, Fn&& copy) {
  const int64_t run = v.part * v.inner;
  int64_t at = 0;
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t b = 0; b < v.blocks; ++b) {
      const int64_t whole_at = ((o * v.blocks + b) * degree + r) * run;
      copy(whole_at, at, run);
      at += run;
    }
  }
}

}  // namespace

std::vector<float> ShardOfWhole(const std::vector<float>& whole,
                                const Shape& whole_shape,
                                const ParamSplit& split,
                                const TensorShard& shard) {
  if (split.dim < 0 || shard.degree == 1) return whole;
  const SplitView v = ViewOf(whole_shape, split, shard.degree);
  std::vector<float> part(whole.size() / shard.degree);
  ForEachRun(v, shard.degree, shard.rank,
             [&](int64_t from, int64_t to, int64_t n) {
               std::copy_n(whole.begin() + from, n, part.begin() + to);
             });
  return part;
}

std::vector<float> WholeOfShards(const std::vector<std::vector<float>>& parts,
                                 const Shape& whole_shape,
                                 const ParamSplit& split) {
  const int degree = static_cast<int>(parts.size());
  if (split.dim < 0 || degree == 1) return parts[0];
  const SplitView v = ViewOf(whole_shape, split, degree);
  std::vector<float> whole(static_cast<size_t>(whole_shape.numel()));
  for (int r = 0; r < degree; ++r) {
    ForEachRun(v, degree, r, [&](int64_t to, int64_t from, int64_t n) {
      std::copy_n(parts[r].begin() + from, n, whole.begin() + to);
    });
  }
  return whole;
}

absl::StatusOr<std::unique_ptr<Layer>> CreateLayer(const LayerSpec& spec,
                                                   int index, const Shape& in,
                                                   uint64_t seed,
                                                   const TensorShard& shard) {
  ASSIGN_OR_RETURN(
      SymbolicShape out,
      InferLayerShape(spec, index, SymbolicShape::Known(in.dims())));
  return Make(spec, index, in, Shape(out.dims), seed, shard);
}

void RunDeferredGrads(Device& device, const DeferredGrads& deferred) {
  for (const DeferredLinearGrad& g : deferred.linears) WeightGradNow(device, g);
  HoldThreadFor(deferred.delay_ms);
}

void LinearWeightGrad(Device& device, const Tensor& x, const Tensor& dy,
                      int64_t rows, int64_t in, int64_t out, const Tensor& dw,
                      const Tensor* db, bool accumulate,
                      DeferredGrads* deferred) {
  DeferredLinearGrad g{
      x,  dy,  dw,        db != nullptr ? *db : Tensor(), db != nullptr, rows,
      in, out, accumulate};
  if (deferred != nullptr) {
    deferred->linears.push_back(std::move(g));
  } else {
    WeightGradNow(device, g);
  }
}

}  // namespace aqueduct
