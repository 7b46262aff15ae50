#include "worker/nn/transformer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/device/dropout_hash.h"
#include "common/status.h"

namespace aqueduct {

uint64_t MixKey(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t z = seed ^ 0x6A09E667F3BCC909ull;
  for (uint64_t v : {a, b}) {
    z += v * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
  }
  return z;
}

void NormalInit(uint64_t seed, int layer, int param, float stddev,
                std::vector<float>* out) {
  const uint64_t key = MixKey(seed, static_cast<uint64_t>(layer) + 1,
                              static_cast<uint64_t>(param) + 1);
  constexpr double kTwoPi = 6.283185307179586;
  for (size_t i = 0; i < out->size(); i += 2) {
    // u1 in (0, 1], so the logarithm is finite.
    const double u1 = 1.0 - DropoutUniform(key, i);
    const double u2 = DropoutUniform(key, i + 1);
    const double r = stddev * std::sqrt(-2.0 * std::log(u1));
    (*out)[i] = static_cast<float>(r * std::cos(kTwoPi * u2));
    if (i + 1 < out->size()) {
      (*out)[i + 1] = static_cast<float>(r * std::sin(kTwoPi * u2));
    }
  }
}

namespace {

constexpr float kInitStddev = 0.02f;

// Dropout sites of a layer; each draws its own mask.
enum DropoutSite : uint64_t {
  kAttentionWeights = 1,  // softmax(q k^T) before it weights v
  kAttentionOutput = 2,   // after attn.c_proj (the residual dropout)
  kMlpOutput = 3,         // after mlp.c_proj
};

// Dropout with probability p at the sites of layer `layer`.
class SiteDropout {
 public:
  SiteDropout(float p, uint64_t seed, int layer)
      : p_(p), seed_(seed), layer_(layer) {}

  bool active(const PassContext& ctx) const { return ctx.training && p_ > 0; }

  // y = dropout(x) over n elements of a (micro)batch whose samples hold
  // `per_sample` elements each; y may be x. Backward applies the same call
  // to the gradient (the mask is a function of the key and the index).
  void Apply(Device& dev, DropoutSite site, const PassContext& ctx,
             const float* x, float* y, int64_t n, int64_t per_sample) const {
    ApplyAt(dev, site, ctx, x, y, n,
            ctx.sample_offset * static_cast<uint64_t>(per_sample));
  }
  // As Apply, x[0] being element `first` of the whole minibatch's site.
  void ApplyAt(Device& dev, DropoutSite site, const PassContext& ctx,
               const float* x, float* y, int64_t n, uint64_t first) const {
    // DropoutLayer's key is MixKey(seed, layer + 0x100000, minibatch); the
    // site in the high bits keeps these apart from it and from each other.
    const uint64_t key =
        MixKey(seed_, (site << 40) + 0x100000 + static_cast<uint64_t>(layer_),
               ctx.minibatch);
    dev.Dropout(x, y, n, p_, key, first);
  }

 private:
  float p_;
  uint64_t seed_;
  int layer_;
};

// y[rows, out] = x[rows, in] W^T (+ b when b is not null); W is [out, in].
void LinearForward(Device& dev, const float* x, int64_t rows, int64_t in,
                   int64_t out, const Tensor& w, const Tensor* b, float* y) {
  dev.Gemm(false, true, rows, out, in, 1.0f, x, in, w.f32(), in, 0.0f, y, out);
  if (b != nullptr) dev.AddBias(y, b->f32(), rows, out, false);
}

// The backward of LinearForward: dW = dy^T x and db = sum of dy's rows
// (written, or added when accumulating; left in `deferred` when it is not
// null), then dx = dy W when dx is not null. dx may alias x when nothing
// is deferred: it is written after the last read of x.
void LinearBackward(Device& dev, const Tensor& x, const Tensor& dy,
                    int64_t rows, int64_t in, int64_t out, const Tensor& w,
                    const Tensor& dw, const Tensor* db, bool accumulate,
                    float* dx, DeferredGrads* deferred) {
  LinearWeightGrad(dev, x, dy, rows, in, out, dw, db, accumulate, deferred);
  if (dx != nullptr) {
    dev.Gemm(false, false, rows, in, out, 1.0f, dy.f32(), out, w.f32(), in,
             0.0f, dx, in);
  }
}

// Where a linear map's dx goes: over its input x when nothing is deferred
// (x is not needed after), else a buffer of its own (x is W's).
absl::StatusOr<Tensor> InputGradBuffer(Device& dev, const Tensor& x,
                                       const DeferredGrads* deferred) {
  if (deferred == nullptr) return x;
  return dev.Allocate(x.shape(), DType::kF32);
}

// How each tensor-parallel parameter is split, by name (the others are
// whole on every member).
ParamSplit SplitByName(const std::string& name) {
  if (name == "attn.c_attn.weight" || name == "attn.c_attn.bias") {
    return {0, 3};  // q, k and v, each split by heads
  }
  if (name == "mlp.c_fc.weight" || name == "mlp.c_fc.bias") return {0, 1};
  if (name == "attn.c_proj.weight" || name == "mlp.c_proj.weight") {
    return {1, 1};
  }
  return {};
}

// One operand of the per-head GEMMs: head h's matrix for sample s starts at
// base + s * stride + h * head_step, its rows ld apart.
struct HeadView {
  float* base;
  int64_t ld;
  int64_t stride;
  int64_t head_step;
};

// For every head, C_h = op(A_h) op(B_h) over the batch (beta 0).
void PerHeadGemm(Device& dev, int64_t heads, int64_t batch, bool trans_a,
                 bool trans_b, int64_t m, int64_t n, int64_t k,
                 const HeadView& a, const HeadView& b, const HeadView& c) {
  for (int64_t h = 0; h < heads; ++h) {
    dev.GemmStridedBatched(trans_a, trans_b, m, n, k, 1.0f,
                           a.base + h * a.head_step, a.ld, a.stride,
                           b.base + h * b.head_step, b.ld, b.stride, 0.0f,
                           c.base + h * c.head_step, c.ld, c.stride, batch);
  }
}

// The tensors of an attention (c_attn then c_proj; biases may be null), as
// parameters or as their gradients.
struct AttentionTensors {
  const Tensor* attn_w;
  const Tensor* attn_b;
  const Tensor* proj_w;
  const Tensor* proj_b;
};

// What an attention forward keeps for its backward, besides its input.
struct AttentionSaved {
  Tensor qkv;     // [B, T, 3C]: q, k, v side by side
  Tensor probs;   // [B, H, T, T]: softmax weights, before dropout
  Tensor merged;  // [B, T, C]: the heads' outputs, the input of c_proj
};

// nanoGPT's CausalSelfAttention over [B, T, C], shared by the attention
// layer and the block. Heads are strided views of qkv and of the merged
// output (row stride 3C or C): no per-head copies. Tensor-parallel, this
// member's heads: qkv [B, T, 3I] and merged [B, T, I], I = C / t.
class Attention {
 public:
  Attention(int64_t dim, int64_t heads, const SiteDropout& dropout,
            const TensorShard& shard, int layer)
      : dim_(dim),
        heads_(heads),
        local_heads_(heads / shard.degree),
        head_dim_(dim / heads),
        inner_(dim / shard.degree),
        first_head_(shard.rank * (heads / shard.degree)),
        scale_(static_cast<float>(1.0 /
                                  std::sqrt(static_cast<double>(dim / heads)))),
        dropout_(dropout),
        shard_(shard),
        layer_(layer) {}

