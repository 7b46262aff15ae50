// The LLaMA layers (llama.h) and their CPU kernels: the forward against a
// reference written out in doubles (Hugging Face's LlamaRMSNorm and
// LlamaDecoderLayer), every gradient against central differences of that
// reference, recomputation, accumulation and the split backward to the
// fused backward's bits, rotary embeddings by hand, causality, and results
// that do not depend on the number of threads.
#include "worker/nn/llama.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/device/cpu_device.h"
#include "gtest/gtest.h"
#include "pipeline/memory.h"
#include "pipeline/shapes.h"
#include "worker/nn/layer.h"
#include "worker/nn/test_util.h"

namespace aqueduct {
namespace {

using Vec = std::vector<double>;

// ------------------------------------------------------ Double reference

// y[rows, out] = x[rows, in] W^T, W [out, in].
Vec LinearRef(const Vec& x, const Vec& w, int64_t rows, int64_t in,
              int64_t out) {
  Vec y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  }
  return y;
}

Vec RmsNormRef(const Vec& x, const Vec& gamma, int64_t cols, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += x[r * cols + c] * x[r * cols + c];
    const double rs = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      y[r * cols + c] = x[r * cols + c] * rs * gamma[c];
    }
  }
  return y;
}

// Rotate-half rotary embeddings over t[batch, len, heads * hd]: dimension i
// pairs with i + hd / 2, angle pos * theta^(-2i / hd).
void RopeRef(Vec* t, int64_t len, int64_t heads, int64_t hd, double theta) {
  const int64_t half = hd / 2, width = heads * hd;
  for (size_t row = 0; row < t->size() / width; ++row) {
    const double pos = static_cast<double>(row % len);
    for (int64_t h = 0; h < heads; ++h) {
      double* v = t->data() + row * width + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * std::pow(theta, -2.0 * i / hd);
        const double a = v[i], b = v[i + half];
        v[i] = a * std::cos(angle) - b * std::sin(angle);
        v[i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
}

struct LlamaDims {
  int64_t dim, heads, kv_heads, hidden;
  double theta, eps;
};

LlamaDims DimsOf(const LayerSpec& spec) {
  const auto& s = spec.llama_block();
  return {s.dim(),
          s.heads(),
          s.has_kv_heads() ? s.kv_heads() : s.heads(),
          s.hidden(),
          s.has_rope_theta() ? s.rope_theta() : 10000.0,
          s.has_eps() ? s.eps() : 1e-6};
}

// Causal attention of query head h over key/value head h / (H / KV).
Vec AttentionRef(const LlamaDims& d, const Vec& q, const Vec& k, const Vec& v,
                 int64_t batch, int64_t len) {
  const int64_t hd = d.dim / d.heads, kvw = d.kv_heads * hd;
  const int64_t group = d.heads / d.kv_heads;
  Vec out(q.size(), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < len; ++i) {
        Vec p(static_cast<size_t>(i + 1));
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t e = 0; e < hd; ++e) {
            s += q[(b * len + i) * d.dim + h * hd + e] *
                 k[(b * len + j) * kvw + g * hd + e];
          }
          p[j] = s / std::sqrt(static_cast<double>(hd));
          max = std::max(max, p[j]);
        }
        for (double& s : p) sum += (s = std::exp(s - max));
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t e = 0; e < hd; ++e) {
            out[(b * len + i) * d.dim + h * hd + e] +=
                p[j] / sum * v[(b * len + j) * kvw + g * hd + e];
          }
        }
      }
    }
  }
  return out;
}

