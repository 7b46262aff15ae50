// Megatron tensor parallelism in the GPT layers (transformer.h): a block or
// attention split across 2 and 4 members (threads over an in-memory
// communicator's ProcessGroup) computes what the whole layer computes,
// forward and backward, fused and split (B = I + W), with dropout; the
// members end with the same bits; initial values and dropout masks do not
// depend on the degree; shards and whole tensors convert both ways; the
// errors name what is wrong. Activation recomputation (selective, full)
// gives the same bits as none while keeping less, whole and split.
#include "worker/nn/tensor_parallel.h"

#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "common/comm/in_memory.h"
#include "common/comm/process_group.h"
#include "common/device/cpu_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/mesh.h"
#include "worker/nn/layer.h"
#include "worker/nn/loss.h"
#include "worker/nn/model.h"
#include "worker/nn/test_util.h"

namespace aqueduct {
namespace {

using Values = std::vector<std::vector<float>>;

constexpr char kBlock[] =
    "transformer_block { dim: 16 heads: 4 mlp_hidden: 32 dropout: 0.2 }";
constexpr char kAttention[] =
    "causal_self_attention { dim: 16 heads: 4 dropout: 0.2 }";
const Shape kSample({6, 16});
constexpr int64_t kBatch = 3;

std::unique_ptr<Layer> Build(const std::string& text, TensorShard shard) {
  auto layer = CreateLayer(ParseLayer(text), 1, kSample, 42, shard);
  EXPECT_TRUE(layer.ok()) << layer.status();
  return layer.ok() ? std::move(*layer) : nullptr;
}

Tensor Upload(Device& dev, const std::vector<float>& v, const Shape& shape) {
  Tensor t = *dev.Allocate(shape, DType::kF32);
  EXPECT_TRUE(dev.CopyFromHost(v.data(), t).ok());
  return t;
}

std::vector<float> Download(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

std::vector<double> Wide(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// What one member's (or the whole layer's) pass produced.
struct PassResult {
  std::vector<float> y, dx;
  Values grads;
  size_t kept_bytes = 0;  // what the forward kept for backward
};

// Forward then backward through `layer` (split into I and W when `split`),
// in a training pass of minibatch 5 whose batch starts at row 2.
// A sequence-parallel member's x and dy are its rows.
PassResult RunPass(const Layer& layer, const Values& params,
                   const std::vector<float>& x, const std::vector<float>& dy,
                   bool split, TensorParallelGroup* group,
                   Recompute recompute = Recompute::kNone) {
  CpuDevice dev;
  PassContext ctx;
  ctx.minibatch = 5;
  ctx.sample_offset = 2;
  ctx.tensor = group;
  ctx.recompute = recompute;
  std::vector<Tensor> p, g;
  const std::vector<ParamSpec> specs = layer.Params();
  for (size_t i = 0; i < specs.size(); ++i) {
    p.push_back(Upload(dev, params[i], specs[i].shape));
    g.push_back(*dev.Zeros(specs[i].shape, DType::kF32));
  }
  const Shape batch =
      layer.shard().sequence
          ? Shape({static_cast<int64_t>(x.size()) / kSample[1], kSample[1]})
          : Shape({kBatch, kSample[0], kSample[1]});
  LayerCache cache;
  Tensor y, dx;
  PassResult out;
  absl::Status s =
      layer.Forward(dev, p, Upload(dev, x, batch), ctx, &y, &cache);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return out;
  out.y = Download(y);
  for (const Tensor& t : cache.tensors) {
    if (t.defined()) out.kept_bytes += t.nbytes();
  }
  DeferredGrads deferred;
  s = layer.BackwardInput(dev, p, cache, Upload(dev, dy, batch), ctx, &dx, g,
                          false, split ? &deferred : nullptr);
  EXPECT_TRUE(s.ok()) << s;
  if (split) RunDeferredGrads(dev, deferred);
  if (layer.shard().sequence) {
    for (size_t i = 0; i < g.size(); ++i) {
      if (!layer.PartialOverRows(static_cast<int>(i))) continue;
      EXPECT_TRUE(group->AllReduceHost(g[i].f32(), g[i].numel()).ok());
    }
  }
  out.dx = Download(dx);
  for (const Tensor& t : g) out.grads.push_back(Download(t));
  return out;
}

// The whole layer's pass and each of `degree` members' passes, the members
// on threads joined by a ProcessGroup.
struct Comparison {
  PassResult whole;
  std::vector<PassResult> members;
  std::unique_ptr<Layer> whole_layer;
  std::vector<std::unique_ptr<Layer>> member_layers;
  std::vector<int64_t> bytes_sent;  // By each member, in its group's sums.
};

// The rows of a [rows, ...] batch's values member r of `degree` holds.
std::vector<float> RowsOf(const std::vector<float>& v, int r, int degree) {
  const size_t n = v.size() / degree;
  return std::vector<float>(v.begin() + r * n, v.begin() + (r + 1) * n);
}

Comparison Compare(const std::string& text, int degree, bool split,
                   Recompute recompute = Recompute::kNone,
                   bool sequence = false) {
  Comparison c;
  std::mt19937 rng(7);
  c.whole_layer = Build(text, {});
  Values whole_params;
  for (const ParamSpec& p : c.whole_layer->Params()) {
    whole_params.push_back(Random(p.shape.numel(), &rng, -0.5f, 0.5f));
  }
  const int64_t n = kBatch * kSample.numel();
  const std::vector<float> x = Random(n, &rng), dy = Random(n, &rng);
  c.whole =
      RunPass(*c.whole_layer, whole_params, x, dy, split, nullptr, recompute);
  auto hub = std::make_shared<InMemoryHub>(degree);
  std::vector<int> ranks(degree);
  for (int r = 0; r < degree; ++r) ranks[r] = r;
  c.members.resize(degree);
  c.member_layers.resize(degree);
  for (int r = 0; r < degree; ++r) {
    TensorShard shard{r, degree};
    shard.sequence = sequence;
    c.member_layers[r] = Build(text, shard);
  }
  c.bytes_sent.resize(degree);
  std::vector<std::thread> threads;
  for (int r = 0; r < degree; ++r) {
    threads.emplace_back([&, r] {
      InMemoryCommunicator comm(hub, r);
      auto group = ProcessGroup::Make(&comm, ranks, 0, "tensor group");
      ASSERT_TRUE(group.ok());
      ProcessGroupTensorParallel tp(group->get(), absl::Seconds(20));
      absl::Cleanup count = [&] { c.bytes_sent[r] = (*group)->bytes_sent(); };
      const Layer& layer = *c.member_layers[r];
      Values shards;
      for (size_t i = 0; i < whole_params.size(); ++i) {
        const ParamSplit split_i = layer.SplitOf(static_cast<int>(i));
        shards.push_back(ShardOfWhole(whole_params[i],
                                      c.whole_layer->Params()[i].shape, split_i,
                                      {r, degree}));
      }
      c.members[r] = sequence
                         ? RunPass(layer, shards, RowsOf(x, r, degree),
                                   RowsOf(dy, r, degree), split, &tp, recompute)
                         : RunPass(layer, shards, x, dy, split, &tp, recompute);
    });
  }
  for (auto& t : threads) t.join();
  return c;
}

void ExpectMembersMatchTheWholeLayer(const Comparison& c) {
  const int degree = static_cast<int>(c.members.size());
  std::vector<float> y = c.members[0].y, dx = c.members[0].dx;
  if (c.member_layers[0]->shard().sequence) {
    // Each member's rows of the residual stream and its gradient.
    for (int r = 1; r < degree; ++r) {
      y.insert(y.end(), c.members[r].y.begin(), c.members[r].y.end());
      dx.insert(dx.end(), c.members[r].dx.begin(), c.members[r].dx.end());
    }
  } else {
    for (int r = 0; r < degree; ++r) {
      // The residual stream and its gradient: the same bits on every member.
      EXPECT_EQ(c.members[r].y, c.members[0].y) << "member " << r;
      EXPECT_EQ(c.members[r].dx, c.members[0].dx) << "member " << r;
    }
  }
  EXPECT_LT(RelativeError(Wide(y), Wide(c.whole.y)), 1e-6);
  EXPECT_LT(RelativeError(Wide(dx), Wide(c.whole.dx)), 1e-6);
  const std::vector<ParamSpec> specs = c.whole_layer->Params();
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<std::vector<float>> parts;
    for (const PassResult& m : c.members) parts.push_back(m.grads[i]);
    const ParamSplit split = c.member_layers[0]->SplitOf(static_cast<int>(i));
    if (split.dim < 0) {
      for (int r = 1; r < degree; ++r) {
        EXPECT_EQ(parts[r], parts[0]) << specs[i].name << " member " << r;
      }
    }
    const std::vector<float> whole =
        WholeOfShards(parts, specs[i].shape, split);
    EXPECT_LT(RelativeError(Wide(whole), Wide(c.whole.grads[i])), 1e-6)
        << specs[i].name;
  }
}

TEST(TensorParallelTest, BlockMembersComputeTheWholeBlock) {
  for (int degree : {2, 4}) {
    for (bool split : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "degree " << degree << " split " << split);
      ExpectMembersMatchTheWholeLayer(Compare(kBlock, degree, split));
    }
  }
}

// Sequence parallelism: each member's rows of the block's output and input
// gradient are the whole block's (dropout masks included), the LayerNorm
// gradients summed over the members are the whole block's, fused and
// split, in each recomputation mode; and the sums of the bias and
// LayerNorm gradients leave every member the same bits.
TEST(TensorParallelTest, SequenceParallelBlockComputesTheWholeBlock) {
  for (bool split : {false, true}) {
    for (Recompute mode :
         {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      SCOPED_TRACE(testing::Message() << "split " << split << " recompute "
                                      << RecomputeName(mode));
      ExpectMembersMatchTheWholeLayer(Compare(kBlock, 2, split, mode, true));
    }
  }
  // Forward: the same bytes as without (each all-reduce is a reduce-scatter
  // and an all-gather); backward: the gathers of ln_1(x) and ln_2(x2) once
  // more, for the weight gradients (as Megatron). Then, once per step, the
  // LayerNorms' 4 C gradients all-reduced.
  const Comparison plain = Compare(kBlock, 2, false);
  const Comparison sequence = Compare(kBlock, 2, false, Recompute::kNone, true);
  const int64_t rows = kBatch * kSample[0], dim = kSample[1];
  const int64_t norms = 4 * dim * 4 * 2 * (2 - 1) / 2;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(sequence.bytes_sent[r],
              TensorGroupBytesPerLayer(rows, dim, 2, true, false, true) + norms)
        << "member " << r;
  }
  EXPECT_EQ(sequence.bytes_sent[0] - plain.bytes_sent[0],
            2 * rows * dim * 4 / 2 + norms);
  // What a member keeps: half of x and of x2.
  EXPECT_EQ(plain.members[0].kept_bytes - sequence.members[0].kept_bytes,
            2u * rows * dim * 4 / 2);
}

// Sequence parallelism needs each sample's positions to split.
TEST(TensorParallelTest, SequenceParallelRefusesPositionsThatDoNotSplit) {
  TensorShard shard{0, 4};
  shard.sequence = true;
  auto layer = CreateLayer(ParseLayer(kBlock), 1, kSample, 42, shard);
  ASSERT_FALSE(layer.ok());
  EXPECT_THAT(std::string(layer.status().message()),
              testing::HasSubstr("splits each sample's 6 positions across the "
                                 "tensor-parallel degree of 4"));
}

// The bytes each member's communicator sent in a block's and an attention
// layer's forward and backward: the formula of pipeline/mesh.h.
TEST(TensorParallelTest, TrafficPerLayerIsTheFormulas) {
  const int64_t rows = kBatch * kSample[0], dim = kSample[1];
  for (int degree : {2, 4}) {
    const Comparison block = Compare(kBlock, degree, false);
    const Comparison attention = Compare(kAttention, degree, false);
    for (int r = 0; r < degree; ++r) {
      EXPECT_EQ(block.bytes_sent[r],
                TensorGroupBytesPerLayer(rows, dim, degree, true, false))
          << "degree " << degree << " member " << r;
      EXPECT_EQ(attention.bytes_sent[r],
                TensorGroupBytesPerLayer(rows, dim, degree, false, false))
          << "degree " << degree << " member " << r;
    }
  }
  // 3 x 6 positions of 16 floats, 2 members: 4 sums of 288 floats, each
  // member sending 2 (t - 1) / t = 1 buffer's worth of each.
  EXPECT_EQ(TensorGroupBytesPerLayer(18, 16, 2, true, false), 4 * 288 * 4);
}

TEST(TensorParallelTest, AttentionMembersComputeTheWholeAttention) {
  for (int degree : {2, 4}) {
    SCOPED_TRACE(testing::Message() << "degree " << degree);
    ExpectMembersMatchTheWholeLayer(Compare(kAttention, degree, false));
  }
}

// The whole layer in each recomputation mode: the same bits as none, and
// less kept (full: the input only).
TEST(RecomputeTest, EveryModeGivesTheSameBitsKeepingLess) {
  for (const char* text : {kBlock, kAttention}) {
    for (bool split : {false, true}) {
      SCOPED_TRACE(testing::Message() << text << " split " << split);
      const Comparison none = Compare(text, 1, split, Recompute::kNone);
      const Comparison selective =
          Compare(text, 1, split, Recompute::kSelective);
      const Comparison full = Compare(text, 1, split, Recompute::kFull);
      for (const Comparison* c : {&selective, &full}) {
        EXPECT_EQ(c->whole.y, none.whole.y);
        EXPECT_EQ(c->whole.dx, none.whole.dx);
        EXPECT_EQ(c->whole.grads, none.whole.grads);
      }
      EXPECT_LT(selective.whole.kept_bytes, none.whole.kept_bytes);
      // The attention weights: 3 samples x 4 heads x 6 x 6 floats.
      EXPECT_EQ(none.whole.kept_bytes - selective.whole.kept_bytes,
                3u * 4 * 6 * 6 * 4);
      EXPECT_EQ(full.whole.kept_bytes, 3u * 6 * 16 * 4);
    }
  }
}

// Full recomputation inside a tensor-parallel block reruns its sums in
// backward, in the same order on every member.
TEST(RecomputeTest, FullRecomputationOfATensorParallelBlock) {
  const Comparison c = Compare(kBlock, 2, true, Recompute::kFull);
  ExpectMembersMatchTheWholeLayer(c);
  const Comparison plain = Compare(kBlock, 2, true, Recompute::kNone);
  EXPECT_EQ(c.members[0].grads, plain.members[0].grads);
  EXPECT_EQ(c.members[1].dx, plain.members[1].dx);
}

TEST(TensorParallelTest, ShardsAreThePartsOfTheWholeLayersParameters) {
  auto whole = Build(kBlock, {});
  auto part = Build(kBlock, {1, 2});
  ASSERT_TRUE(whole && part);
  const std::vector<ParamSpec> ws = whole->Params(), ps = part->Params();
  ASSERT_EQ(ws.size(), ps.size());
  std::map<std::string, std::string> shapes;
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(ws[i].name, ps[i].name);
    EXPECT_EQ(WholeShape(ps[i].shape, part->SplitOf(i), 2), ws[i].shape)
        << ws[i].name;
    shapes[ps[i].name] = ps[i].shape.ToString();
  }
  EXPECT_EQ(shapes["attn.c_attn.weight"], "[24, 16]");
  EXPECT_EQ(shapes["attn.c_attn.bias"], "[24]");
  EXPECT_EQ(shapes["attn.c_proj.weight"], "[16, 8]");
  EXPECT_EQ(shapes["attn.c_proj.bias"], "[16]");
  EXPECT_EQ(shapes["mlp.c_fc.weight"], "[16, 16]");
  EXPECT_EQ(shapes["mlp.c_proj.weight"], "[16, 16]");
  EXPECT_EQ(shapes["ln_1.weight"], "[16]");
  // Initial values: the whole layer's, split.
  Values wv(ws.size()), pv(ps.size());
  for (size_t i = 0; i < ws.size(); ++i) {
    wv[i].resize(ws[i].shape.numel());
    pv[i].resize(ps[i].shape.numel());
  }
  whole->InitParams(9, &wv);
  part->InitParams(9, &pv);
  for (size_t i = 0; i < ws.size(); ++i) {
    EXPECT_EQ(pv[i], ShardOfWhole(wv[i], ws[i].shape, part->SplitOf(i), {1, 2}))
        << ws[i].name;
  }
}

// c_attn's weight [3 * 4, 2] split over 2: member r holds rows [2r, 2r + 2)
// of each of q, k and v.
TEST(TensorParallelTest, ShardOfWholeSplitsEachBlock) {
  std::vector<float> whole(24);
  for (int i = 0; i < 24; ++i) whole[i] = static_cast<float>(i);
  const Shape shape({12, 2});
  const ParamSplit qkv{0, 3};
  const std::vector<float> r1 = ShardOfWhole(whole, shape, qkv, {1, 2});
  EXPECT_EQ(r1,
            (std::vector<float>{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23}));
  const std::vector<float> r0 = ShardOfWhole(whole, shape, qkv, {0, 2});
  EXPECT_EQ(WholeOfShards({r0, r1}, shape, qkv), whole);
  const ParamSplit columns{1, 1};
  const Shape wide({2, 4});
  const std::vector<float> w8(whole.begin(), whole.begin() + 8);
  EXPECT_EQ(ShardOfWhole(w8, wide, columns, {1, 2}),
            (std::vector<float>{2, 3, 6, 7}));
  EXPECT_EQ(WholeOfShards({ShardOfWhole(w8, wide, columns, {0, 2}),
                           ShardOfWhole(w8, wide, columns, {1, 2})},
                          wide, columns),
            w8);
}

TEST(TensorParallelTest, ErrorsNameTheProblem) {
  auto bad = CreateLayer(ParseLayer(kBlock), 3, kSample, 42, {0, 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "model.layers[3].transformer_block.heads=4 cannot be split "
                "across a tensor-parallel degree of 3"),
            std::string::npos)
      << bad.status();
  // A member that runs without its group.
  auto part = Build(kBlock, {0, 2});
  CpuDevice dev;
  std::vector<Tensor> p;
  for (const ParamSpec& s : part->Params()) {
    p.push_back(*dev.Zeros(s.shape, DType::kF32));
  }
  Tensor y;
  LayerCache cache;
  const absl::Status s =
      part->Forward(dev, p, *dev.Zeros(Shape({1, 6, 16}), DType::kF32),
                    PassContext(), &y, &cache);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("member 0 of a tensor-parallel group of 2 but "
                             "runs in none"),
            std::string::npos)
      << s;
}