  // out = attn(h). `saved` is filled in any case (temporaries when not
  // training). Sequence-parallel (shard.sequence), `out` is c_proj's
  // partial output: no sum, bias or dropout (the block's, on its rows);
  // and Backward takes dy after the dropout and leaves dh unsummed.
  absl::Status Forward(Device& dev, const AttentionTensors& w, const Tensor& h,
                       const PassContext& ctx, Tensor* out,
                       AttentionSaved* saved) const;

  // The causal softmax of q k^T / sqrt(hd) per head, from qkv: the
  // attention weights before dropout, [B, H/t, T, T].
  absl::StatusOr<Tensor> Probabilities(Device& dev, const Tensor& qkv) const;

  // From dy (left unchanged), dh (allocated and written when not null) and
  // the parameter gradients (written, or added to when accumulating; the
  // projections' left in `deferred` when it is not null). Recomputes the
  // attention weights when `saved.probs` is undefined (selective
  // recomputation).
  absl::Status Backward(Device& dev, const AttentionTensors& w,
                        const AttentionSaved& saved, const Tensor& h,
                        const Tensor& dy, const PassContext& ctx, Tensor* dh,
                        const AttentionTensors& grads, bool accumulate,
                        DeferredGrads* deferred) const;

  // The projections' 2 * params * T, plus q k^T and att v over the causal
  // half of the [T, T] scores.
  double FlopsPerSample(int64_t t) const {
    const double td = static_cast<double>(t), c = static_cast<double>(dim_);
    return (2.0 * td * (4.0 * c * c) + 2.0 * td * td * c) / shard_.degree;
  }

 private:
  // Part 0, 1 or 2 (q, k, v) of a [B, T, 3C] tensor, per head.
  HeadView Qkv(const Tensor& t, int part) const {
    const int64_t len = t.shape()[1];
    return {t.f32() + part * inner_, 3 * inner_, len * 3 * inner_, head_dim_};
  }
  // [B, H, T, T] scores or probabilities, per head.
  HeadView Scores(const Tensor& t) const {
    const int64_t len = t.shape()[2];
    return {t.f32(), len, local_heads_ * len * len, len * len};
  }
  // [B, T, I] with head h in columns [h * hd, (h + 1) * hd).
  HeadView Merged(const Tensor& t) const {
    const int64_t len = t.shape()[1];
    return {t.f32(), inner_, len * inner_, head_dim_};
  }
  // Dropout of the attention weights x ([B, H/t, T, T]) into y, each
  // element masked as the whole layer's element of its head.
  void WeightsDropout(Device& dev, const PassContext& ctx, const float* x,
                      float* y, int64_t batch, int64_t len) const;
  void HeadsBackward(Device& dev, const AttentionSaved& saved,
                     const Tensor& dmerged, const PassContext& ctx,
                     const Tensor& scratch, const Tensor& dqkv) const;