// LlamaDecoderLayer over x[batch, len, dim]; params in Params() order.
Vec LlamaBlockRef(const LlamaDims& d, const std::vector<Vec>& p, const Vec& x,
                  int64_t len) {
  const int64_t c = d.dim, f = d.hidden, hd = c / d.heads;
  const int64_t kvw = d.kv_heads * hd;
  const int64_t rows = static_cast<int64_t>(x.size()) / c;
  const Vec h1 = RmsNormRef(x, p[0], c, d.eps);
  Vec q = LinearRef(h1, p[1], rows, c, c);
  Vec k = LinearRef(h1, p[2], rows, c, kvw);
  const Vec v = LinearRef(h1, p[3], rows, c, kvw);
  RopeRef(&q, len, d.heads, hd, d.theta);
  RopeRef(&k, len, d.kv_heads, hd, d.theta);
  const Vec merged = AttentionRef(d, q, k, v, rows / len, len);
  Vec x2 = LinearRef(merged, p[4], rows, c, c);
  for (size_t i = 0; i < x2.size(); ++i) x2[i] += x[i];
  const Vec h2 = RmsNormRef(x2, p[5], c, d.eps);
  Vec act = LinearRef(h2, p[6], rows, c, f);
  const Vec up = LinearRef(h2, p[7], rows, c, f);
  for (size_t i = 0; i < act.size(); ++i) {
    act[i] = act[i] / (1.0 + std::exp(-act[i])) * up[i];
  }
  Vec y = LinearRef(act, p[8], rows, f, c);
  for (size_t i = 0; i < y.size(); ++i) y[i] += x2[i];
  return y;
}

Vec ToDouble(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// dL/d(*v)[i] for every i, central differences in double.
Vec Numeric(Vec* v, const std::function<double()>& loss) {
  const double h = 1e-5;
  Vec g(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const double saved = (*v)[i];
    (*v)[i] = saved + h;
    const double up = loss();
    (*v)[i] = saved - h;
    g[i] = (up - loss()) / (2 * h);
    (*v)[i] = saved;
  }
  return g;
}

// ------------------------------------------------------------- Harness

// Parameters, input and output gradient of one pass, on the host.
struct Values {
  std::vector<std::vector<float>> params;
  std::vector<float> x, dy;
};

struct PassOptions {
  Recompute recompute = Recompute::kNone;
  // Backward as the split backward: BackwardInput, then RunDeferredGrads.
  bool split = false;
  // Accumulate the gradients onto these (else they are written over NaNs).
  const std::vector<std::vector<float>>* grads_in = nullptr;
};

struct Pass {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
  // Split backward: the gradients after the input half, and the number of
  // weight gradients it deferred.
  std::vector<std::vector<float>> grads_before_deferred;
  size_t deferred = 0;
  // Floats the training forward kept per sample.
  int64_t kept_per_sample = 0;
};

std::vector<float> Download(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

std::vector<std::vector<float>> DownloadAll(const std::vector<Tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts) out.push_back(Download(t));
  return out;
}

// A LLaMA layer on a CPU device of its own.
class LayerRun {
 public:
  LayerRun(const std::string& text, Shape sample, int threads = 0)
      : device_(CpuDeviceOptions{threads}), sample_(std::move(sample)) {
    auto layer = CreateLayer(ParseLayer(text), 0, sample_, 42);
    EXPECT_TRUE(layer.ok()) << layer.status();
    if (layer.ok()) layer_ = std::move(*layer);
  }

  const Layer& layer() const { return *layer_; }

  // Random values in [-0.5, 0.5] (parameters) and [-1, 1] (x, dy).
  Values RandomValues(int64_t batch, std::mt19937* rng) const {
    Values v;
    for (const ParamSpec& p : layer_->Params()) {
      v.params.push_back(Random(p.shape.numel(), rng, -0.5f, 0.5f));
    }
    v.x = Random(sample_.WithLeading(batch).numel(), rng);
    v.dy = Random(layer_->output_shape().WithLeading(batch).numel(), rng);
    return v;
  }

  std::vector<float> Forward(const Values& v, bool training = true) {
    PassContext ctx;
    ctx.training = training;
    LayerCache cache;
    Tensor y;
    EXPECT_TRUE(layer_
                    ->Forward(device_, UploadParams(v.params), Input(v.x), ctx,
                              &y, training ? &cache : nullptr)
                    .ok());
    return Download(y);
  }

  // Forward and backward of one pass.
  Pass Run(const Values& v, const PassOptions& o = {}) {
    PassContext ctx;
    ctx.recompute = o.recompute;
    const std::vector<Tensor> params = UploadParams(v.params);
    Tensor y, dx;
    LayerCache cache;
    EXPECT_TRUE(
        layer_->Forward(device_, params, Input(v.x), ctx, &y, &cache).ok());
    Pass out;
    out.y = Download(y);
    for (const Tensor& t : cache.tensors) {
      if (t.defined()) out.kept_per_sample += t.numel() / y.shape()[0];
    }
    const std::vector<Tensor> grads = Grads(o.grads_in);
    const Tensor dy = Upload(v.dy, y.shape());
    const bool accumulate = o.grads_in != nullptr;
    if (o.split) {
      DeferredGrads deferred;
      EXPECT_TRUE(layer_
                      ->BackwardInput(device_, params, cache, dy, ctx, &dx,
                                      grads, accumulate, &deferred)
                      .ok());
      out.grads_before_deferred = DownloadAll(grads);
      out.deferred = deferred.linears.size();
      RunDeferredGrads(device_, deferred);
    } else {
      EXPECT_TRUE(layer_
                      ->Backward(device_, params, cache, dy, ctx, &dx, grads,
                                 accumulate)
                      .ok());
    }
    out.dx = Download(dx);
    out.grads = DownloadAll(grads);
    return out;
  }

 private:
  Tensor Upload(const std::vector<float>& v, const Shape& shape) {
    Tensor t = *device_.Allocate(shape, DType::kF32);
    EXPECT_TRUE(device_.CopyFromHost(v.data(), t).ok());
    return t;
  }
  Tensor Input(const std::vector<float>& x) {
    const int64_t batch = static_cast<int64_t>(x.size()) / sample_.numel();
    return Upload(x, sample_.WithLeading(batch));
  }
  std::vector<Tensor> UploadParams(
      const std::vector<std::vector<float>>& values) {
    std::vector<Tensor> out;
    const std::vector<ParamSpec> specs = layer_->Params();
    for (size_t i = 0; i < specs.size(); ++i) {
      out.push_back(Upload(values[i], specs[i].shape));
    }
    return out;
  }
  // `in`'s values, or NaNs (a gradient that is not written shows).
  std::vector<Tensor> Grads(const std::vector<std::vector<float>>* in) {
    if (in != nullptr) return UploadParams(*in);
    std::vector<std::vector<float>> nans;
    for (const ParamSpec& p : layer_->Params()) {
      nans.emplace_back(p.shape.numel(), NAN);
    }
    return UploadParams(nans);
  }

  CpuDevice device_;
  Shape sample_;
  std::unique_ptr<Layer> layer_;
};

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << "[" << i << "]: " << a[i] << " vs " << b[i];
  }
}