// The vocabulary-parallel cross-entropy of 2 and 4 members equals the
// whole softmax cross-entropy: losses (the same bits on every member) and
// each member's columns of the gradient.
TEST(TensorParallelTest, VocabularyParallelCrossEntropyIsTheWholeOne) {
  const int64_t rows = 5, vocab = 8;
  std::mt19937 rng(11);
  const std::vector<float> logits = Random(rows * vocab, &rng, -4, 4);
  const std::vector<int32_t> labels = {0, 7, 3, 4, 7};
  CpuDevice dev;
  Tensor x = Upload(dev, logits, Shape({rows, vocab}));
  Tensor y = *dev.Allocate(Shape({rows}), DType::kI32);
  ASSERT_TRUE(dev.CopyFromHost(labels.data(), y).ok());
  auto whole = SoftmaxCrossEntropy(dev, x, y, 0.25f);
  ASSERT_TRUE(whole.ok());
  const std::vector<float> want_loss = Download(whole->losses);
  const std::vector<float> want_grad = Download(whole->dlogits);
  for (int degree : {2, 4}) {
    const int64_t part = vocab / degree;
    auto hub = std::make_shared<InMemoryHub>(degree);
    std::vector<std::vector<float>> losses(degree), grads(degree);
    std::vector<std::thread> threads;
    for (int r = 0; r < degree; ++r) {
      threads.emplace_back([&, r] {
        InMemoryCommunicator comm(hub, r);
        std::vector<int> ranks(degree);
        for (int k = 0; k < degree; ++k) ranks[k] = k;
        auto group = ProcessGroup::Make(&comm, ranks, 0, "tensor group");
        ASSERT_TRUE(group.ok());
        ProcessGroupTensorParallel tp(group->get(), absl::Seconds(20));
        CpuDevice member;
        std::vector<float> mine;
        for (int64_t i = 0; i < rows; ++i) {
          mine.insert(mine.end(), logits.begin() + i * vocab + r * part,
                      logits.begin() + i * vocab + (r + 1) * part);
        }
        Tensor labels_t = *member.Allocate(Shape({rows}), DType::kI32);
        ASSERT_TRUE(member.CopyFromHost(labels.data(), labels_t).ok());
        auto out = VocabParallelCrossEntropy(
            member, tp, Upload(member, mine, Shape({rows, part})), labels_t,
            r * part, 0.25f);
        ASSERT_TRUE(out.ok()) << out.status();
        losses[r] = Download(out->losses);
        grads[r] = Download(out->dlogits);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < degree; ++r) {
      EXPECT_EQ(losses[r], losses[0]) << "member " << r;
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t c = 0; c < part; ++c) {
          EXPECT_NEAR(grads[r][i * part + c],
                      want_grad[i * vocab + r * part + c], 1e-6);
        }
      }
    }
    EXPECT_LT(RelativeError(Wide(losses[0]), Wide(want_loss)), 1e-6);
  }
}

