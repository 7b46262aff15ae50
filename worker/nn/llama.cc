#include "worker/nn/llama.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/nn/transformer.h"

namespace aqueduct {

void RopeTables(int64_t positions, int64_t head_dim, float theta,
                std::vector<float>* cos, std::vector<float>* sin) {
  const int64_t half = head_dim / 2;
  cos->resize(static_cast<size_t>(positions * half));
  sin->resize(cos->size());
  for (int64_t i = 0; i < half; ++i) {
    const float exponent =
        static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float inv_freq = 1.0f / std::pow(theta, exponent);
    for (int64_t t = 0; t < positions; ++t) {
      const float angle = static_cast<float>(t) * inv_freq;
      (*cos)[t * half + i] = std::cos(angle);
      (*sin)[t * half + i] = std::sin(angle);
    }
  }
}

namespace {

constexpr float kInitStddev = 0.02f;

// A device copy of host floats, shaped `shape`.
absl::StatusOr<Tensor> ToDevice(Device& dev, const std::vector<float>& host,
                                const Shape& shape) {
  ASSIGN_OR_RETURN(Tensor t, dev.Allocate(shape, DType::kF32));
  RETURN_IF_ERROR(dev.CopyFromHost(host.data(), t));
  return t;
}

// y[rows, out] = x[rows, in] W^T; W is [out, in].
void Project(Device& dev, const Tensor& x, int64_t rows, int64_t in,
             int64_t out, const Tensor& w, const Tensor& y) {
  dev.Gemm(false, true, rows, out, in, 1.0f, x.f32(), in, w.f32(), in, 0.0f,
           y.f32(), out);
}

// The backward of Project: dW (+)= dy^T x (now, or left in `deferred`),
// and dx = dy W, or dx += dy W when `add_dx`.
void ProjectBack(Device& dev, const Tensor& x, const Tensor& dy, int64_t rows,
                 int64_t in, int64_t out, const Tensor& w, const Tensor& dw,
                 bool accumulate, const Tensor* dx, bool add_dx,
                 DeferredGrads* deferred) {
  LinearWeightGrad(dev, x, dy, rows, in, out, dw, nullptr, accumulate,
                   deferred);
  if (dx == nullptr) return;
  dev.Gemm(false, false, rows, in, out, 1.0f, dy.f32(), out, w.f32(), in,
           add_dx ? 1.0f : 0.0f, dx->f32(), in);
}

// ---------------------------------------------------------------- RmsNorm

class RmsNormLayer final : public Layer {
 public:
  RmsNormLayer(int index, Shape shape, int64_t cols, float eps)
      : Layer(index, shape, shape), cols_(cols), eps_(eps) {}
  std::string kind() const override { return "rms_norm"; }

  std::vector<ParamSpec> Params() const override {
    return {{"weight", Shape({cols_})}};
  }

  void InitParams(uint64_t,
                  std::vector<std::vector<float>>* values) const override {
    std::fill((*values)[0].begin(), (*values)[0].end(), 1.0f);
  }

  absl::Status Forward(Device& dev, absl::Span<const Tensor> params,
                       const Tensor& x, const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override {
    const int64_t rows = x.numel() / cols_;
    ASSIGN_OR_RETURN(*y, dev.Allocate(x.shape(), DType::kF32));
    ASSIGN_OR_RETURN(Tensor rstd, dev.Allocate(Shape({rows}), DType::kF32));
    dev.RmsNorm(x.f32(), params[0].f32(), rows, cols_, eps_, y->f32(),
                rstd.f32());
    if (ctx.training) cache->tensors = {x, rstd};
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor> params,
                        const LayerCache& cache, const Tensor& dy,
                        const PassContext&, Tensor* dx,
                        absl::Span<const Tensor> grads,
                        bool accumulate) const override {
    const Tensor& x = cache.tensors[0];
    float* dx_data = nullptr;
    if (dx != nullptr) {
      ASSIGN_OR_RETURN(*dx, dev.Allocate(x.shape(), DType::kF32));
      dx_data = dx->f32();
    }
    dev.RmsNormBackward(dy.f32(), x.f32(), params[0].f32(),
                        cache.tensors[1].f32(), x.numel() / cols_, cols_,
                        dx_data, grads[0].f32(), accumulate);
    return absl::OkStatus();
  }

 private:
  int64_t cols_;
  float eps_;
};

// ------------------------------------------------------------- LlamaBlock

// Parameter slots, in Params() order.
enum Slot : int {
  kNorm1 = 0,
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kNorm2 = 5,
  kGate = 6,
  kUp = 7,
  kDown = 8,
};

// Cache slots of a training forward (LayerCache.tensors).
enum Kept : size_t {
  kX = 0,
  kX2 = 1,
  kQr = 2,  // q after the rotation, [B, T, C]
  kKr = 3,  // k after the rotation, [B, T, KV * hd]
  kVv = 4,
  kProbs = 5,  // [B, H, T, T]
  kMerged = 6,
  kGateOut = 7,
  kUpOut = 8,
};

class LlamaBlockLayer final : public Layer {
 public:
  struct Config {
    int64_t dim, heads, kv_heads, hidden;
    float theta, eps;
  };