void ExpectSamePass(const Pass& a, const Pass& b, const Layer& layer) {
  ExpectSameBits(a.y, b.y, "output");
  ExpectSameBits(a.dx, b.dx, "input gradient");
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t p = 0; p < a.grads.size(); ++p) {
    ExpectSameBits(a.grads[p], b.grads[p], layer.Params()[p].name);
  }
}

// The layer's forward against `reference`, and its input and parameter
// gradients against central differences of the reference, for L = sum(r *
// y) at the layer's (float) point.
using Reference =
    std::function<Vec(const std::vector<Vec>& params, const Vec& x)>;

void CheckAgainstReference(LayerRun& run, int64_t batch,
                           const Reference& reference, double tolerance) {
  std::mt19937 rng(7);
  const Values v = run.RandomValues(batch, &rng);
  const Pass pass = run.Run(v);
  std::vector<Vec> params;
  for (const auto& p : v.params) params.push_back(ToDouble(p));
  Vec x = ToDouble(v.x);
  const Vec r = ToDouble(v.dy);
  const auto loss = [&] {
    const Vec y = reference(params, x);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += r[i] * y[i];
    return l;
  };
  EXPECT_LT(RelativeError(ToDouble(pass.y), reference(params, x)), 1e-6)
      << "forward";
  EXPECT_LT(RelativeError(ToDouble(pass.dx), Numeric(&x, loss)), tolerance)
      << "input gradient";
  for (size_t p = 0; p < params.size(); ++p) {
    const std::string name = run.layer().Params()[p].name;
    const Vec analytic = ToDouble(pass.grads[p]);
    const Vec numeric = Numeric(&params[p], loss);
    EXPECT_LT(RelativeError(analytic, numeric), tolerance)
        << "gradient of " << name;
    // A gradient that is zero (q's and k's over one position) must be
    // exactly zero; any other must not be.
    double norm = 0, numeric_norm = 0;
    for (size_t i = 0; i < numeric.size(); ++i) {
      norm += std::abs(analytic[i]);
      numeric_norm += std::abs(numeric[i]);
    }
    EXPECT_EQ(norm > 0, numeric_norm > 0) << name;
  }
}