  int64_t dim_, heads_, local_heads_, head_dim_, inner_, first_head_;
  float scale_;
  SiteDropout dropout_;
  TensorShard shard_;
  int layer_;
};

void Attention::WeightsDropout(Device& dev, const PassContext& ctx,
                               const float* x, float* y, int64_t batch,
                               int64_t len) const {
  const int64_t per_head = len * len;
  if (shard_.degree == 1) {
    dropout_.Apply(dev, kAttentionWeights, ctx, x, y, batch * heads_ * per_head,
                   heads_ * per_head);
    return;
  }
  const int64_t local = local_heads_ * per_head;
  for (int64_t s = 0; s < batch; ++s) {
    const uint64_t sample = ctx.sample_offset + static_cast<uint64_t>(s);
    const uint64_t first = (sample * static_cast<uint64_t>(heads_) +
                            static_cast<uint64_t>(first_head_)) *
                           static_cast<uint64_t>(per_head);
    dropout_.ApplyAt(dev, kAttentionWeights, ctx, x + s * local, y + s * local,
                     local, first);
  }
}

absl::Status Attention::Forward(Device& dev, const AttentionTensors& w,
                                const Tensor& h, const PassContext& ctx,
                                Tensor* out, AttentionSaved* saved) const {
  const int64_t batch = h.shape()[0], len = h.shape()[1];
  const int64_t rows = batch * len;
  ASSIGN_OR_RETURN(saved->qkv,
                   dev.Allocate(Shape({batch, len, 3 * inner_}), DType::kF32));
  LinearForward(dev, h.f32(), rows, dim_, 3 * inner_, *w.attn_w, w.attn_b,
                saved->qkv.f32());
  ASSIGN_OR_RETURN(saved->probs, Probabilities(dev, saved->qkv));
  Tensor weights = saved->probs;
  if (dropout_.active(ctx)) {
    ASSIGN_OR_RETURN(weights, dev.Allocate(saved->probs.shape(), DType::kF32));
    WeightsDropout(dev, ctx, saved->probs.f32(), weights.f32(), batch, len);
  }
  // y = P v per head, written straight into the merged [B, T, I] layout.
  ASSIGN_OR_RETURN(saved->merged,
                   dev.Allocate(Shape({batch, len, inner_}), DType::kF32));
  PerHeadGemm(dev, local_heads_, batch, false, false, len, head_dim_, len,
              Scores(weights), Qkv(saved->qkv, 2), Merged(saved->merged));
  // c_proj, row-parallel: the members' partial outputs summed, then the
  // bias once.
  ASSIGN_OR_RETURN(*out, dev.Allocate(Shape({batch, len, dim_}), DType::kF32));
  LinearForward(dev, saved->merged.f32(), rows, inner_, dim_, *w.proj_w,
                nullptr, out->f32());
  // Sequence-parallel: the block reduce-scatters, adds the bias and drops
  // out on its rows.
  if (shard_.sequence) return absl::OkStatus();
  RETURN_IF_ERROR(SumOverTensorGroup(dev, ctx, shard_, layer_, *out));
  if (w.proj_b != nullptr) {
    dev.AddBias(out->f32(), w.proj_b->f32(), rows, dim_, false);
  }
  if (dropout_.active(ctx)) {
    dropout_.Apply(dev, kAttentionOutput, ctx, out->f32(), out->f32(),
                   rows * dim_, len * dim_);
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Attention::Probabilities(Device& dev,
                                                const Tensor& qkv) const {
  const int64_t batch = qkv.shape()[0], len = qkv.shape()[1];
  // S = q k^T per head, then P = causal softmax of S / sqrt(hd).
  ASSIGN_OR_RETURN(
      Tensor probs,
      dev.Allocate(Shape({batch, local_heads_, len, len}), DType::kF32));
  PerHeadGemm(dev, local_heads_, batch, false, true, len, len, head_dim_,
              Qkv(qkv, 0), Qkv(qkv, 1), Scores(probs));
  dev.CausalSoftmax(probs.f32(), batch * local_heads_, len, scale_);
  return probs;
}

absl::Status Attention::Backward(Device& dev, const AttentionTensors& w,
                                 const AttentionSaved& kept, const Tensor& h,
                                 const Tensor& dy, const PassContext& ctx,
                                 Tensor* dh, const AttentionTensors& grads,
                                 bool accumulate,
                                 DeferredGrads* deferred) const {
  const int64_t batch = h.shape()[0], len = h.shape()[1];
  const int64_t rows = batch * len;
  AttentionSaved saved = kept;
  if (!saved.probs.defined()) {
    ASSIGN_OR_RETURN(saved.probs, Probabilities(dev, saved.qkv));
  }
  Tensor dout = dy;
  if (dropout_.active(ctx) && !shard_.sequence) {
    ASSIGN_OR_RETURN(dout, dev.Allocate(dy.shape(), DType::kF32));
    dropout_.Apply(dev, kAttentionOutput, ctx, dy.f32(), dout.f32(),
                   rows * dim_, len * dim_);
  }
  ASSIGN_OR_RETURN(Tensor dmerged,
                   dev.Allocate(saved.merged.shape(), DType::kF32));
  LinearBackward(dev, saved.merged, dout, rows, inner_, dim_, *w.proj_w,
                 *grads.proj_w, grads.proj_b, accumulate, dmerged.f32(),
                 deferred);
  ASSIGN_OR_RETURN(Tensor dqkv, dev.Allocate(saved.qkv.shape(), DType::kF32));
  ASSIGN_OR_RETURN(Tensor scratch,
                   dev.Allocate(saved.probs.shape(), DType::kF32));
  HeadsBackward(dev, saved, dmerged, ctx, scratch, dqkv);
  float* dh_data = nullptr;
  if (dh != nullptr) {
    ASSIGN_OR_RETURN(*dh, dev.Allocate(h.shape(), DType::kF32));
    dh_data = dh->f32();
  }
  LinearBackward(dev, h, dqkv, rows, dim_, 3 * inner_, *w.attn_w, *grads.attn_w,
                 grads.attn_b, accumulate, dh_data, deferred);
  // c_attn is column-parallel: the members' parts of dh summed (by the
  // block's reduce-scatter when sequence-parallel).
  if (dh != nullptr && !shard_.sequence) {
    RETURN_IF_ERROR(SumOverTensorGroup(dev, ctx, shard_, layer_, *dh));
  }
  return absl::OkStatus();
}

// From d(merged), dqkv. `scratch` ([B, H, T, T]) holds in turn the dropped
// weights, their gradient and the scores' gradient.
void Attention::HeadsBackward(Device& dev, const AttentionSaved& saved,
                              const Tensor& dmerged, const PassContext& ctx,
                              const Tensor& scratch, const Tensor& dqkv) const {
  const int64_t batch = dmerged.shape()[0], len = dmerged.shape()[1];
  const bool dropping = dropout_.active(ctx);
  // dv = P'^T dy per head, P' the weights the forward used (dropped).
  if (dropping) {
    WeightsDropout(dev, ctx, saved.probs.f32(), scratch.f32(), batch, len);
  }
  PerHeadGemm(dev, local_heads_, batch, true, false, len, head_dim_, len,
              Scores(dropping ? scratch : saved.probs), Merged(dmerged),
              Qkv(dqkv, 2));
  // dP' = dy v^T, then through the dropout mask and the softmax.
  PerHeadGemm(dev, local_heads_, batch, false, true, len, len, head_dim_,
              Merged(dmerged), Qkv(saved.qkv, 2), Scores(scratch));
  if (dropping) {
    WeightsDropout(dev, ctx, scratch.f32(), scratch.f32(), batch, len);
  }
  dev.CausalSoftmaxBackward(saved.probs.f32(), scratch.f32(),
                            batch * local_heads_, len, scale_);
  // dq = dS k and dk = dS^T q.
  PerHeadGemm(dev, local_heads_, batch, false, false, len, head_dim_, len,
              Scores(scratch), Qkv(saved.qkv, 1), Qkv(dqkv, 0));
  PerHeadGemm(dev, local_heads_, batch, true, false, len, head_dim_, len,
              Scores(scratch), Qkv(saved.qkv, 0), Qkv(dqkv, 1));
}

// The tensor at `slot` of a layer's parameters (or gradients); null for an
// absent one (slot -1: a bias the layer does not have).
const Tensor* At(absl::Span<const Tensor> tensors, int slot) {
  return slot < 0 ? nullptr : &tensors[slot];
}

// What a forward keeps for backward under `mode`: `all` (the input
// first); selective: not the attention weights (at `probs`, left
// undefined); full: the input alone.
void Keep(Recompute mode, std::vector<Tensor> all, size_t probs,
          LayerCache* cache) {
  cache->recompute = mode;
  if (mode == Recompute::kFull) all.resize(1);
  if (mode == Recompute::kSelective) all[probs] = Tensor();
  cache->tensors = std::move(all);
}

// Full recomputation: the layer's forward again from the input `cache`
// kept, into `redone` (nothing to do unless the forward kept only that).
absl::Status Redo(const Layer& layer, Device& dev,
                  absl::Span<const Tensor> params, const LayerCache& cache,
                  const PassContext& ctx, LayerCache* redone) {
  if (cache.recompute != Recompute::kFull) return absl::OkStatus();
  PassContext again = ctx;
  again.recompute = Recompute::kNone;
  Tensor y;
  return layer.Forward(dev, params, cache.tensors[0], again, &y, redone);
}

// ---------------------------------------------------------- TokenEmbedding

class TokenEmbeddingLayer final : public Layer {
 public:
  // With a shard of degree t: vocabulary-parallel, member r holding rows
  // [r, r + 1) * V / t of the table; a token outside them contributes
  // zeros, and the members' outputs are summed (each token's row comes
  // from exactly one member, so the sum is that row, bit for bit).
  TokenEmbeddingLayer(int index, Shape in, Shape out, int64_t vocab,
                      int64_t dim, const TensorShard& shard)
      : Layer(index, std::move(in), std::move(out), shard),
        vocab_(vocab / shard.degree),
        first_(shard.rank * (vocab / shard.degree)),
        dim_(dim) {}

  std::string kind() const override { return "token_embedding"; }

  std::vector<ParamSpec> Params() const override {
    return {{"weight", Shape({vocab_, dim_})}};
  }

  ParamSplit SplitOf(int) const override {
    return shard().degree > 1 ? ParamSplit{0, 1} : ParamSplit{};
  }

  void InitParams(uint64_t seed,
                  std::vector<std::vector<float>>* values) const override {
    InitShards(
        *this, values,
        [&](int, const std::string&, const Shape&, std::vector<float>* v) {
          NormalInit(seed, index(), 0, kInitStddev, v);
        });
  }

  absl::Status Forward(Device& dev, absl::Span<const Tensor> params,
                       const Tensor& x, const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override {
    std::vector<int64_t> dims = x.shape().dims();
    dims.push_back(dim_);
    ASSIGN_OR_RETURN(*y, dev.Allocate(Shape(std::move(dims)), DType::kF32));
    ASSIGN_OR_RETURN(const Tensor ids, LocalIds(dev, x));
    dev.EmbeddingForward(ids.f32(), params[0].f32(), vocab_, x.numel(), dim_,
                         y->f32());
    RETURN_IF_ERROR(SumOverTensorGroup(dev, ctx, shard(), index(), *y));
    if (ctx.training) cache->tensors = {x};
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor>,
                        const LayerCache& cache, const Tensor& dy,
                        const PassContext&, Tensor* dx,
                        absl::Span<const Tensor> grads,
                        bool accumulate) const override {
    const Tensor& x = cache.tensors[0];
    ASSIGN_OR_RETURN(const Tensor ids, LocalIds(dev, x));
    if (!accumulate) dev.Fill(grads[0].f32(), grads[0].numel(), 0.0f);
    dev.EmbeddingBackward(ids.f32(), dy.f32(), vocab_, ids.numel(), dim_,
                          grads[0].f32());
    // Token ids have no gradient; a stage below gets zeros.
    if (dx != nullptr) {
      ASSIGN_OR_RETURN(*dx, dev.Zeros(ids.shape(), DType::kF32));
    }
    return absl::OkStatus();
  }

  double ForwardFlopsPerSample() const override {
    return static_cast<double>(output_shape().numel());  // a copy per element
  }

 private:
  // The token ids relative to this member's rows (ids - first: the
  // kernels skip those outside [0, rows)); the ids themselves when whole.
  absl::StatusOr<Tensor> LocalIds(Device& dev, const Tensor& x) const {
    if (first_ == 0) return x;
    ASSIGN_OR_RETURN(Tensor ids, dev.Allocate(x.shape(), DType::kF32));
    dev.Fill(ids.f32(), ids.numel(), -static_cast<float>(first_));
    dev.Axpby(ids.numel(), 1.0f, x.f32(), 1.0f, ids.f32());
    return ids;
  }

  int64_t vocab_, first_, dim_;
};

// ------------------------------------------------------- PositionEmbedding

class PositionEmbeddingLayer final : public Layer {
 public:
  PositionEmbeddingLayer(int index, Shape shape, int64_t context, int64_t dim)
      : Layer(index, shape, shape), context_(context), dim_(dim) {}

  std::string kind() const override { return "position_embedding"; }

  std::vector<ParamSpec> Params() const override {
    return {{"weight", Shape({context_, dim_})}};
  }

  void InitParams(uint64_t seed,
                  std::vector<std::vector<float>>* values) const override {
    NormalInit(seed, index(), 0, kInitStddev, &(*values)[0]);
  }

  absl::Status Forward(Device& dev, absl::Span<const Tensor> params,
                       const Tensor& x, const PassContext&, Tensor* y,
                       LayerCache*) const override {
    // The model may run on fewer positions than it was built for (e.g.
    // generation), never on more than the table holds.
    if (x.shape().rank() != 3 || x.shape()[1] > context_ ||
        x.shape()[2] != dim_) {
      return absl::InvalidArgumentError(
          absl::StrCat("layers.", index(), ".position_embedding: input ",
                       x.shape().ToString(), " is not [batch, T <= ", context_,
                       ", ", dim_, "]"));
    }
    // Not in place: the input may be a tensor another layer saved (ReLU
    // saves its output), so y is a new tensor. weight[0..T) as one bias
    // over the [T * C] of every sample.
    ASSIGN_OR_RETURN(*y, dev.Allocate(x.shape(), DType::kF32));
    dev.Copy(x, *y);
    dev.AddBias(y->f32(), params[0].f32(), x.shape()[0], PerSample(x), false);
    return absl::OkStatus();
  }

  absl::Status Backward(Device& dev, absl::Span<const Tensor>,
                        const LayerCache&, const Tensor& dy, const PassContext&,
                        Tensor* dx, absl::Span<const Tensor> grads,
                        bool accumulate) const override {
    const int64_t per_sample = PerSample(dy);
    // Positions T..context get no gradient from this batch.
    if (!accumulate) {
      dev.Fill(grads[0].f32() + per_sample, grads[0].numel() - per_sample,
               0.0f);
    }
    dev.SumRows(dy.f32(), dy.shape()[0], per_sample, accumulate ? 1.0f : 0.0f,
                grads[0].f32());
    if (dx != nullptr) *dx = dy;
    return absl::OkStatus();
  }

  double ForwardFlopsPerSample() const override {
    return static_cast<double>(input_shape().numel());
  }

 private:
  static int64_t PerSample(const Tensor& t) {
    return t.shape()[1] * t.shape()[2];
  }
  int64_t context_, dim_;
};

// ----------------------------------------------------- CausalSelfAttention

class CausalSelfAttentionLayer final : public Layer {
 public:
  CausalSelfAttentionLayer(int index, Shape shape, int64_t dim, int64_t heads,
                           float dropout, bool bias, uint64_t seed,
                           const TensorShard& shard)
      : Layer(index, shape, shape, shard),
        dim_(dim),
        bias_(bias),
        attention_(dim, heads, SiteDropout(dropout, seed, index), shard,
                   index) {}

  std::string kind() const override { return "causal_self_attention"; }

  std::vector<ParamSpec> Params() const override {
    const int64_t inner = dim_ / shard().degree;
    std::vector<ParamSpec> p = {
        {"attn.c_attn.weight", Shape({3 * inner, dim_})}};
    if (bias_) p.push_back({"attn.c_attn.bias", Shape({3 * inner})});
    p.push_back({"attn.c_proj.weight", Shape({dim_, inner})});
    if (bias_) p.push_back({"attn.c_proj.bias", Shape({dim_})});
    return p;
  }

  ParamSplit SplitOf(int param) const override {
    return SplitByName(Params()[param].name);
  }

  void InitParams(uint64_t seed,
                  std::vector<std::vector<float>>* values) const override {
    InitShards(*this, values,
               [&](int i, const std::string&, const Shape& shape,
                   std::vector<float>* v) {
                 if (shape.rank() == 2) {
                   NormalInit(seed, index(), i, kInitStddev, v);
                 } else {
                   std::fill(v->begin(), v->end(), 0.0f);
                 }
               });
  }

  absl::Status Forward(Device& dev, absl::Span<const Tensor> params,
                       const Tensor& x, const PassContext& ctx, Tensor* y,
                       LayerCache* cache) const override {
    AttentionSaved saved;
    RETURN_IF_ERROR(
        attention_.Forward(dev, Tensors(params), x, ctx, y, &saved));
    if (ctx.training) {
      Keep(ctx.recompute, {x, saved.qkv, saved.probs, saved.merged}, 2, cache);
    }
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
    LayerCache redone;
    RETURN_IF_ERROR(Redo(*this, dev, params, cache, ctx, &redone));
    const std::vector<Tensor>& c =
        cache.recompute == Recompute::kFull ? redone.tensors : cache.tensors;
    const AttentionSaved saved{c[1], c[2], c[3]};
    return attention_.Backward(dev, Tensors(params), saved, c[0], dy, ctx, dx,
                               Tensors(grads), accumulate, deferred);
  }

  double ForwardFlopsPerSample() const override {
    return attention_.FlopsPerSample(input_shape()[0]);
  }

 private:
  AttentionTensors Tensors(absl::Span<const Tensor> t) const {
    return bias_ ? AttentionTensors{&t[0], &t[1], &t[2], &t[3]}
                 : AttentionTensors{&t[0], nullptr, &t[1], nullptr};
  }
  int64_t dim_;
  bool bias_;
  Attention attention_;
};

// -------------------------------------------------------- TransformerBlock

// Where each tensor of a block sits among its parameters; -1: absent.
struct BlockSlots {
  int ln1_w = -1, ln1_b = -1, attn_w = -1, attn_b = -1, proj_w = -1,
      proj_b = -1, ln2_w = -1, ln2_b = -1, fc_w = -1, fc_b = -1, mlp_w = -1,
      mlp_b = -1;
};

class TransformerBlockLayer final : public Layer {
 public:
  struct Config {
    int64_t dim, heads, hidden;
    float dropout, eps;
    bool bias;
    bool gelu_tanh;  // the MLP's activation: GELU's tanh approximation
  };

  TransformerBlockLayer(int index, Shape shape, const Config& config,
                        uint64_t seed, const TensorShard& shard)
      : Layer(index, shape, shape, shard),
        config_(config),
        hidden_(config.hidden / shard.degree),
        dropout_(config.dropout, seed, index),
        attention_(config.dim, config.heads, dropout_, shard, index) {
    int next = 0;
    for (const auto& [name, slot] : SlotNames()) {
      const bool is_bias =
          name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      const bool always = name.rfind("ln_", 0) == 0;  // LayerNorms
      if (!is_bias || always || config_.bias) *slot = next++;
    }
  }

  std::string kind() const override { return "transformer_block"; }

  std::vector<ParamSpec> Params() const override;
  ParamSplit SplitOf(int param) const override {
    return SplitByName(Params()[param].name);
  }
  bool PartialOverRows(int param) const override {
    return shard().sequence && Params()[param].name.rfind("ln_", 0) == 0;
  }
  void InitParams(uint64_t seed,
                  std::vector<std::vector<float>>* values) const override;
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
    return attention_.FlopsPerSample(input_shape()[0]) +
           2.0 * t * (2.0 * config_.dim * hidden_);
  }

 private:
  // Every parameter name in order, with the slot it fills.
  std::vector<std::pair<std::string, int*>> SlotNames() {
    BlockSlots& s = slots_;
    return {{"ln_1.weight", &s.ln1_w},         {"ln_1.bias", &s.ln1_b},
            {"attn.c_attn.weight", &s.attn_w}, {"attn.c_attn.bias", &s.attn_b},
            {"attn.c_proj.weight", &s.proj_w}, {"attn.c_proj.bias", &s.proj_b},
            {"ln_2.weight", &s.ln2_w},         {"ln_2.bias", &s.ln2_b},
            {"mlp.c_fc.weight", &s.fc_w},      {"mlp.c_fc.bias", &s.fc_b},
            {"mlp.c_proj.weight", &s.mlp_w},   {"mlp.c_proj.bias", &s.mlp_b}};
  }
  AttentionTensors AttnTensors(absl::Span<const Tensor> t) const {
    return {At(t, slots_.attn_w), At(t, slots_.attn_b), At(t, slots_.proj_w),
            At(t, slots_.proj_b)};
  }
  // ln(x) with the LayerNorm whose weight is at `w_slot` and bias at
  // `w_slot + 1`; mean and rstd (per row) are allocated and written.
  absl::StatusOr<Tensor> Norm(Device& dev, absl::Span<const Tensor> params,
                              int w_slot, const Tensor& x, Tensor* mean,
                              Tensor* rstd) const;
  // Sequence parallelism: Forward and BackwardInput on this member's rows.
  absl::Status ForwardSequence(Device& dev, absl::Span<const Tensor> params,
                               const Tensor& x, const PassContext& ctx,
                               Tensor* y, LayerCache* cache) const;
  absl::Status BackwardSequence(Device& dev, absl::Span<const Tensor> params,
                                const std::vector<Tensor>& kept,
                                const Tensor& dy, const PassContext& ctx,
                                Tensor* dx, absl::Span<const Tensor> grads,
                                bool accumulate, DeferredGrads* deferred) const;
  // ln(x) of this member's rows, gathered: [B, T, C].
  absl::StatusOr<Tensor> GatheredNorm(Device& dev,
                                      absl::Span<const Tensor> params,
                                      int w_slot, const Tensor& x,
                                      const PassContext& ctx, Tensor* mean,
                                      Tensor* rstd) const;
  // A row-parallel map's partial output [B, T, C] reduce-scattered to this
  // member's rows, plus the bias at `bias_slot` (-1: none), dropped out
  // at `site`.
  absl::StatusOr<Tensor> FinishRowParallel(Device& dev,
                                           absl::Span<const Tensor> params,
                                           int bias_slot, DropoutSite site,
                                           const PassContext& ctx,
                                           const Tensor& partial) const;
  // Dropout at `site` of this member's rows `part` (into a new tensor, or
  // part itself when dropout is off), then gathered: [B, T, C].
  absl::StatusOr<Tensor> DropThenGather(Device& dev, DropoutSite site,
                                        const PassContext& ctx,
                                        const Tensor& part) const;
  // The first element of this member's rows in the minibatch's site.
  uint64_t FirstOfPart(const PassContext& ctx, int64_t part_numel) const {
    return ctx.sample_offset * static_cast<uint64_t>(input_shape().numel()) +
           static_cast<uint64_t>(shard().rank) *
               static_cast<uint64_t>(part_numel);
  }
  // The MLP half's backward: from dy, the gradient of x2 (the block's
  // middle: x2 = x + attn(ln_1(x)), y = x2 + mlp(ln_2(x2))).
  absl::StatusOr<Tensor> MlpBackward(Device& dev,
                                     absl::Span<const Tensor> params,
                                     const Tensor& x2, const Tensor& f,
                                     const Tensor& dy, const PassContext& ctx,
                                     absl::Span<const Tensor> grads,
                                     bool accumulate,
                                     DeferredGrads* deferred) const;

  // g = act(f) and, in place over dg, df = act'(f) dg: the MLP's GELU, exact
  // or its tanh approximation.
  void Activation(Device& dev, const Tensor& f, const Tensor& g) const {
    if (config_.gelu_tanh) {
      dev.GeluTanh(f.f32(), g.f32(), f.numel());
    } else {
      dev.Gelu(f.f32(), g.f32(), f.numel());
    }
  }
  void ActivationBackward(Device& dev, const Tensor& f,
                          const Tensor& dg) const {
    if (config_.gelu_tanh) {
      dev.GeluTanhBackward(f.f32(), dg.f32(), dg.f32(), f.numel());
    } else {
      dev.GeluBackward(f.f32(), dg.f32(), dg.f32(), f.numel());
    }
  }

  Config config_;
  int64_t hidden_;  // this member's hidden units (config_.hidden / t)
  BlockSlots slots_;
  SiteDropout dropout_;
  Attention attention_;
};

std::vector<ParamSpec> TransformerBlockLayer::Params() const {
  const int64_t c = config_.dim, hidden = hidden_;
  const int64_t inner = c / shard().degree;
  const bool b = config_.bias;
  std::vector<ParamSpec> p;
  p.push_back({"ln_1.weight", Shape({c})});
  p.push_back({"ln_1.bias", Shape({c})});
  p.push_back({"attn.c_attn.weight", Shape({3 * inner, c})});
  if (b) p.push_back({"attn.c_attn.bias", Shape({3 * inner})});
  p.push_back({"attn.c_proj.weight", Shape({c, inner})});
  if (b) p.push_back({"attn.c_proj.bias", Shape({c})});
  p.push_back({"ln_2.weight", Shape({c})});
  p.push_back({"ln_2.bias", Shape({c})});
  p.push_back({"mlp.c_fc.weight", Shape({hidden, c})});
  if (b) p.push_back({"mlp.c_fc.bias", Shape({hidden})});
  p.push_back({"mlp.c_proj.weight", Shape({c, hidden})});
  if (b) p.push_back({"mlp.c_proj.bias", Shape({c})});
  return p;
}

void TransformerBlockLayer::InitParams(
    uint64_t seed, std::vector<std::vector<float>>* values) const {
  InitShards(*this, values,
             [&](int i, const std::string& name, const Shape& shape,
                 std::vector<float>* v) {
               if (shape.rank() == 2) {
                 NormalInit(seed, index(), i, kInitStddev, v);
               } else {
                 const bool ln_weight =
                     name == "ln_1.weight" || name == "ln_2.weight";
                 std::fill(v->begin(), v->end(), ln_weight ? 1.0f : 0.0f);
               }
             });
}

absl::StatusOr<Tensor> TransformerBlockLayer::Norm(
    Device& dev, absl::Span<const Tensor> params, int w_slot, const Tensor& x,
    Tensor* mean, Tensor* rstd) const {
  const int64_t rows = x.numel() / config_.dim;
  ASSIGN_OR_RETURN(Tensor y, dev.Allocate(x.shape(), DType::kF32));
  ASSIGN_OR_RETURN(*mean, dev.Allocate(Shape({rows}), DType::kF32));
  ASSIGN_OR_RETURN(*rstd, dev.Allocate(Shape({rows}), DType::kF32));
  dev.LayerNorm(x.f32(), params[w_slot].f32(), params[w_slot + 1].f32(), rows,
                config_.dim, config_.eps, y.f32(), mean->f32(), rstd->f32());
  return y;
}

absl::Status TransformerBlockLayer::Forward(Device& dev,
                                            absl::Span<const Tensor> params,
                                            const Tensor& x,
                                            const PassContext& ctx, Tensor* y,
                                            LayerCache* cache) const {
  if (shard().sequence) return ForwardSequence(dev, params, x, ctx, y, cache);
  const int64_t batch = x.shape()[0], len = x.shape()[1];
  const int64_t rows = batch * len, n = x.numel();
  const int64_t c = config_.dim, hidden = hidden_;
  Tensor mean, rstd;
  // x2 = x + attn(ln_1(x)). The LayerNorms' outputs and statistics are not
  // kept: backward recomputes them from x and x2 (cheap, and 2C floats per
  // position less in flight).
  ASSIGN_OR_RETURN(Tensor h1, Norm(dev, params, slots_.ln1_w, x, &mean, &rstd));
  AttentionSaved saved;
  Tensor x2;
  RETURN_IF_ERROR(
      attention_.Forward(dev, AttnTensors(params), h1, ctx, &x2, &saved));
  dev.Axpby(n, 1.0f, x.f32(), 1.0f, x2.f32());
  // y = x2 + dropout(c_proj(gelu(c_fc(ln_2(x2))))).
  ASSIGN_OR_RETURN(Tensor h2,
                   Norm(dev, params, slots_.ln2_w, x2, &mean, &rstd));
  ASSIGN_OR_RETURN(Tensor f,
                   dev.Allocate(Shape({batch, len, hidden}), DType::kF32));
  LinearForward(dev, h2.f32(), rows, c, hidden, params[slots_.fc_w],
                At(params, slots_.fc_b), f.f32());
  ASSIGN_OR_RETURN(Tensor g, dev.Allocate(f.shape(), DType::kF32));
  Activation(dev, f, g);
  // c_proj, row-parallel: the partial outputs summed, then the bias once.
  ASSIGN_OR_RETURN(*y, dev.Allocate(x.shape(), DType::kF32));
  LinearForward(dev, g.f32(), rows, hidden, c, params[slots_.mlp_w], nullptr,
                y->f32());
  RETURN_IF_ERROR(SumOverTensorGroup(dev, ctx, shard(), index(), *y));
  if (slots_.mlp_b >= 0) {
    dev.AddBias(y->f32(), params[slots_.mlp_b].f32(), rows, c, false);
  }
  if (dropout_.active(ctx)) {
    dropout_.Apply(dev, kMlpOutput, ctx, y->f32(), y->f32(), n, len * c);
  }
  dev.Axpby(n, 1.0f, x2.f32(), 1.0f, y->f32());
  // The GELU output is recomputed from f in backward, too.
  if (ctx.training) {
    Keep(ctx.recompute, {x, x2, saved.qkv, saved.probs, saved.merged, f}, 3,
         cache);
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> TransformerBlockLayer::MlpBackward(
    Device& dev, absl::Span<const Tensor> params, const Tensor& x2,
    const Tensor& f, const Tensor& dy, const PassContext& ctx,
    absl::Span<const Tensor> grads, bool accumulate,
    DeferredGrads* deferred) const {
  const int64_t rows = x2.numel() / config_.dim, n = x2.numel();
  const int64_t c = config_.dim, hidden = hidden_;
  Tensor dm = dy;
  if (dropout_.active(ctx)) {
    ASSIGN_OR_RETURN(dm, dev.Allocate(dy.shape(), DType::kF32));
    dropout_.Apply(dev, kMlpOutput, ctx, dy.f32(), dm.f32(), n,
                   n / x2.shape()[0]);
  }
  // c_proj, with its input gelu(f) recomputed; the gradient of that input
  // then overwrites it (unless W needs it: deferred), and GELU's backward
  // turns it into df in place.
  ASSIGN_OR_RETURN(Tensor g, dev.Allocate(f.shape(), DType::kF32));
  Activation(dev, f, g);
  ASSIGN_OR_RETURN(Tensor dg, InputGradBuffer(dev, g, deferred));
  LinearBackward(dev, g, dm, rows, hidden, c, params[slots_.mlp_w],
                 grads[slots_.mlp_w], At(grads, slots_.mlp_b), accumulate,
                 dg.f32(), deferred);
  ActivationBackward(dev, f, dg);
  // c_fc, with its input ln_2(x2) recomputed and then overwritten by its
  // gradient (or not, as above).
  Tensor mean, rstd;
  ASSIGN_OR_RETURN(Tensor h2,
                   Norm(dev, params, slots_.ln2_w, x2, &mean, &rstd));
  ASSIGN_OR_RETURN(Tensor dh2, InputGradBuffer(dev, h2, deferred));
  LinearBackward(dev, h2, dg, rows, c, hidden, params[slots_.fc_w],
                 grads[slots_.fc_w], At(grads, slots_.fc_b), accumulate,
                 dh2.f32(), deferred);
  // c_fc is column-parallel: the members' parts of dh2 summed.
  RETURN_IF_ERROR(SumOverTensorGroup(dev, ctx, shard(), index(), dh2));
  // ln_2, then the residual: dx2 = dy + ln_2'(dh2).
  ASSIGN_OR_RETURN(Tensor dx2, dev.Allocate(x2.shape(), DType::kF32));
  dev.LayerNormBackward(dh2.f32(), x2.f32(), params[slots_.ln2_w].f32(),
                        mean.f32(), rstd.f32(), rows, c, dx2.f32(),
                        grads[slots_.ln2_w].f32(), grads[slots_.ln2_b].f32(),
                        accumulate);
  dev.Axpby(n, 1.0f, dy.f32(), 1.0f, dx2.f32());
  return dx2;
}

absl::Status TransformerBlockLayer::BackwardInput(
    Device& dev, absl::Span<const Tensor> params, const LayerCache& cache,
    const Tensor& dy, const PassContext& ctx, Tensor* dx,
    absl::Span<const Tensor> grads, bool accumulate,
    DeferredGrads* deferred) const {
  LayerCache redone;
  RETURN_IF_ERROR(Redo(*this, dev, params, cache, ctx, &redone));
  const std::vector<Tensor>& c =
      cache.recompute == Recompute::kFull ? redone.tensors : cache.tensors;
  if (shard().sequence) {
    return BackwardSequence(dev, params, c, dy, ctx, dx, grads, accumulate,
                            deferred);
  }
  const Tensor& x = c[0];
  const Tensor& x2 = c[1];
  const AttentionSaved saved{c[2], c[3], c[4]};
  ASSIGN_OR_RETURN(Tensor dx2, MlpBackward(dev, params, x2, c[5], dy, ctx,
                                           grads, accumulate, deferred));
  Tensor mean, rstd;
  ASSIGN_OR_RETURN(Tensor h1, Norm(dev, params, slots_.ln1_w, x, &mean, &rstd));
  Tensor dh1;
  RETURN_IF_ERROR(attention_.Backward(dev, AttnTensors(params), saved, h1, dx2,
                                      ctx, &dh1, AttnTensors(grads), accumulate,
                                      deferred));
  // ln_1 (its parameter gradients are needed even without dx), then the
  // residual: dx = dx2 + ln_1'(dh1).
  float* dx_data = nullptr;
  if (dx != nullptr) {
    ASSIGN_OR_RETURN(*dx, dev.Allocate(x.shape(), DType::kF32));
    dx_data = dx->f32();
  }
  const int64_t rows = x.numel() / config_.dim;
  dev.LayerNormBackward(dh1.f32(), x.f32(), params[slots_.ln1_w].f32(),
                        mean.f32(), rstd.f32(), rows, config_.dim, dx_data,
                        grads[slots_.ln1_w].f32(), grads[slots_.ln1_b].f32(),
                        accumulate);
  if (dx_data != nullptr) dev.Axpby(x.numel(), 1.0f, dx2.f32(), 1.0f, dx_data);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> TransformerBlockLayer::GatheredNorm(
    Device& dev, absl::Span<const Tensor> params, int w_slot, const Tensor& x,
    const PassContext& ctx, Tensor* mean, Tensor* rstd) const {
  ASSIGN_OR_RETURN(const Tensor h, Norm(dev, params, w_slot, x, mean, rstd));
  ASSIGN_OR_RETURN(const Tensor whole,
                   GatherSequence(dev, ctx, shard(), index(), h));
  const int64_t len = input_shape()[0];
  return whole.Reshape(Shape({whole.shape()[0] / len, len, config_.dim}));
}

absl::StatusOr<Tensor> TransformerBlockLayer::FinishRowParallel(
    Device& dev, absl::Span<const Tensor> params, int bias_slot,
    DropoutSite site, const PassContext& ctx, const Tensor& partial) const {
  ASSIGN_OR_RETURN(Tensor out,
                   ScatterSequence(dev, ctx, shard(), index(), partial));
  if (bias_slot >= 0) {
    dev.AddBias(out.f32(), params[bias_slot].f32(), out.shape()[0], config_.dim,
                false);
  }
  if (dropout_.active(ctx)) {
    dropout_.ApplyAt(dev, site, ctx, out.f32(), out.f32(), out.numel(),
                     FirstOfPart(ctx, out.numel()));
  }
  return out;
}

absl::StatusOr<Tensor> TransformerBlockLayer::DropThenGather(
    Device& dev, DropoutSite site, const PassContext& ctx,
    const Tensor& part) const {
  Tensor dropped = part;
  if (dropout_.active(ctx)) {
    ASSIGN_OR_RETURN(dropped, dev.Allocate(part.shape(), DType::kF32));
    dropout_.ApplyAt(dev, site, ctx, part.f32(), dropped.f32(), part.numel(),
                     FirstOfPart(ctx, part.numel()));
  }
  ASSIGN_OR_RETURN(const Tensor whole,
                   GatherSequence(dev, ctx, shard(), index(), dropped));
  const int64_t len = input_shape()[0];
  return whole.Reshape(Shape({whole.shape()[0] / len, len, config_.dim}));
}

// Megatron's sequence parallelism: x, x2 and y are this member's rows; the
// LayerNorms' outputs are gathered before the column-parallel maps, and the
// row-parallel maps' partial outputs reduce-scattered (the all-reduce's two
// halves, on either side of the row-wise work).
absl::Status TransformerBlockLayer::ForwardSequence(
    Device& dev, absl::Span<const Tensor> params, const Tensor& x,
    const PassContext& ctx, Tensor* y, LayerCache* cache) const {
  const int64_t n = x.numel(), c = config_.dim;
  Tensor mean, rstd;
  ASSIGN_OR_RETURN(
      Tensor h1, GatheredNorm(dev, params, slots_.ln1_w, x, ctx, &mean, &rstd));
  const int64_t batch = h1.shape()[0], len = h1.shape()[1];
  AttentionSaved saved;
  Tensor partial;
  RETURN_IF_ERROR(
      attention_.Forward(dev, AttnTensors(params), h1, ctx, &partial, &saved));
  ASSIGN_OR_RETURN(
      Tensor x2, FinishRowParallel(dev, params, slots_.proj_b, kAttentionOutput,
                                   ctx, partial));
  dev.Axpby(n, 1.0f, x.f32(), 1.0f, x2.f32());
  ASSIGN_OR_RETURN(Tensor h2, GatheredNorm(dev, params, slots_.ln2_w, x2, ctx,
                                           &mean, &rstd));
  ASSIGN_OR_RETURN(Tensor f,
                   dev.Allocate(Shape({batch, len, hidden_}), DType::kF32));
  LinearForward(dev, h2.f32(), batch * len, c, hidden_, params[slots_.fc_w],
                At(params, slots_.fc_b), f.f32());
  ASSIGN_OR_RETURN(Tensor g, dev.Allocate(f.shape(), DType::kF32));
  Activation(dev, f, g);
  LinearForward(dev, g.f32(), batch * len, hidden_, c, params[slots_.mlp_w],
                nullptr, partial.f32());
  ASSIGN_OR_RETURN(*y, FinishRowParallel(dev, params, slots_.mlp_b, kMlpOutput,
                                         ctx, partial));
  dev.Axpby(n, 1.0f, x2.f32(), 1.0f, y->f32());
  if (ctx.training) {
    Keep(ctx.recompute, {x, x2, saved.qkv, saved.probs, saved.merged, f}, 3,
         cache);
  }
  return absl::OkStatus();
}

// The backward of ForwardSequence: each gather's conjugate is a
// reduce-scatter and each reduce-scatter's a gather. The biases of the
// row-parallel maps take their gradient from the gathered (whole) output
// gradient; the LayerNorms' come from this member's rows only
// (SumSequenceParallelGradients adds the members' up).
absl::Status TransformerBlockLayer::BackwardSequence(
    Device& dev, absl::Span<const Tensor> params,
    const std::vector<Tensor>& kept, const Tensor& dy, const PassContext& ctx,
    Tensor* dx, absl::Span<const Tensor> grads, bool accumulate,
    DeferredGrads* deferred) const {
  const Tensor& x = kept[0];
  const Tensor& x2 = kept[1];
  const Tensor& f = kept[5];
  const int64_t part_rows = x.shape()[0], c = config_.dim;
  const int64_t rows = f.shape()[0] * f.shape()[1];
  // The MLP: c_proj (its input gelu(f) recomputed), GELU, c_fc.
  ASSIGN_OR_RETURN(const Tensor dm, DropThenGather(dev, kMlpOutput, ctx, dy));
  ASSIGN_OR_RETURN(Tensor g, dev.Allocate(f.shape(), DType::kF32));
  Activation(dev, f, g);
  ASSIGN_OR_RETURN(Tensor dg, InputGradBuffer(dev, g, deferred));
  LinearBackward(dev, g, dm, rows, hidden_, c, params[slots_.mlp_w],
                 grads[slots_.mlp_w], At(grads, slots_.mlp_b), accumulate,
                 dg.f32(), deferred);
  ActivationBackward(dev, f, dg);
  Tensor mean, rstd;
  ASSIGN_OR_RETURN(Tensor h2, GatheredNorm(dev, params, slots_.ln2_w, x2, ctx,
                                           &mean, &rstd));
  ASSIGN_OR_RETURN(Tensor dh2, InputGradBuffer(dev, h2, deferred));
  LinearBackward(dev, h2, dg, rows, c, hidden_, params[slots_.fc_w],
                 grads[slots_.fc_w], At(grads, slots_.fc_b), accumulate,
                 dh2.f32(), deferred);
  ASSIGN_OR_RETURN(const Tensor dh2_part,
                   ScatterSequence(dev, ctx, shard(), index(), dh2));
  ASSIGN_OR_RETURN(Tensor dx2, dev.Allocate(x2.shape(), DType::kF32));
  dev.LayerNormBackward(dh2_part.f32(), x2.f32(), params[slots_.ln2_w].f32(),
                        mean.f32(), rstd.f32(), part_rows, c, dx2.f32(),
                        grads[slots_.ln2_w].f32(), grads[slots_.ln2_b].f32(),
                        accumulate);
  dev.Axpby(x2.numel(), 1.0f, dy.f32(), 1.0f, dx2.f32());
  // The attention, then ln_1 and the residual.
  ASSIGN_OR_RETURN(const Tensor da,
                   DropThenGather(dev, kAttentionOutput, ctx, dx2));
  ASSIGN_OR_RETURN(
      Tensor h1, GatheredNorm(dev, params, slots_.ln1_w, x, ctx, &mean, &rstd));
  Tensor dh1;
  RETURN_IF_ERROR(attention_.Backward(
      dev, AttnTensors(params), {kept[2], kept[3], kept[4]}, h1, da, ctx, &dh1,
      AttnTensors(grads), accumulate, deferred));
  ASSIGN_OR_RETURN(const Tensor dh1_part,
                   ScatterSequence(dev, ctx, shard(), index(), dh1));
  float* dx_data = nullptr;
  if (dx != nullptr) {
    ASSIGN_OR_RETURN(*dx, dev.Allocate(x.shape(), DType::kF32));
    dx_data = dx->f32();
  }
  dev.LayerNormBackward(dh1_part.f32(), x.f32(), params[slots_.ln1_w].f32(),
                        mean.f32(), rstd.f32(), part_rows, c, dx_data,
                        grads[slots_.ln1_w].f32(), grads[slots_.ln1_b].f32(),
                        accumulate);
  if (dx_data != nullptr) dev.Axpby(x.numel(), 1.0f, dx2.f32(), 1.0f, dx_data);
  return absl::OkStatus();
}

using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

// INVALID_ARGUMENT unless the shard's degree divides the heads (and so the
// width) and the hidden units.
absl::Status CheckShard(int index, const char* kind, int64_t heads,
                        int64_t hidden, const TensorShard& shard) {
  if (shard.degree < 1 || shard.rank < 0 || shard.rank >= shard.degree) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.layers[", index, "]: tensor-parallel member ",
                     shard.rank, " of ", shard.degree, " is not a member"));
  }
  if (heads % shard.degree != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.layers[", index, "].", kind, ".heads=", heads,
                     " cannot be split across a tensor-parallel degree of ",
                     shard.degree, ": the degree must divide the heads"));
  }
  if (hidden % shard.degree != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", index, "].", kind, ".mlp_hidden=", hidden,
        " cannot be split across a tensor-parallel degree of ", shard.degree));
  }
  return absl::OkStatus();
}