  LlamaBlockLayer(int index, Shape shape, const Config& config)
      : Layer(index, shape, shape),
        c_(config),
        hd_(config.dim / config.heads),
        kv_width_(config.kv_heads * (config.dim / config.heads)),
        scale_(static_cast<float>(
            1.0 / std::sqrt(static_cast<double>(config.dim / config.heads)))) {
    RopeTables(shape[0], hd_, config.theta, &cos_, &sin_);
  }

  std::string kind() const override { return "llama_block"; }

  std::vector<ParamSpec> Params() const override {
    const int64_t c = c_.dim, f = c_.hidden;
    return {{"input_layernorm.weight", Shape({c})},
            {"self_attn.q_proj.weight", Shape({c, c})},
            {"self_attn.k_proj.weight", Shape({kv_width_, c})},
            {"self_attn.v_proj.weight", Shape({kv_width_, c})},
            {"self_attn.o_proj.weight", Shape({c, c})},
            {"post_attention_layernorm.weight", Shape({c})},
            {"mlp.gate_proj.weight", Shape({f, c})},
            {"mlp.up_proj.weight", Shape({f, c})},
            {"mlp.down_proj.weight", Shape({c, f})}};
  }

  void InitParams(uint64_t seed,
                  std::vector<std::vector<float>>* values) const override {
    for (size_t i = 0; i < values->size(); ++i) {
      auto& v = (*values)[i];
      if (i == kNorm1 || i == kNorm2) {
        std::fill(v.begin(), v.end(), 1.0f);
      } else {
        NormalInit(seed, index(), static_cast<int>(i), kInitStddev, &v);
      }
    }
  }

  absl::Status Forward(Device& dev, absl::Span<const Tensor> params,
                       const Tensor& x, const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override;

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
                             DeferredGrads* deferred) const override;

  double ForwardFlopsPerSample() const override {
    const double t = static_cast<double>(input_shape()[0]);
    const double c = static_cast<double>(c_.dim);
    const double kv = static_cast<double>(kv_width_);
    const double f = static_cast<double>(c_.hidden);
    return 2.0 * t * (2.0 * c * c + 2.0 * c * kv + 3.0 * c * f) +
           2.0 * t * t * c;
  }

 private:
  // One operand of the per-head products: head h's matrix for sample s
  // starts at base + s * stride + group(h) * head_step, rows ld apart.
  struct View {
    float* base;
    int64_t ld, stride, head_step;
    bool shared;  // a key/value tensor: head h reads kv head h / group
  };
  View QView(const Tensor& t) const {
    const int64_t len = t.shape()[1];
    return {t.f32(), c_.dim, len * c_.dim, hd_, false};
  }
  View KvView(const Tensor& t) const {
    const int64_t len = t.shape()[1];
    return {t.f32(), kv_width_, len * kv_width_, hd_, true};
  }
  View ScoreView(const Tensor& t) const {
    const int64_t len = t.shape()[2];
    return {t.f32(), len, c_.heads * len * len, len * len, false};
  }
  float* At(const View& v, int64_t h) const {
    const int64_t group = c_.heads / c_.kv_heads;
    return v.base + (v.shared ? h / group : h) * v.head_step;
  }
  // For every query head h: C_h = op(A_h) op(B_h) over the batch; a
  // shared C (a key/value gradient) sums over its group's heads.
  void PerHead(Device& dev, int64_t batch, bool ta, bool tb, int64_t m,
               int64_t n, int64_t k, const View& a, const View& b,
               const View& c) const {
    const int64_t group = c_.heads / c_.kv_heads;
    for (int64_t h = 0; h < c_.heads; ++h) {
      const float beta = c.shared && h % group != 0 ? 1.0f : 0.0f;
      dev.GemmStridedBatched(ta, tb, m, n, k, 1.0f, At(a, h), a.ld, a.stride,
                             At(b, h), b.ld, b.stride, beta, At(c, h), c.ld,
                             c.stride, batch);
    }
  }