void CheckBlock(const std::string& text, int64_t len, int64_t batch) {
  const LlamaDims d = DimsOf(ParseLayer(text));
  LayerRun run(text, Shape({len, d.dim}));
  CheckAgainstReference(
      run, batch,
      [&](const std::vector<Vec>& p, const Vec& x) {
        return LlamaBlockRef(d, p, x, len);
      },
      5e-6);
}

// GQA: 4 query heads over 2 key/value heads, head width 4 (two rotary
// frequencies), a small theta so that both turn.
constexpr char kGqa[] =
    "llama_block { dim: 16 heads: 4 kv_heads: 2 hidden: 24 rope_theta: 50 }";

// ------------------------------------------------------------ Gradients

TEST(LlamaGradTest, RmsNorm) {
  LayerRun run("rms_norm { dim: 8 eps: 1e-5 }", Shape({5, 8}));
  CheckAgainstReference(
      run, 3,
      [](const std::vector<Vec>& p, const Vec& x) {
        return RmsNormRef(x, p[0], 8, 1e-5);
      },
      1e-6);
}

TEST(LlamaGradTest, RmsNormDefaultEpsOnVectors) {
  LayerRun run("rms_norm { dim: 6 }", Shape({6}));
  CheckAgainstReference(
      run, 4,
      [](const std::vector<Vec>& p, const Vec& x) {
        return RmsNormRef(x, p[0], 6, 1e-6);
      },
      1e-6);
}

TEST(LlamaGradTest, BlockGroupedQueryAttention) { CheckBlock(kGqa, 5, 2); }

TEST(LlamaGradTest, BlockMultiHeadDefaults) {
  CheckBlock("llama_block { dim: 8 heads: 2 hidden: 12 }", 6, 2);
}

TEST(LlamaGradTest, BlockMultiQueryEps) {
  CheckBlock("llama_block { dim: 16 heads: 4 kv_heads: 1 hidden: 8 eps: 0.01 }",
             4, 3);
}

TEST(LlamaGradTest, BlockSinglePosition) {
  CheckBlock("llama_block { dim: 8 heads: 2 kv_heads: 1 hidden: 8 }", 1, 2);
}

// ----------------------------------------------- Passes, bit for bit

// Selective and full recomputation: the same output and gradients, bit for
// bit, as keeping everything; and they keep less.
TEST(LlamaTest, RecomputationGivesTheSameBits) {
  LayerRun run(kGqa, Shape({5, 16}));
  std::mt19937 rng(3);
  const Values v = run.RandomValues(2, &rng);
  const Pass none = run.Run(v);
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    SCOPED_TRACE(RecomputeName(mode));
    PassOptions o;
    o.recompute = mode;
    const Pass again = run.Run(v, o);
    ExpectSamePass(none, again, run.layer());
    EXPECT_LT(again.kept_per_sample, none.kept_per_sample);
  }
}