LayerOr MakeBlock(const v1::TransformerBlockSpec& s, int index, const Shape& in,
                  uint64_t seed, const TensorShard& shard) {
  TransformerBlockLayer::Config config;
  config.dim = s.dim();
  config.heads = s.heads();
  config.hidden = s.has_mlp_hidden() ? s.mlp_hidden() : 4 * s.dim();
  config.dropout = s.dropout();
  config.eps = s.has_eps() ? s.eps() : 1e-5f;
  config.bias = !s.has_bias() || s.bias();
  config.gelu_tanh = s.activation() == "gelu_tanh";
  RETURN_IF_ERROR(CheckShard(index, "transformer_block", config.heads,
                             config.hidden, shard));
  if (shard.sequence && in[0] % shard.degree != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.layers[", index,
                     "].transformer_block: sequence parallelism "
                     "splits each sample's ",
                     in[0],
                     " positions across the tensor-parallel "
                     "degree of ",
                     shard.degree, ", which must divide them"));
  }
  return std::unique_ptr<Layer>(
      std::make_unique<TransformerBlockLayer>(index, in, config, seed, shard));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Layer>> MakeTransformerLayer(
    const LayerSpec& spec, int index, const Shape& in, const Shape& out,
    uint64_t seed, const TensorShard& shard) {
  switch (spec.kind_case()) {
    case LayerSpec::kTokenEmbedding:
      if (spec.token_embedding().vocab_size() % shard.degree != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model.layers[", index, "].token_embedding.vocab_size=",
            spec.token_embedding().vocab_size(),
            " cannot be split across a tensor-parallel degree of ",
            shard.degree));
      }
      return std::unique_ptr<Layer>(std::make_unique<TokenEmbeddingLayer>(
          index, in, out, spec.token_embedding().vocab_size(),
          spec.token_embedding().dim(), shard));
    case LayerSpec::kPositionEmbedding:
      return std::unique_ptr<Layer>(std::make_unique<PositionEmbeddingLayer>(
          index, in, spec.position_embedding().context(),
          spec.position_embedding().dim()));
    case LayerSpec::kCausalSelfAttention: {
      const v1::CausalSelfAttentionSpec& s = spec.causal_self_attention();
      RETURN_IF_ERROR(CheckShard(index, "causal_self_attention", s.heads(),
                                 s.heads(), shard));
      return std::unique_ptr<Layer>(std::make_unique<CausalSelfAttentionLayer>(
          index, in, s.dim(), s.heads(), s.dropout(), !s.has_bias() || s.bias(),
          seed, shard));
    }
    case LayerSpec::kTransformerBlock:
      return MakeBlock(spec.transformer_block(), index, in, seed, shard);
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model.layers[", index, "] is not a transformer layer"));
}

}  // namespace aqueduct