  absl::StatusOr<Tensor> Norm(Device& dev, const Tensor& gamma, const Tensor& x,
                              Tensor* rstd) const {
    const int64_t rows = x.numel() / c_.dim;
    ASSIGN_OR_RETURN(Tensor y, dev.Allocate(x.shape(), DType::kF32));
    ASSIGN_OR_RETURN(*rstd, dev.Allocate(Shape({rows}), DType::kF32));
    dev.RmsNorm(x.f32(), gamma.f32(), rows, c_.dim, c_.eps, y.f32(),
                rstd->f32());
    return y;
  }
  // Rotates q ([B, T, heads * hd]) and k ([B, T, kv_heads * hd]) in
  // place, or back, with one copy of the tables on the device.
  absl::Status Rotate(Device& dev, const Tensor& q, const Tensor& k,
                      bool inverse) const {
    const int64_t len = q.shape()[1], rows = q.shape()[0] * len;
    const Shape table({len, hd_ / 2});
    ASSIGN_OR_RETURN(Tensor cos, ToDevice(dev, cos_, table));
    ASSIGN_OR_RETURN(Tensor sin, ToDevice(dev, sin_, table));
    dev.Rope(q.f32(), rows, len, c_.heads, hd_, cos.f32(), sin.f32(), inverse);
    dev.Rope(k.f32(), rows, len, c_.kv_heads, hd_, cos.f32(), sin.f32(),
             inverse);
    return absl::OkStatus();
  }
  absl::StatusOr<Tensor> Probabilities(Device& dev, const Tensor& q,
                                       const Tensor& k) const {
    const int64_t batch = q.shape()[0], len = q.shape()[1];
    ASSIGN_OR_RETURN(
        Tensor probs,
        dev.Allocate(Shape({batch, c_.heads, len, len}), DType::kF32));
    PerHead(dev, batch, false, true, len, len, hd_, QView(q), KvView(k),
            ScoreView(probs));
    dev.CausalSoftmax(probs.f32(), batch * c_.heads, len, scale_);
    return probs;
  }
  // The attention half: x2 = x + o_proj(attn(...)); fills kept[kQr..kMerged].
  absl::StatusOr<Tensor> AttentionForward(Device& dev,
                                          absl::Span<const Tensor> params,
                                          const Tensor& x,
                                          std::vector<Tensor>* kept) const;
  // The MLP half: y = x2 + down(swiglu(gate(h2), up(h2))); fills
  // kept[kGateOut], kept[kUpOut].
  absl::StatusOr<Tensor> MlpForward(Device& dev,
                                    absl::Span<const Tensor> params,
                                    const Tensor& x2,
                                    std::vector<Tensor>* kept) const;
  // From dy, the gradient of x2 (dy plus the MLP's input gradient).
  absl::StatusOr<Tensor> MlpBackward(Device& dev,
                                     absl::Span<const Tensor> params,
                                     const std::vector<Tensor>& kept,
                                     const Tensor& dy,
                                     absl::Span<const Tensor> grads,
                                     bool accumulate,
                                     DeferredGrads* deferred) const;
  // From dx2, the gradient of x (dx2 plus the attention's input gradient;
  // null dx: not needed).
  absl::Status AttentionBackward(Device& dev, absl::Span<const Tensor> params,
                                 const std::vector<Tensor>& kept,
                                 const Tensor& dx2, Tensor* dx,
                                 absl::Span<const Tensor> grads,
                                 bool accumulate,
                                 DeferredGrads* deferred) const;
  // dq, dk, dv from d(merged).
  absl::Status HeadsBackward(Device& dev, const std::vector<Tensor>& kept,
                             const Tensor& dmerged, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv) const;