// The split backward: the input half leaves the seven linear maps' weight
// gradients (and only those) unwritten; after RunDeferredGrads every
// gradient has the fused backward's bits, with and without recomputation.
TEST(LlamaTest, SplitBackwardGivesTheFusedBits) {
  LayerRun run(kGqa, Shape({5, 16}));
  std::mt19937 rng(4);
  const Values v = run.RandomValues(2, &rng);
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    PassOptions o;
    o.recompute = mode;
    const Pass fused = run.Run(v, o);
    o.split = true;
    const Pass split = run.Run(v, o);
    ExpectSamePass(fused, split, run.layer());
    EXPECT_EQ(split.deferred, 7u);
    for (size_t p = 0; p < split.grads.size(); ++p) {
      const bool norm = p == 0 || p == 5;
      EXPECT_EQ(std::isnan(split.grads_before_deferred[p][0]), !norm)
          << run.layer().Params()[p].name;
    }
  }
}

TEST(LlamaTest, RmsNormSplitBackwardDefersNothing) {
  LayerRun run("rms_norm { dim: 8 }", Shape({3, 8}));
  std::mt19937 rng(5);
  const Values v = run.RandomValues(2, &rng);
  PassOptions o;
  o.split = true;
  const Pass split = run.Run(v, o);
  ExpectSamePass(run.Run(v), split, run.layer());
  EXPECT_EQ(split.deferred, 0u);
}

// accumulate=true adds the pass's gradients to what is there.
void ExpectAccumulationAdds(const std::string& text, const Shape& sample) {
  LayerRun run(text, sample);
  std::mt19937 rng(6);
  const Values v = run.RandomValues(2, &rng);
  std::vector<std::vector<float>> before;
  for (const auto& p : v.params) before.push_back(Random(p.size(), &rng));
  const Pass fresh = run.Run(v);
  PassOptions o;
  o.grads_in = &before;
  for (bool split : {false, true}) {
    o.split = split;
    const Pass added = run.Run(v, o);
    for (size_t p = 0; p < before.size(); ++p) {
      for (size_t i = 0; i < before[p].size(); ++i) {
        const double want = double{before[p][i]} + fresh.grads[p][i];
        ASSERT_NEAR(added.grads[p][i], want, 1e-6 * (1 + std::abs(want)))
            << run.layer().Params()[p].name << "[" << i << "]";
      }
    }
  }
}

TEST(LlamaTest, BlockAccumulationAdds) {
  ExpectAccumulationAdds(kGqa, Shape({5, 16}));
}

TEST(LlamaTest, RmsNormAccumulationAdds) {
  ExpectAccumulationAdds("rms_norm { dim: 8 }", Shape({4, 8}));
}

// A minibatch of 4 at once, and as microbatches [0, 1) and [1, 4) whose
// gradients accumulate: the same outputs, input gradients and gradients.
TEST(LlamaTest, MicrobatchesAccumulateToTheMinibatch) {
  const int64_t per = 5 * 16;
  LayerRun run(kGqa, Shape({5, 16}));
  std::mt19937 rng(8);
  const Values whole = run.RandomValues(4, &rng);
  auto part = [&](int64_t begin, int64_t end) {
    Values v = whole;
    v.x.assign(whole.x.begin() + begin * per, whole.x.begin() + end * per);
    v.dy.assign(whole.dy.begin() + begin * per, whole.dy.begin() + end * per);
    return v;
  };
  const Pass all = run.Run(whole);
  const Pass first = run.Run(part(0, 1));
  PassOptions o;
  o.grads_in = &first.grads;
  const Pass rest = run.Run(part(1, 4), o);
  std::vector<float> y = first.y;
  y.insert(y.end(), rest.y.begin(), rest.y.end());
  EXPECT_LT(RelativeError(ToDouble(y), ToDouble(all.y)), 1e-6);
  for (size_t p = 0; p < all.grads.size(); ++p) {
    EXPECT_LT(RelativeError(ToDouble(rest.grads[p]), ToDouble(all.grads[p])),
              1e-5)
        << run.layer().Params()[p].name;
  }
}