// A file of whole tensors (weights, optimizer state, a stranger) split for
// 2 members and gathered back over their group: the same file.
TEST(TensorParallelFileTest, ShardThenGatherGivesTheWholeFileBack) {
  ModelSpec spec;
  *spec.add_layers() = ParseLayer(kBlock);
  auto model = Model::Build(spec, kSample, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  std::mt19937 rng(3);
  SafetensorsFile whole;
  whole.metadata["version"] = "4";
  auto add = [&](const std::string& name, Shape shape) {
    HostTensor t;
    t.shape = shape;
    const std::vector<float> v = Random(shape.numel(), &rng);
    t.data.resize(v.size() * 4);
    std::memcpy(t.data.data(), v.data(), t.data.size());
    whole.tensors[name] = t;
  };
  add("layers.0.attn.c_attn.weight", Shape({48, 16}));
  add("layers.0.attn.c_attn.weight.exp_avg", Shape({48, 16}));
  add("layers.0.mlp.c_proj.weight", Shape({16, 32}));
  add("layers.0.mlp.c_proj.bias", Shape({16}));
  add("layers.0.ln_1.weight", Shape({16}));
  add("unrelated", Shape({5}));
  EXPECT_EQ(SplitOfTensor(**model, "layers.0.attn.c_attn.weight.exp_avg").dim,
            0);
  EXPECT_EQ(SplitOfTensor(**model, "layers.0.mlp.c_proj.weight").dim, 1);
  EXPECT_EQ(SplitOfTensor(**model, "layers.0.ln_1.weight").dim, -1);
  EXPECT_EQ(SplitOfTensor(**model, "layers.7.ln_1.weight").dim, -1);
  auto hub = std::make_shared<InMemoryHub>(2);
  std::vector<SafetensorsFile> back(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      InMemoryCommunicator comm(hub, r);
      auto group = ProcessGroup::Make(&comm, {0, 1}, 0, "tensor group");
      ASSERT_TRUE(group.ok());
      auto part = ShardFile(whole, **model, {r, 2});
      ASSERT_TRUE(part.ok()) << part.status();
      EXPECT_EQ(part->tensors["layers.0.attn.c_attn.weight"].shape,
                Shape({24, 16}));
      EXPECT_EQ(part->tensors["layers.0.mlp.c_proj.weight"].shape,
                Shape({16, 16}));
      auto gathered = GatherWholeFile(*part, **model, **group,
                                      absl::Now() + absl::Seconds(20));
      ASSERT_TRUE(gathered.ok()) << gathered.status();
      back[r] = *std::move(gathered);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(back[r].metadata, whole.metadata);
    ASSERT_EQ(back[r].tensors.size(), whole.tensors.size());
    for (const auto& [name, t] : whole.tensors) {
      EXPECT_EQ(back[r].tensors[name].shape, t.shape) << name;
      EXPECT_EQ(back[r].tensors[name].data, t.data) << name;
    }
  }
  auto bad = ShardFile(whole, **model, {0, 3});
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace aqueduct