  Config c_;
  int64_t hd_, kv_width_;
  float scale_;
  std::vector<float> cos_, sin_;
};

absl::StatusOr<Tensor> LlamaBlockLayer::AttentionForward(
    Device& dev, absl::Span<const Tensor> params, const Tensor& x,
    std::vector<Tensor>* kept) const {
  const int64_t batch = x.shape()[0], len = x.shape()[1];
  const int64_t rows = batch * len, c = c_.dim;
  Tensor rstd;
  ASSIGN_OR_RETURN(Tensor h1, Norm(dev, params[kNorm1], x, &rstd));
  ASSIGN_OR_RETURN(Tensor q, dev.Allocate(x.shape(), DType::kF32));
  const Shape kv_shape({batch, len, kv_width_});
  ASSIGN_OR_RETURN(Tensor k, dev.Allocate(kv_shape, DType::kF32));
  ASSIGN_OR_RETURN(Tensor v, dev.Allocate(kv_shape, DType::kF32));
  Project(dev, h1, rows, c, c, params[kQ], q);
  Project(dev, h1, rows, c, kv_width_, params[kK], k);
  Project(dev, h1, rows, c, kv_width_, params[kV], v);
  RETURN_IF_ERROR(Rotate(dev, q, k, false));
  ASSIGN_OR_RETURN(Tensor probs, Probabilities(dev, q, k));
  ASSIGN_OR_RETURN(Tensor merged, dev.Allocate(x.shape(), DType::kF32));
  PerHead(dev, batch, false, false, len, hd_, len, ScoreView(probs), KvView(v),
          QView(merged));
  ASSIGN_OR_RETURN(Tensor x2, dev.Allocate(x.shape(), DType::kF32));
  Project(dev, merged, rows, c, c, params[kO], x2);
  dev.Axpby(x.numel(), 1.0f, x.f32(), 1.0f, x2.f32());
  (*kept)[kQr] = q;
  (*kept)[kKr] = k;
  (*kept)[kVv] = v;
  (*kept)[kProbs] = probs;
  (*kept)[kMerged] = merged;
  return x2;
}

absl::StatusOr<Tensor> LlamaBlockLayer::MlpForward(
    Device& dev, absl::Span<const Tensor> params, const Tensor& x2,
    std::vector<Tensor>* kept) const {
  const int64_t batch = x2.shape()[0], len = x2.shape()[1];
  const int64_t rows = batch * len, c = c_.dim, f = c_.hidden;
  Tensor rstd;
  ASSIGN_OR_RETURN(Tensor h2, Norm(dev, params[kNorm2], x2, &rstd));
  const Shape wide({batch, len, f});
  ASSIGN_OR_RETURN(Tensor gate, dev.Allocate(wide, DType::kF32));
  ASSIGN_OR_RETURN(Tensor up, dev.Allocate(wide, DType::kF32));
  Project(dev, h2, rows, c, f, params[kGate], gate);
  Project(dev, h2, rows, c, f, params[kUp], up);
  ASSIGN_OR_RETURN(Tensor act, dev.Allocate(wide, DType::kF32));
  dev.SwiGlu(gate.f32(), up.f32(), act.f32(), act.numel());
  ASSIGN_OR_RETURN(Tensor y, dev.Allocate(x2.shape(), DType::kF32));
  Project(dev, act, rows, f, c, params[kDown], y);
  dev.Axpby(x2.numel(), 1.0f, x2.f32(), 1.0f, y.f32());
  (*kept)[kGateOut] = gate;
  (*kept)[kUpOut] = up;
  return y;
}

absl::Status LlamaBlockLayer::Forward(Device& dev,
                                      absl::Span<const Tensor> params,
                                      const Tensor& x, const PassContext& ctx,
                                      Tensor* y, LayerCache* cache) const {
  std::vector<Tensor> kept(kUpOut + 1);
  kept[kX] = x;
  ASSIGN_OR_RETURN(kept[kX2], AttentionForward(dev, params, x, &kept));
  ASSIGN_OR_RETURN(*y, MlpForward(dev, params, kept[kX2], &kept));
  if (!ctx.training) return absl::OkStatus();
  cache->recompute = ctx.recompute;
  if (ctx.recompute == Recompute::kFull) kept.resize(1);
  if (ctx.recompute == Recompute::kSelective) kept[kProbs] = Tensor();
  cache->tensors = std::move(kept);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> LlamaBlockLayer::MlpBackward(
    Device& dev, absl::Span<const Tensor> params,
    const std::vector<Tensor>& kept, const Tensor& dy,
    absl::Span<const Tensor> grads, bool accumulate,
    DeferredGrads* deferred) const {
  const Tensor& x2 = kept[kX2];
  const int64_t rows = x2.numel() / c_.dim, c = c_.dim, f = c_.hidden;
  const Tensor& gate = kept[kGateOut];
  const Tensor& up = kept[kUpOut];
  ASSIGN_OR_RETURN(Tensor act, dev.Allocate(gate.shape(), DType::kF32));
  dev.SwiGlu(gate.f32(), up.f32(), act.f32(), act.numel());
  ASSIGN_OR_RETURN(Tensor dact, dev.Allocate(gate.shape(), DType::kF32));
  ProjectBack(dev, act, dy, rows, f, c, params[kDown], grads[kDown], accumulate,
              &dact, false, deferred);
  ASSIGN_OR_RETURN(Tensor dgate, dev.Allocate(gate.shape(), DType::kF32));
  ASSIGN_OR_RETURN(Tensor dup, dev.Allocate(gate.shape(), DType::kF32));
  dev.SwiGluBackward(gate.f32(), up.f32(), dact.f32(), dgate.f32(), dup.f32(),
                     gate.numel());
  Tensor rstd;
  ASSIGN_OR_RETURN(Tensor h2, Norm(dev, params[kNorm2], x2, &rstd));
  ASSIGN_OR_RETURN(Tensor dh2, dev.Allocate(x2.shape(), DType::kF32));
  ProjectBack(dev, h2, dgate, rows, c, f, params[kGate], grads[kGate],
              accumulate, &dh2, false, deferred);
  ProjectBack(dev, h2, dup, rows, c, f, params[kUp], grads[kUp], accumulate,
              &dh2, true, deferred);
  ASSIGN_OR_RETURN(Tensor dx2, dev.Allocate(x2.shape(), DType::kF32));
  dev.RmsNormBackward(dh2.f32(), x2.f32(), params[kNorm2].f32(), rstd.f32(),
                      rows, c, dx2.f32(), grads[kNorm2].f32(), accumulate);
  dev.Axpby(dx2.numel(), 1.0f, dy.f32(), 1.0f, dx2.f32());
  return dx2;
}

absl::Status LlamaBlockLayer::HeadsBackward(Device& dev,
                                            const std::vector<Tensor>& kept,
                                            const Tensor& dmerged,
                                            const Tensor& dq, const Tensor& dk,
                                            const Tensor& dv) const {
  const int64_t batch = dmerged.shape()[0], len = dmerged.shape()[1];
  const Tensor& probs = kept[kProbs];
  ASSIGN_OR_RETURN(Tensor scratch, dev.Allocate(probs.shape(), DType::kF32));
  // dv_g = sum over the group's heads of P_h^T dy_h.
  PerHead(dev, batch, true, false, len, hd_, len, ScoreView(probs),
          QView(dmerged), KvView(dv));
  // dP = dy v^T, then through the softmax.
  PerHead(dev, batch, false, true, len, len, hd_, QView(dmerged),
          KvView(kept[kVv]), ScoreView(scratch));
  dev.CausalSoftmaxBackward(probs.f32(), scratch.f32(), batch * c_.heads, len,
                            scale_);
  // dq_h = dS_h k_g; dk_g = sum over the group of dS_h^T q_h.
  PerHead(dev, batch, false, false, len, hd_, len, ScoreView(scratch),
          KvView(kept[kKr]), QView(dq));
  PerHead(dev, batch, true, false, len, hd_, len, ScoreView(scratch),
          QView(kept[kQr]), KvView(dk));
  return absl::OkStatus();
}

absl::Status LlamaBlockLayer::AttentionBackward(Device& dev,
                                                absl::Span<const Tensor> params,
                                                const std::vector<Tensor>& kept,
                                                const Tensor& dx2, Tensor* dx,
                                                absl::Span<const Tensor> grads,
                                                bool accumulate,
                                                DeferredGrads* deferred) const {
  const Tensor& x = kept[kX];
  const int64_t rows = x.numel() / c_.dim, c = c_.dim;
  ASSIGN_OR_RETURN(Tensor dmerged, dev.Allocate(x.shape(), DType::kF32));
  ProjectBack(dev, kept[kMerged], dx2, rows, c, c, params[kO], grads[kO],
              accumulate, &dmerged, false, deferred);
  ASSIGN_OR_RETURN(Tensor dq, dev.Allocate(x.shape(), DType::kF32));
  ASSIGN_OR_RETURN(Tensor dk, dev.Allocate(kept[kKr].shape(), DType::kF32));
  ASSIGN_OR_RETURN(Tensor dv, dev.Allocate(kept[kKr].shape(), DType::kF32));
  RETURN_IF_ERROR(HeadsBackward(dev, kept, dmerged, dq, dk, dv));
  RETURN_IF_ERROR(Rotate(dev, dq, dk, true));
  Tensor rstd;
  ASSIGN_OR_RETURN(Tensor h1, Norm(dev, params[kNorm1], x, &rstd));
  ASSIGN_OR_RETURN(Tensor dh1, dev.Allocate(x.shape(), DType::kF32));
  ProjectBack(dev, h1, dq, rows, c, c, params[kQ], grads[kQ], accumulate, &dh1,
              false, deferred);
  ProjectBack(dev, h1, dk, rows, c, kv_width_, params[kK], grads[kK],
              accumulate, &dh1, true, deferred);
  ProjectBack(dev, h1, dv, rows, c, kv_width_, params[kV], grads[kV],
              accumulate, &dh1, true, deferred);
  float* dx_data = nullptr;
  if (dx != nullptr) {
    ASSIGN_OR_RETURN(*dx, dev.Allocate(x.shape(), DType::kF32));
    dx_data = dx->f32();
  }
  dev.RmsNormBackward(dh1.f32(), x.f32(), params[kNorm1].f32(), rstd.f32(),
                      rows, c, dx_data, grads[kNorm1].f32(), accumulate);
  if (dx != nullptr) dev.Axpby(x.numel(), 1.0f, dx2.f32(), 1.0f, dx->f32());
  return absl::OkStatus();
}

absl::Status LlamaBlockLayer::BackwardInput(
    Device& dev, absl::Span<const Tensor> params, const LayerCache& cache,
    const Tensor& dy, const PassContext& ctx, Tensor* dx,
    absl::Span<const Tensor> grads, bool accumulate,
    DeferredGrads* deferred) const {
  std::vector<Tensor> kept = cache.tensors;
  if (cache.recompute == Recompute::kFull) {
    PassContext again = ctx;
    again.recompute = Recompute::kNone;
    LayerCache redone;
    Tensor y;
    RETURN_IF_ERROR(Forward(dev, params, kept[kX], again, &y, &redone));
    kept = std::move(redone.tensors);
  }
  if (!kept[kProbs].defined()) {
    ASSIGN_OR_RETURN(kept[kProbs], Probabilities(dev, kept[kQr], kept[kKr]));
  }
  ASSIGN_OR_RETURN(Tensor dx2, MlpBackward(dev, params, kept, dy, grads,
                                           accumulate, deferred));
  return AttentionBackward(dev, params, kept, dx2, dx, grads, accumulate,
                           deferred);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Layer>> MakeLlamaLayer(
    const LayerSpec& spec, int index, const Shape& in, uint64_t,
    const TensorShard& shard) {
  if (shard.degree > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", index,
        "]: the LLaMA layers are not tensor-parallel (tensor degree ",
        shard.degree, ")"));
  }
  if (spec.has_rms_norm()) {
    const auto& s = spec.rms_norm();
    return std::unique_ptr<Layer>(std::make_unique<RmsNormLayer>(
        index, in, s.dim(), s.has_eps() ? s.eps() : 1e-6f));
  }
  if (!spec.has_llama_block()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.layers[", index, "] is not a LLaMA layer"));
  }
  const auto& s = spec.llama_block();
  LlamaBlockLayer::Config config;
  config.dim = s.dim();
  config.heads = s.heads();
  config.kv_heads = s.has_kv_heads() ? s.kv_heads() : s.heads();
  config.hidden = s.hidden();
  config.theta = s.has_rope_theta() ? s.rope_theta() : 10000.0f;
  config.eps = s.has_eps() ? s.eps() : 1e-6f;
  return std::unique_ptr<Layer>(
      std::make_unique<LlamaBlockLayer>(index, in, config));
}

}  // namespace aqueduct