// Changing positions >= t of sample 0 changes no output before t, and
// nothing of sample 1.
TEST(LlamaTest, BlockIsCausal) {
  const int64_t t = 6, c = 16;
  LayerRun run(kGqa, Shape({t, c}));
  std::mt19937 rng(5);
  const Values v = run.RandomValues(2, &rng);
  const std::vector<float> y = run.Forward(v);
  for (int64_t changed = 1; changed < t; ++changed) {
    Values w = v;
    for (int64_t k = changed * c; k < t * c; ++k) w.x[k] += 0.5f;
    const std::vector<float> y2 = run.Forward(w);
    for (int64_t i = 0; i < 2 * t * c; ++i) {
      if (i < t * c && i >= changed * c) continue;
      ASSERT_EQ(y2[i], y[i]) << "position " << i / c << " saw " << changed;
    }
    EXPECT_GT(std::abs(y2[changed * c] - y[changed * c]), 1e-4);
  }
}

// Evaluation computes what training does and keeps nothing (no cache).
TEST(LlamaTest, EvaluationEqualsTraining) {
  for (const char* text : {kGqa, "rms_norm { dim: 16 }"}) {
    LayerRun run(text, Shape({5, 16}));
    std::mt19937 rng(9);
    const Values v = run.RandomValues(3, &rng);
    ExpectSameBits(run.Forward(v, false), run.Forward(v, true), text);
  }
}

// ------------------------------------------------------------ Threads

// One forward and backward on devices of 1 and of 3 threads.
std::pair<Pass, Pass> OnOneAndThreeThreads(const std::string& text,
                                           const Shape& sample, int64_t batch) {
  LayerRun one(text, sample, 1), three(text, sample, 3);
  std::mt19937 rng(10);
  const Values v = one.RandomValues(batch, &rng);
  return {one.Run(v), three.Run(v)};
}

// 1,536 rows of 24: the LLaMA kernels split their rows, columns and
// elements, the per-head products their batch, and no GEMM is cut into
// bands by the threads (weight gradients [24, 24] stay whole): the same
// bits throughout.
TEST(LlamaTest, BlockGivesTheSameBitsOnOneAndThreeThreads) {
  const std::string text =
      "llama_block { dim: 24 heads: 4 kv_heads: 2 hidden: 24 }";
  const auto [one, three] = OnOneAndThreeThreads(text, Shape({64, 24}), 24);
  LayerRun run(text, Shape({64, 24}));
  ExpectSamePass(one, three, run.layer());
}

// Wider, the weight-gradient GEMMs dW = dy^T x are cut into bands, which
// OpenBLAS rounds differently from one call (as the GPT block's; cpu_device
// test's BandedGemmEqualsOneThreadsWithinRounding): those within rounding,
// the output and input gradient still bit for bit.
TEST(LlamaTest, WideBlockDiffersAcrossThreadsOnlyInWeightGemmRounding) {
  const std::string text =
      "llama_block { dim: 64 heads: 4 kv_heads: 2 hidden: 96 }";
  const auto [one, three] = OnOneAndThreeThreads(text, Shape({128, 64}), 4);
  ExpectSameBits(one.y, three.y, "output");
  ExpectSameBits(one.dx, three.dx, "input gradient");
  for (size_t p = 0; p < one.grads.size(); ++p) {
    EXPECT_LT(RelativeError(ToDouble(one.grads[p]), ToDouble(three.grads[p])),
              1e-5)
        << p;
  }
}

TEST(LlamaTest, RmsNormGivesTheSameBitsOnOneAndThreeThreads) {
  const auto [one, three] =
      OnOneAndThreeThreads("rms_norm { dim: 96 }", Shape({256, 96}), 4);
  LayerRun run("rms_norm { dim: 96 }", Shape({256, 96}));
  ExpectSamePass(one, three, run.layer());
}

// The kernels alone, each split over the threads (1,024 rows of 96).
std::vector<float> LlamaKernels(int threads) {
  CpuDevice dev(CpuDeviceOptions{threads});
  const int64_t rows = 1024, cols = 96, n = rows * cols;
  std::mt19937 rng(11);
  const std::vector<float> x = Random(n, &rng), dy = Random(n, &rng),
                           gamma = Random(cols, &rng);
  std::vector<float> y(n), rstd(rows), dx(n), dg(cols, 0.5f), out;
  dev.RmsNorm(x.data(), gamma.data(), rows, cols, 1e-6f, y.data(), rstd.data());
  dev.RmsNormBackward(dy.data(), x.data(), gamma.data(), rstd.data(), rows,
                      cols, dx.data(), dg.data(), true);
  std::vector<float> cos, sin, rot = x, act(n), dgate(n), dup(n);
  RopeTables(64, 24, 10000.0f, &cos, &sin);
  dev.Rope(rot.data(), rows, 64, 4, 24, cos.data(), sin.data(), false);
  dev.SwiGlu(x.data(), dy.data(), act.data(), n);
  dev.SwiGluBackward(x.data(), y.data(), dy.data(), dgate.data(), dup.data(),
                     n);
  for (const auto* part : {&y, &rstd, &dx, &dg, &rot, &act, &dgate, &dup}) {
    out.insert(out.end(), part->begin(), part->end());
  }
  return out;
}

TEST(LlamaKernelTest, SameBitsOnOneAndThreeThreads) {
  ExpectSameBits(LlamaKernels(1), LlamaKernels(3), "kernels");
}

// -------------------------------------------------------------- Rotary

TEST(LlamaKernelTest, RopeTablesAreHuggingFaces) {
  std::vector<float> cos, sin;
  RopeTables(3, 4, 100.0f, &cos, &sin);
  ASSERT_EQ(cos.size(), 6u);
  ASSERT_EQ(sin.size(), 6u);
  // inv_freq = [1, 100^(-1/2) = 0.1]; table [position, i].
  const double inv_freq[2] = {1.0, 0.1};
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(cos[t * 2 + i], std::cos(t * inv_freq[i]), 1e-6);
      EXPECT_NEAR(sin[t * 2 + i], std::sin(t * inv_freq[i]), 1e-6);
    }
  }
}

// Two positions of two heads of width 4, by hand: position 0 unchanged,
// position 1's pairs (x0, x2) turned by 1 radian and (x1, x3) by 0.1; the
// inverse turns them back.
TEST(LlamaKernelTest, RopeRotatesHalvesByHand) {
  CpuDevice dev;
  std::vector<float> cos, sin;
  RopeTables(2, 4, 100.0f, &cos, &sin);
  const std::vector<float> x = {1, 2, 3, 4, 5,  6, 7, 8,   // position 0
                                1, 2, 3, 4, -1, 0, 2, 5};  // position 1
  std::vector<float> y = x;
  dev.Rope(y.data(), 2, 2, 2, 4, cos.data(), sin.data(), false);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y[i], x[i]) << i;
  const double c1 = std::cos(1.0), s1 = std::sin(1.0);
  const double c2 = std::cos(0.1), s2 = std::sin(0.1);
  const std::vector<double> want = {
      1 * c1 - 3 * s1,  2 * c2 - 4 * s2, 3 * c1 + 1 * s1,  4 * c2 + 2 * s2,
      -1 * c1 - 2 * s1, 0 * c2 - 5 * s2, 2 * c1 + -1 * s1, 5 * c2 + 0 * s2};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[8 + i], want[i], 1e-6) << i;
  dev.Rope(y.data(), 2, 2, 2, 4, cos.data(), sin.data(), true);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(y[i], x[i], 1e-6) << i;
}

// q at position m and k at position n: their rotated dot product depends
// on n - m only (rows of one tensor, row t at position t).
double RotatedScore(const std::vector<float>& q, const std::vector<float>& k,
                    int m, int n) {
  const int64_t hd = 8, positions = 16;
  std::vector<float> cos, sin;
  RopeTables(positions, hd, 30.0f, &cos, &sin);
  std::vector<float> rows(positions * hd, 0.0f);
  std::vector<float> other = rows;
  std::copy(q.begin(), q.end(), rows.begin() + m * hd);
  std::copy(k.begin(), k.end(), other.begin() + n * hd);
  CpuDevice dev;
  dev.Rope(rows.data(), positions, positions, 1, hd, cos.data(), sin.data(),
           false);
  dev.Rope(other.data(), positions, positions, 1, hd, cos.data(), sin.data(),
           false);
  double s = 0;
  for (int64_t e = 0; e < hd; ++e)
    s += double{rows[m * hd + e]} * other[n * hd + e];
  return s;
}

TEST(LlamaKernelTest, RopeScoresDependOnRelativePositionOnly) {
  std::mt19937 rng(12);
  const std::vector<float> q = Random(8, &rng), k = Random(8, &rng);
  for (int m = 0; m < 4; ++m) {
    for (int n = 0; n < 4; ++n) {
      const double base = RotatedScore(q, k, m, n);
      for (int shift : {1, 5, 11}) {
        EXPECT_NEAR(RotatedScore(q, k, m + shift, n + shift), base, 1e-5)
            << m << ", " << n << " shifted by " << shift;
      }
    }
  }
  EXPECT_GT(std::abs(RotatedScore(q, k, 0, 1) - RotatedScore(q, k, 0, 2)),
            1e-3);
}

// ------------------------------------------------ Construction, estimates

TEST(LlamaTest, ParametersAndInitialisation) {
  LayerRun run(kGqa, Shape({5, 16}));
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (const ParamSpec& p : run.layer().Params()) {
    names.push_back(p.name);
    shapes.push_back(p.shape);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "input_layernorm.weight", "self_attn.q_proj.weight",
                "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                "mlp.gate_proj.weight", "mlp.up_proj.weight",
                "mlp.down_proj.weight"}));
  EXPECT_EQ(shapes, (std::vector<Shape>{
                        Shape({16}), Shape({16, 16}), Shape({8, 16}),
                        Shape({8, 16}), Shape({16, 16}), Shape({16}),
                        Shape({24, 16}), Shape({24, 16}), Shape({16, 24})}));
  std::vector<std::vector<float>> v;
  for (const Shape& s : shapes) v.emplace_back(s.numel(), 7.0f);
  run.layer().InitParams(3, &v);
  EXPECT_EQ(v[0], std::vector<float>(16, 1.0f));
  EXPECT_EQ(v[5], std::vector<float>(16, 1.0f));
  double sq = 0;
  for (float w : v[6]) sq += double{w} * w;
  EXPECT_NEAR(std::sqrt(sq / v[6].size()), 0.02, 0.004);
  EXPECT_NE(v[6], v[7]) << "each weight draws its own values";
}

TEST(LlamaTest, NotTensorParallel) {
  TensorShard shard;
  shard.degree = 2;
  auto layer = CreateLayer(ParseLayer(kGqa), 1, Shape({5, 16}), 0, shard);
  ASSERT_FALSE(layer.ok());
  EXPECT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layer.status().message().find("model.layers[1]"), std::string::npos)
      << layer.status();
}

// pipeline/memory.cc's estimate of a LLaMA block and an RMSNorm: their
// parameters, and the floats their forward keeps per sample under each
// recomputation mode.
TEST(LlamaTest, MemoryEstimateCountsWhatTheLayersKeep) {
  const std::string norm = "rms_norm { dim: 16 }";
  ModelSpec model;
  *model.add_layers() = ParseLayer(kGqa);
  *model.add_layers() = ParseLayer(norm);
  *model.add_layers() =
      ParseLayer("linear { in_features: 16 out_features: 3 }");
  const SymbolicShape input = SymbolicShape::Known({5, 16});
  const auto outputs = InferModelShapes(model, input);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (Recompute mode :
       {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    SCOPED_TRACE(RecomputeName(mode));
    const auto f = EstimateModel(model, input, *outputs, 1, mode);
    int l = 0;
    for (const std::string& text : {std::string(kGqa), norm}) {
      LayerRun run(text, Shape({5, 16}));
      std::mt19937 rng(13);
      PassOptions o;
      o.recompute = mode;
      int64_t params = 0;
      for (const ParamSpec& p : run.layer().Params()) params += p.shape.numel();
      EXPECT_EQ(f[l].parameters, params) << text;
      EXPECT_EQ(f[l].activations_per_sample,
                run.Run(run.RandomValues(2, &rng), o).kept_per_sample)
          << text;
      ++l;
    }
  }
}

}  // namespace
}  // namespace aqueduct
