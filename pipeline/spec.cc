#include "pipeline/spec.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "pipeline/limits.h"
#include "pipeline/memory.h"

namespace aqueduct {

namespace {

class CollectErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(absl::StrCat(line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, message);
  }
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  std::vector<std::string> errors_;
};

absl::Status CheckRange(absl::string_view field, double value, double lo,
                        double hi, bool hi_open) {
  const bool ok = std::isfinite(value) && value >= lo &&
                  (hi_open ? value < hi : value <= hi);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, "=", value, " must be in [", lo, ", ",
                   hi, hi_open ? ")" : "]"));
}

absl::Status ValidateLrSchedule(const LrSchedule& s) {
  if (s.warmup_steps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.schedule.warmup_steps=", s.warmup_steps(),
                     " must not be negative"));
  }
  RETURN_IF_ERROR(CheckAtMost("optimizer.schedule.warmup_steps",
                              s.warmup_steps(), kMaxSteps));
  if (s.has_cosine()) {
    RETURN_IF_ERROR(CheckRange("schedule.cosine.final_fraction",
                               s.cosine().final_fraction(), 0, 1, false));
  }
  if (s.has_step()) {
    if (s.step().every_steps() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.schedule.step.every_steps=", s.step().every_steps(),
          " must be positive"));
    }
    RETURN_IF_ERROR(CheckAtMost("optimizer.schedule.step.every_steps",
                                s.step().every_steps(), kMaxSteps));
    RETURN_IF_ERROR(
        CheckRange("schedule.step.gamma", s.step().gamma(), 0, 1, false));
  }
  return absl::OkStatus();
}

// A learning rate past this is a typo, not a schedule.
constexpr float kMaxLearningRate = 1000;

absl::Status CheckLr(absl::string_view field, float lr) {
  if (!(lr > 0 && std::isfinite(lr))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.", field, ".lr=", lr, " must be positive and finite"));
  }
  if (lr > kMaxLearningRate) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.", field, ".lr=", lr, " must be at most ",
                     kMaxLearningRate));
  }
  return absl::OkStatus();
}

absl::Status ValidateSgd(const SgdSpec& s) {
  RETURN_IF_ERROR(CheckLr("sgd", s.lr()));
  RETURN_IF_ERROR(CheckRange("sgd.momentum", s.momentum(), 0, 1, true));
  RETURN_IF_ERROR(CheckRange("sgd.weight_decay", s.weight_decay(), 0, 1, true));
  RETURN_IF_ERROR(CheckRange("sgd.dampening", s.dampening(), 0, 1, false));
  if (s.nesterov() && (s.momentum() == 0 || s.dampening() != 0)) {
    return absl::InvalidArgumentError(
        "optimizer.sgd.nesterov=true needs momentum > 0 and dampening = 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateAdam(const AdamSpec& s, const std::string& kind) {
  RETURN_IF_ERROR(CheckLr(kind, s.lr()));
  if (s.has_beta1()) {
    RETURN_IF_ERROR(CheckRange(kind + ".beta1", s.beta1(), 0, 1, true));
  }
  if (s.has_beta2()) {
    RETURN_IF_ERROR(CheckRange(kind + ".beta2", s.beta2(), 0, 1, true));
  }
  if (s.has_eps() && !(s.eps() > 0 && s.eps() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.", kind, ".eps=", s.eps(), " must be positive (at most 1)"));
  }
  return CheckRange(kind + ".weight_decay", s.weight_decay(), 0, 1, true);
}

// The parameter groups' kinds and values, and the clipping threshold.
absl::Status ValidateParamGroups(const OptimizerSpec& spec) {
  static constexpr absl::string_view kKinds[] = {"weight", "bias", "norm",
                                                 "embedding"};
  for (int g = 0; g < spec.param_groups_size(); ++g) {
    const ParamGroup& group = spec.param_groups(g);
    const std::string field = absl::StrCat("param_groups[", g, "]");
    if (group.kinds().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.", field,
          ".kinds is empty (name some of weight, bias, norm, embedding)"));
    }
    for (const std::string& kind : group.kinds()) {
      if (std::find(std::begin(kKinds), std::end(kKinds), kind) ==
          std::end(kKinds)) {
        return absl::InvalidArgumentError(
            absl::StrCat("optimizer.", field, ".kinds has \"", kind,
                         "\"; the kinds are weight, bias, norm and embedding"));
      }
    }
    if (group.has_weight_decay()) {
      RETURN_IF_ERROR(CheckRange(field + ".weight_decay", group.weight_decay(),
                                 0, 1, true));
    }
    if (group.has_lr_scale()) {
      RETURN_IF_ERROR(
          CheckRange(field + ".lr_scale", group.lr_scale(), 0, 1e3, false));
    }
  }
  return CheckRange("clip_grad_norm", spec.clip_grad_norm(), 0, 1e9, false);
}

// The floats of one synthetic sample, or the error naming the dimension.
absl::StatusOr<int64_t> SyntheticSampleFloats(const SyntheticData& s) {
  if (s.sample_shape().empty()) {
    return absl::InvalidArgumentError(
        "data.synthetic.sample_shape is empty (e.g. [784] or [1, 28, 28])");
  }
  if (s.sample_shape_size() > kMaxSampleRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.synthetic.sample_shape has ", s.sample_shape_size(),
                     " dimensions, more than ", kMaxSampleRank));
  }
  int64_t per = 1;
  for (int i = 0; i < s.sample_shape_size(); ++i) {
    if (s.sample_shape(i) <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.synthetic.sample_shape[", i,
                       "]=", s.sample_shape(i), " must be positive"));
    }
    per = SaturatingMul(per, s.sample_shape(i));
  }
  if (per > kMaxTensorFloats) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.synthetic.sample_shape: a sample of ",
                     per == kSaturated ? "more than 2^63" : absl::StrCat(per),
                     " floats exceeds 2^32 floats"));
  }
  return per;
}

absl::Status ValidateSynthetic(const SyntheticData& s) {
  ASSIGN_OR_RETURN(const int64_t per, SyntheticSampleFloats(s));
  if (s.num_classes() < 2 || s.num_classes() > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.synthetic.num_classes=", s.num_classes(),
                     " must be in [2, 1000000]"));
  }
  // The teacher that labels the samples is [num_classes, sample] floats.
  const int64_t teacher = SaturatingMul(s.num_classes(), per);
  if (teacher > kMaxTensorFloats) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.synthetic: the teacher [num_classes, sample] = [",
                     s.num_classes(), ", ", per, "] holds ", teacher,
                     " floats, more than 2^32 floats"));
  }
  if (s.train_samples() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.synthetic.train_samples=", s.train_samples(),
                     " must be positive"));
  }
  RETURN_IF_ERROR(CheckAtMost("data.synthetic.train_samples", s.train_samples(),
                              kMaxSamples));
  if (s.test_samples() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.synthetic.test_samples=", s.test_samples(),
                     " must not be negative"));
  }
  RETURN_IF_ERROR(CheckAtMost("data.synthetic.test_samples", s.test_samples(),
                              kMaxSamples));
  // Both counts are at most 2^40 and a sample at most 2^32 floats: neither
  // the sum nor the product can overflow, and they saturate regardless.
  const int64_t floats =
      SaturatingMul(SaturatingAdd(s.train_samples(), s.test_samples()), per);
  if (floats > kMaxTensorFloats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.synthetic: (train_samples=", s.train_samples(),
        " + test_samples=", s.test_samples(), ") x ", per,
        " floats per sample = ", floats, " floats exceeds 2^32 floats"));
  }
  return absl::OkStatus();
}

absl::Status ValidateIdx(const IdxData& idx) {
  if (idx.train_images().empty() || idx.train_labels().empty()) {
    return absl::InvalidArgumentError(
        "data.idx.train_images and data.idx.train_labels are required");
  }
  if (idx.test_images().empty() != idx.test_labels().empty()) {
    return absl::InvalidArgumentError(
        "data.idx.test_images and data.idx.test_labels must be set together");
  }
  return absl::OkStatus();
}

// An absolute path in `field`, when set (or `required`).
absl::Status CheckAbsolute(absl::string_view field, const std::string& path,
                           bool required) {
  if (path.empty() && !required) return absl::OkStatus();
  if (!path.empty() && path[0] == '/') return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, "='", path,
      "' must be an absolute path (workers run in directories of their own)"));
}

// The SentencePiece model and the token files' fields.
absl::Status ValidateTokenFields(const v1::TextData& t) {
  RETURN_IF_ERROR(CheckAbsolute("data.text.tokenizer_model",
                                t.tokenizer_model(),
                                t.tokenizer() == "sentencepiece"));
  if (t.token_dtype().empty()) {
    if (t.vocab_size() != 0 || !t.val_file().empty() ||
        t.tokenizer() == "sentencepiece") {
      return absl::InvalidArgumentError(
          "data.text.vocab_size, val_file and tokenizer \"sentencepiece\" "
          "are for token files (set data.text.token_dtype; aq tokenize "
          "writes them)");
    }
    return absl::OkStatus();
  }
  if (t.token_dtype() != "uint16" && t.token_dtype() != "uint32") {
    return absl::InvalidArgumentError(
        absl::StrCat("data.text.token_dtype='", t.token_dtype(),
                     "' is not one of: uint16, uint32"));
  }
  if (t.files_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.text.files names ", t.files_size(),
        " files; token files take one (concatenate them when tokenizing)"));
  }
  if (!t.tokenizer().empty() && t.tokenizer() != "sentencepiece") {
    return absl::InvalidArgumentError(
        absl::StrCat("data.text.tokenizer='", t.tokenizer(),
                     "' does not apply to token files (\"sentencepiece\" with "
                     "tokenizer_model, or nothing)"));
  }
  const int64_t most = t.token_dtype() == "uint16" ? 65536 : kMaxFeatures;
  if (t.vocab_size() < 1 || t.vocab_size() > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.text.vocab_size=", t.vocab_size(), " must be in [1, ", most,
        "] for ", t.token_dtype(), " token files"));
  }
  return CheckAbsolute("data.text.val_file", t.val_file(), false);
}

absl::Status ValidateText(const v1::TextData& t) {
  if (t.files().empty()) {
    return absl::InvalidArgumentError(
        "data.text.files is empty (name at least one UTF-8 text file)");
  }
  for (int i = 0; i < t.files_size(); ++i) {
    if (t.files(i).empty() || t.files(i)[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.text.files[", i, "]='", t.files(i),
          "' must be an absolute path (workers run in directories of their "
          "own)"));
    }
  }
  if (t.context() < 1 || t.context() > kMaxContext) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.text.context=", t.context(), " must be in [1, ",
                     kMaxContext, "]"));
  }
  if (!t.tokenizer().empty() && t.tokenizer() != "bytes" &&
      t.tokenizer() != "chars" && t.tokenizer() != "sentencepiece") {
    return absl::InvalidArgumentError(
        absl::StrCat("data.text.tokenizer='", t.tokenizer(),
                     "' is not one of: bytes, chars, sentencepiece"));
  }
  RETURN_IF_ERROR(ValidateTokenFields(t));
  if (t.has_val_fraction() &&
      !(t.val_fraction() >= 0 && t.val_fraction() <= 0.5f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.text.val_fraction=", t.val_fraction(), " must be in [0, 0.5]"));
  }
  if (t.val_windows() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.text.val_windows=", t.val_windows(),
                     " must not be negative (0 = all)"));
  }
  RETURN_IF_ERROR(
      CheckAtMost("data.text.val_windows", t.val_windows(), kMaxSamples));
  if (t.val_windows() > 0 && t.has_val_fraction() && t.val_fraction() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.text.val_windows=", t.val_windows(),
                     " but data.text.val_fraction=0 holds out no text"));
  }
  return absl::OkStatus();
}

// The DataSpec fields about images (and the limits, which text states in
// its own terms) are refused for text rather than ignored.
absl::Status RefuseImageFieldsForText(const DataSpec& spec) {
  if (spec.mean() != 0) {
    return absl::InvalidArgumentError(
        "data.mean applies to image data, not data.text");
  }
  if (spec.has_std()) {
    return absl::InvalidArgumentError(
        "data.std applies to image data, not data.text");
  }
  if (spec.has_shuffle() && !spec.shuffle()) {
    return absl::InvalidArgumentError(
        "data.shuffle=false applies to image data, not data.text (training "
        "windows are always drawn at random)");
  }
  if (spec.train_limit() != 0) {
    return absl::InvalidArgumentError(
        "data.train_limit applies to image data, not data.text (bound the "
        "run with max_steps)");
  }
  if (spec.test_limit() != 0) {
    return absl::InvalidArgumentError(
        "data.test_limit applies to image data, not data.text (use "
        "data.text.val_windows)");
  }
  return absl::OkStatus();
}

absl::Status ValidateLoop(const JobSpec& spec) {
  if (spec.batch_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size=", spec.batch_size(), " must be positive"));
  }
  RETURN_IF_ERROR(CheckAtMost("batch_size", spec.batch_size(), kMaxBatchSize));
  if (spec.epochs() < 0 || spec.max_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epochs=", spec.epochs(), " and max_steps=", spec.max_steps(),
        " must not be negative"));
  }
  RETURN_IF_ERROR(CheckAtMost("epochs", spec.epochs(), kMaxEpochs));
  RETURN_IF_ERROR(CheckAtMost("max_steps", spec.max_steps(), kMaxSteps));
  RETURN_IF_ERROR(CheckInRange("eval_every", spec.eval_every(), 0, kMaxSteps));
  RETURN_IF_ERROR(CheckInRange("priority", spec.priority(), -kMaxJobPriority,
                               kMaxJobPriority));
  if (spec.epochs() == 0 && spec.max_steps() == 0) {
    return absl::InvalidArgumentError(
        "neither epochs nor max_steps is set: training would never stop");
  }
  const int64_t passes = spec.grad_accumulation();
  if (passes < 0 || (passes > 1 && spec.batch_size() % passes != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad_accumulation=", passes,
        " must be positive and divide batch_size=", spec.batch_size()));
  }
  return absl::OkStatus();
}

// Gradient accumulation and clipping in a pipeline need every stage to step
// the same minibatch's gradients at one version.
absl::Status CheckStepFeatures(const JobSpec& spec, const PipelinePolicy& p) {
  if (p.workers <= 1 || SplitsMinibatches(p.schedule)) {
    return absl::OkStatus();
  }
  const std::string schedule(ScheduleName(p.schedule));
  if (spec.grad_accumulation() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad_accumulation=", spec.grad_accumulation(),
        " needs a schedule that splits minibatches (1f1b_flush, gpipe, "
        "interleaved_1f1b, the zb_* ones, 2bw or auto), not ",
        schedule));
  }
  if (spec.optimizer().clip_grad_norm() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.clip_grad_norm needs a schedule on which every stage steps "
        "the same minibatch (1f1b_flush, gpipe, interleaved_1f1b, the zb_* "
        "ones, 2bw or auto), not ",
        schedule));
  }
  return absl::OkStatus();
}

absl::Status ValidateParameterServer(const v1::DataParallelSpec& d,
                                     const JobSpec& spec) {
  const std::string& c = d.consistency();
  if (!c.empty() && c != "sync" && c != "bounded" && c != "async") {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_parallel.consistency=\"", c,
        "\" must be \"sync\", \"bounded\" or \"async\" (\"\": sync)"));
  }
  // A shard keeps up to (S + 1) x replicas gradients of its range.
  if (d.staleness() < 0 || d.staleness() > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_parallel.staleness=", d.staleness(),
                     " must be between 0 and 32"));
  }
  if (d.staleness() > 0 && c != "bounded") {
    return absl::InvalidArgumentError(
        absl::StrCat("data_parallel.staleness=", d.staleness(),
                     " applies to consistency \"bounded\" only"));
  }
  // A host runs a service thread per hosted shard and remote replica.
  if (d.shards() < 0 || d.shards() > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_parallel.shards=", d.shards(), " must be between 0 and 256"));
  }
  if (spec.optimizer().clip_grad_norm() > 0) {
    return absl::InvalidArgumentError(
        "optimizer.clip_grad_norm needs the norm of the summed gradient, "
        "which no replica holds under data_parallel.mode "
        "\"parameter_server\": clip with \"allreduce\"");
  }
  if (d.shard_optimizer()) {
    return absl::InvalidArgumentError(
        "data_parallel.shard_optimizer is for mode \"allreduce\": the "
        "parameter server's shards hold the optimizer state already");
  }
  return absl::OkStatus();
}

// JobSpec.data_parallel: the fields of its mode, and a flushing schedule
// for all but the default all-reduce.
absl::Status ValidateDataParallel(const JobSpec& spec,
                                  const PipelinePolicy& p) {
  const v1::DataParallelSpec& d = spec.data_parallel();
  const bool ps = d.mode() == "parameter_server";
  if (!d.mode().empty() && d.mode() != "allreduce" && !ps) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_parallel.mode=\"", d.mode(),
                     "\" must be \"allreduce\" or \"parameter_server\""));
  }
  if (d.bucket_mb() < 0 || d.bucket_mb() > 4096 || std::isnan(d.bucket_mb())) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_parallel.bucket_mb=", d.bucket_mb(),
                     " must be between 0 and 4096 (0: the default)"));
  }
  if (!d.reduce().empty() && d.reduce() != "overlap" && d.reduce() != "after") {
    return absl::InvalidArgumentError(
        absl::StrCat("data_parallel.reduce=\"", d.reduce(),
                     "\" must be \"overlap\" or \"after\""));
  }
  if (ps) RETURN_IF_ERROR(ValidateParameterServer(d, spec));
  if ((ps || d.shard_optimizer()) && p.workers > 1 && !Flushes(p.schedule)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ps ? "data_parallel.mode \"parameter_server\""
           : "data_parallel.shard_optimizer",
        " needs a schedule that flushes (1f1b_flush, gpipe, interleaved_1f1b, "
        "the zb_* ones or auto), not ",
        ScheduleName(p.schedule)));
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpoint(const v1::CheckpointSpec& c) {
  if (c.every_steps() < 0 || c.keep_last() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.every_steps=", c.every_steps(),
        " and checkpoint.keep_last=", c.keep_last(), " must not be negative"));
  }
  RETURN_IF_ERROR(
      CheckAtMost("checkpoint.every_steps", c.every_steps(), kMaxSteps));
  RETURN_IF_ERROR(
      CheckAtMost("checkpoint.keep_last", c.keep_last(), kMaxCheckpointsKept));
  if (c.every_steps() > 0 && c.dir().empty()) {
    return absl::InvalidArgumentError(
        "checkpoint.every_steps is set but checkpoint.dir is not: say where "
        "the checkpoints go");
  }
  if (!(c.every_seconds() >= 0) || c.every_seconds() > 1e7) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint.every_seconds=", c.every_seconds(),
                     " must be in [0, 1e7]"));
  }
  if (c.every_seconds() > 0 && c.dir().empty()) {
    return absl::InvalidArgumentError(
        "checkpoint.every_seconds is set but checkpoint.dir is not: say "
        "where the checkpoints go");
  }
  if (!c.dir().empty() && c.every_steps() == 0 && c.every_seconds() == 0) {
    return absl::InvalidArgumentError(
        "checkpoint.dir is set but neither checkpoint.every_steps nor "
        "checkpoint.every_seconds is: say how often to checkpoint");
  }
  if (!c.dir().empty() && c.dir()[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.dir='", c.dir(),
        "' must be an absolute path (workers run in directories of their "
        "own)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateFaultTolerance(const v1::FaultToleranceSpec& f) {
  constexpr int kMaxRestarts = 1000;
  if (f.has_max_restarts() &&
      (f.max_restarts() < 0 || f.max_restarts() > kMaxRestarts)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault_tolerance.max_restarts=", f.max_restarts(),
                     " must be in [0, ", kMaxRestarts, "]"));
  }
  const std::string& p = f.on_nonfinite();
  if (!p.empty() && p != "fail" && p != "rollback") {
    return absl::InvalidArgumentError(
        absl::StrCat("fault_tolerance.on_nonfinite='", p,
                     "' is not one of: fail, rollback"));
  }
  return absl::OkStatus();
}

// Text: the logits are [context, vocabulary] per sample; bytes need 256.
absl::Status CheckTextLogits(const SymbolicShape& out, int last,
                             const TextData& text, const ModelSpec& model) {
  if (out.rank_known &&
      (out.dims.size() != 2 || out.dims[0] != text.context())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", last, "] outputs ", out.ToString(),
        " per sample; a language model needs logits [", text.context(),
        ", vocabulary] (data.text.context=", text.context(), ")"));
  }
  int64_t vocab = 0;
  std::string what;
  if (text.tokenizer() == "bytes") {
    vocab = 256;
    what = "data.text.tokenizer='bytes'";
  } else if (!text.token_dtype().empty()) {
    vocab = text.vocab_size();
    what = absl::StrCat("data.text.vocab_size=", vocab);
  } else {
    return absl::OkStatus();  // Known once the text is read.
  }
  RETURN_IF_ERROR(CheckEmbeddingVocabulary(
      model, vocab, absl::StrCat(what, "'s ", vocab, " tokens")));
  if (out.LastDim() != kUnknownDim && out.LastDim() < vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.layers[", last, "] outputs ", out.LastDim(),
                     " logits but ", what, " has ", vocab, " tokens"));
  }
  return absl::OkStatus();
}

// The model's logits must be a vector with a logit per class.
absl::Status CheckLogits(const SpecSummary& summary, const DataSpec& data,
                         const ModelSpec& model) {
  const SymbolicShape& out = summary.layer_outputs.back();
  const int last = static_cast<int>(summary.layer_outputs.size()) - 1;
  if (data.has_text()) {
    return CheckTextLogits(out, last, data.text(), model);
  }
  if (out.rank_known && out.dims.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", last, "] outputs ", out.ToString(),
        " per sample; the loss needs logits [classes] (add a flatten and a "
        "linear layer)"));
  }
  const int64_t classes =
      data.has_synthetic() ? data.synthetic().num_classes() : 0;
  if (out.LastDim() != kUnknownDim && out.LastDim() < classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.layers[", last, "] outputs ", out.LastDim(),
                     " logits but the data has ", classes, " classes"));
  }
  return absl::OkStatus();
}

// Tied weights on two pipeline stages need a schedule that flushes: under
// 1f1b_stashed or 1f1b_vertical_sync the first and the last stage would
// apply their steps to the shared weight at different versions.
absl::Status CheckTiesAndSchedule(const ModelSpec& model,
                                  const PipelinePolicy& pipeline) {
  const bool flushes = SplitsMinibatches(pipeline.schedule);
  if (flushes || pipeline.workers <= 1) return absl::OkStatus();
  for (int l = 0; l < model.layers_size(); ++l) {
    if (!model.layers(l).has_tie_weight_to()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", l, "].tie_weight_to=", model.layers(l).tie_weight_to(),
        " needs pipeline.schedule 1f1b_flush or gpipe with more than one "
        "worker: under ",
        ScheduleName(pipeline.schedule),
        " the stages holding the two copies would update the shared weight "
        "at different weight versions, so the copies would diverge (untie "
        "the layers to use it)"));
  }
  return absl::OkStatus();
}

// Tensor groups: the degree divides the workers and every transformer
// layer's heads and MLP width.
absl::Status CheckTensorGroups(const ModelSpec& model,
                               const PipelinePolicy& pipeline) {
  const int t = std::max(1, pipeline.tensor_parallel);
  if (t == 1) return absl::OkStatus();
  if (pipeline.workers % t != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.tensor_parallel=", t,
                     " does not divide "
                     "pipeline.workers=",
                     pipeline.workers));
  }
  for (int l = 0; l < model.layers_size(); ++l) {
    const LayerSpec& layer = model.layers(l);
    int64_t heads = 0, hidden = 0;
    if (layer.has_transformer_block()) {
      const auto& b = layer.transformer_block();
      heads = b.heads();
      hidden = b.has_mlp_hidden() ? b.mlp_hidden() : 4 * b.dim();
    } else if (layer.has_causal_self_attention()) {
      heads = layer.causal_self_attention().heads();
    } else if (layer.has_llama_block()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.tensor_parallel=", t, ": model.layers[", l,
          "] is a llama_block, which is not tensor-parallel yet (tensor "
          "groups split transformer_block and causal_self_attention layers)"));
    } else {
      continue;
    }
    if (heads % t != 0 || hidden % t != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.tensor_parallel=", t, " does not divide model.layers[", l,
          "]'s ", heads, " heads",
          hidden > 0 ? absl::StrCat(" and ", hidden, " MLP units") : ""));
    }
    if (pipeline.sequence_parallel && layer.has_transformer_block() &&
        pipeline.positions % t != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline.sequence_parallel splits each sample's ",
                       pipeline.positions,
                       " positions (data.text.context) across "
                       "pipeline.tensor_parallel=",
                       t, ", which must divide them"));
    }
  }
  return absl::OkStatus();
}

// The pipeline fields ResolvePipeline leaves unbounded above.
absl::Status CheckPipelineLimits(const v1::PipelineSpec& p) {
  RETURN_IF_ERROR(
      CheckAtMost("pipeline.microbatches", p.microbatches(), kMaxMicrobatches));
  RETURN_IF_ERROR(CheckAtMost("pipeline.wait_for_workers_ms",
                              p.wait_for_workers_ms(), kMaxWaitForWorkersMs));
  if (p.bandwidth_bytes_per_s() > kMaxBandwidthBytesPerS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.bandwidth_bytes_per_s=", p.bandwidth_bytes_per_s(),
        " must be at most ", kMaxBandwidthBytesPerS, " (1 PB/s)"));
  }
  return absl::OkStatus();
}

// pipeline.stages: each stage at least one layer, the model's layers in
// all, and as many stages as the workers hold when the spec fixes both
// the workers and the tensor degree.
absl::Status CheckPinnedStages(const JobSpec& spec,
                               const PipelinePolicy& policy) {
  const auto& stages = spec.pipeline().stages();
  if (stages.empty()) return absl::OkStatus();
  int64_t layers = 0;
  for (int s = 0; s < stages.size(); ++s) {
    if (stages[s] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline.stages[", s, "]=", stages[s],
                       " must be at least 1 (the layers of that stage)"));
    }
    layers += stages[s];
  }
  if (layers != spec.model().layers_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.stages holds ", layers, " layers in all, but the model has ",
        spec.model().layers_size()));
  }
  const int workers = spec.pipeline().workers();
  const int t = policy.tensor_parallel;
  const int chunks = std::max(1, policy.chunks);
  if (workers > 0 && t > 0 && workers % t == 0 &&
      stages.size() != workers / t * chunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.stages pins ", stages.size(),
        " stages, but pipeline.workers=", workers,
        t > 1 ? absl::StrCat(" in tensor groups of ", t) : "",
        chunks > 1 ? absl::StrCat(" with ", chunks, " chunks each") : "",
        " hold ", workers / t * chunks));
  }
  return absl::OkStatus();
}

// "model.layers[3].transformer_block": the layer and its kind's field.
std::string LayerField(const ModelSpec& model, int l) {
  const auto* field =
      LayerSpec::descriptor()->FindFieldByNumber(model.layers(l).kind_case());
  return absl::StrCat("model.layers[", l, "]",
                      field != nullptr ? "." + field->name() : "");
}

// "1000 parameters with their gradients and optimizer state (12.0 kB) and
// the activations of a microbatch of 8 samples (1.0 MB)".
std::string Parts(const StageFootprint& f, int64_t samples) {
  return absl::StrCat(f.parameters,
                      " parameters with their gradients and optimizer state (",
                      FormatBytes(f.parameter_bytes),
                      ") and the activations of a microbatch of ", samples,
                      " samples (", FormatBytes(f.activation_bytes), ")");
}

// Samples per microbatch, at the least: a splitting schedule's microbatches
// (the spec's, or one per worker), else the whole minibatch.
int64_t MicrobatchSamples(const JobSpec& spec, const PipelinePolicy& p) {
  auto micro = MicrobatchesFor(p, spec.batch_size(), p.workers);
  return micro.ok() ? spec.batch_size() / *micro : 1;
}

// The tensor degrees a plan may use: the spec's, else each that divides
// the workers and every transformer layer, largest first.
}  // namespace

bool SplitsVocabulary(const ModelSpec& model, int degree) {
  if (degree <= 1 || model.layers().empty()) return false;
  const LayerSpec& first = model.layers(0);
  const LayerSpec& last = model.layers(model.layers_size() - 1);
  return first.has_token_embedding() && last.has_linear() &&
         last.linear().out_features() == first.token_embedding().vocab_size() &&
         first.token_embedding().vocab_size() % degree == 0;
}

bool HasTransformerLayers(const ModelSpec& model) {
  for (const LayerSpec& l : model.layers()) {
    if (l.has_transformer_block() || l.has_causal_self_attention() ||
        l.has_llama_block()) {
      return true;
    }
  }
  return false;
}

std::vector<int> TensorDegreesFor(const ModelSpec& model,
                                  const PipelinePolicy& p) {
  if (p.tensor_parallel > 0) return {p.tensor_parallel};
  std::vector<int> degrees;
  for (int t = std::min(p.workers, kMaxTensorParallel); t > 1; --t) {
    PipelinePolicy fixed = p;
    fixed.tensor_parallel = t;
    if (CheckTensorGroups(model, fixed).ok()) degrees.push_back(t);
  }
  degrees.push_back(1);
  return degrees;
}

namespace {

// " even as one of 4 members of a tensor group with full recomputation",
// when the check counted that.
std::string BestCase(int degree, Recompute mode) {
  std::string out;
  if (degree > 1) {
    absl::StrAppend(&out, " even as one of ", degree,
                    " members of a tensor group");
  }
  if (mode != Recompute::kNone) {
    absl::StrAppend(&out, degree > 1 ? " with " : " even with ",
                    RecomputeName(mode), " recomputation");
  }
  return out;
}

// Whether the layers fit `limit` as members of tensor groups of `degree`
// (recomputing as `mode`) on pipeline.workers workers; the reason if not.
absl::Status LayersFitAt(const JobSpec& spec, const SpecSummary& summary,
                         const MemoryLimit& limit, int degree, Recompute mode) {
  const std::vector<LayerFootprint> layers =
      EstimateModel(spec.model(), summary.input, summary.layer_outputs, degree,
                    mode, summary.pipeline.sequence_parallel);
  const int copies = TrainingCopies(spec.optimizer());
  const int64_t samples = MicrobatchSamples(spec, summary.pipeline);
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    const StageFootprint f = EstimateStage(layers, l, l + 1, copies, samples);
    if (f.total_bytes <= limit.bytes) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(LayerField(spec.model(), l), " needs at least ",
                     FormatBytes(f.total_bytes), BestCase(degree, mode), ": ",
                     Parts(f, samples), ", more than ", Describe(limit)));
  }
  const int workers = summary.pipeline.workers;
  const int64_t stages = MinimumStages(layers, copies, samples, limit.bytes);
  const int64_t needed = SaturatingMul(stages, degree);
  if (needed <= workers) return absl::OkStatus();
  const StageFootprint all = EstimateStage(
      layers, 0, static_cast<int>(layers.size()), copies, samples);
  return absl::InvalidArgumentError(
      absl::StrCat("the model needs at least ", FormatBytes(all.total_bytes),
                   BestCase(degree, mode), ": ", Parts(all, samples),
                   "; that takes at least ", needed, " workers of ",
                   Describe(limit), ", and pipeline.workers=", workers));
}

// Every layer must fit one worker, and the model pipeline.workers of them,
// in the best configuration the planner may choose: some tensor degree
// (the spec's, or any that fits), with full recomputation unless the spec
// fixes the mode. The error is the largest degree's.
absl::Status CheckLayersFit(const JobSpec& spec, const SpecSummary& summary,
                            const MemoryLimit& limit) {
  const PipelinePolicy& p = summary.pipeline;
  const Recompute mode =
      p.recompute_fixed || !HasTransformerLayers(spec.model())
          ? p.recompute
          : Recompute::kFull;
  const std::vector<int> degrees = TensorDegreesFor(spec.model(), p);
  absl::Status first;
  for (int degree : degrees) {
    absl::Status fits = LayersFitAt(spec, summary, limit, degree, mode);
    if (fits.ok()) return fits;
    if (first.ok()) first = fits;
  }
  return first;
}

// Synthetic data is generated whole on each worker that loads it.
absl::Status CheckDataFits(const DataSpec& data, const MemoryLimit& limit) {
  if (!data.has_synthetic()) return absl::OkStatus();
  const SyntheticData& s = data.synthetic();
  int64_t train = s.train_samples();
  int64_t test = s.test_samples();
  if (data.train_limit() > 0) train = std::min(train, data.train_limit());
  if (data.test_limit() > 0) test = std::min(test, data.test_limit());
  const int64_t bytes = SyntheticDataBytes(s, train, test);
  if (bytes <= limit.bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "data.synthetic: ", train, " training and ", test, " test samples of ",
      SymbolicShape::Known(std::vector<int64_t>(s.sample_shape().begin(),
                                                s.sample_shape().end()))
          .ToString(),
      " floats and a teacher for num_classes=", s.num_classes(), " need ",
      FormatBytes(bytes), " on each worker that loads them, more than ",
      Describe(limit)));
}

// A worker keeps a record of every step (PerStepBytes), when the spec says
// how many steps there are.
absl::Status CheckStepsFit(const JobSpec& spec, const SpecSummary& summary,
                           const MemoryLimit& limit) {
  int64_t total = 0;
  if (summary.train_samples >= 0) {
    ASSIGN_OR_RETURN(total, TotalSteps(spec, summary.train_samples));
  } else if (spec.epochs() == 0) {
    total = spec.max_steps();
  }
  const PipelinePolicy& p = summary.pipeline;
  const bool pipeline = p.workers > 1;
  auto micro = MicrobatchesFor(p, spec.batch_size(), p.workers);
  const int64_t per_step = PerStepBytes(pipeline, micro.ok() ? *micro : 1);
  const int64_t bytes = SaturatingMul(total, per_step);
  if (bytes <= limit.bytes) return absl::OkStatus();
  const bool capped = spec.max_steps() > 0 && total == spec.max_steps();
  return absl::InvalidArgumentError(absl::StrCat(
      capped ? absl::StrCat("max_steps=", spec.max_steps())
             : absl::StrCat("epochs=", spec.epochs()),
      ": ", total, " steps at ", per_step, " bytes each (",
      pipeline ? "the operations of each stage's schedule"
               : "the loss of every step",
      ") need ", FormatBytes(bytes), ", more than ", Describe(limit)));
}

absl::Status CheckMemory(const JobSpec& spec, const SpecSummary& summary,
                         const MemoryLimit& memory) {
  const MemoryLimit limit = KnownOrDefault(memory);
  RETURN_IF_ERROR(CheckLayersFit(spec, summary, limit));
  RETURN_IF_ERROR(CheckDataFits(spec.data(), limit));
  return CheckStepsFit(spec, summary, limit);
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& text,
                                     const std::string& source) {
  JobSpec spec;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    const auto status =
        google::protobuf::util::JsonStringToMessage(text, &spec);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source,
          ": not a valid JSON JobSpec: ", status.message().as_string()));
    }
    return spec;
  }
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &spec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a valid text-format JobSpec: ", errors.Joined()));
  }
  return spec;
}

// pipeline.schedule_file, relative to the spec's directory, read into
// pipeline.schedule_program.
absl::Status InlineScheduleFile(const std::string& spec_path, JobSpec* spec) {
  v1::PipelineSpec* p = spec->mutable_pipeline();
  if (p->schedule_file().empty()) return absl::OkStatus();
  std::string file = p->schedule_file();
  const size_t slash = spec_path.rfind('/');
  if (file[0] != '/' && slash != std::string::npos) {
    file = spec_path.substr(0, slash + 1) + file;
  }
  std::ifstream in(file);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("pipeline.schedule_file='", p->schedule_file(),
                     "': cannot open ", file, ": ", std::strerror(errno)));
  }
  std::string text(kMaxScheduleProgramBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxScheduleProgramBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.schedule_file='", p->schedule_file(),
                     "' is larger than ", kMaxScheduleProgramBytes, " bytes"));
  }
  p->clear_schedule_file();
  p->set_schedule_program(std::move(text));
  return absl::OkStatus();
}

absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(buffer.str(), path));
  RETURN_IF_ERROR(InlineScheduleFile(path, &spec));
  return spec;
}

absl::Status ValidateOptimizerSpec(const OptimizerSpec& spec) {
  RETURN_IF_ERROR(ValidateLrSchedule(spec.schedule()));
  RETURN_IF_ERROR(ValidateParamGroups(spec));
  switch (spec.kind_case()) {
    case OptimizerSpec::kSgd:
      return ValidateSgd(spec.sgd());
    case OptimizerSpec::kAdam:
      return ValidateAdam(spec.adam(), "adam");
    case OptimizerSpec::kAdamw:
      return ValidateAdam(spec.adamw(), "adamw");
    case OptimizerSpec::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "optimizer is not set (set optimizer.sgd, optimizer.adam or "
      "optimizer.adamw)");
}

absl::Status ValidateDataSpec(const DataSpec& spec) {
  if (spec.has_text()) RETURN_IF_ERROR(RefuseImageFieldsForText(spec));
  if (spec.has_std() && !(spec.std() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.std=", spec.std(), " must be positive"));
  }
  // Inputs are scaled to [0, 1] first: a mean or deviation past these is a
  // mistake, and a NaN or an infinity would make every input one.
  RETURN_IF_ERROR(CheckFiniteInRange("data.mean", spec.mean(), -1e6, 1e6));
  if (spec.has_std()) {
    RETURN_IF_ERROR(CheckFiniteInRange("data.std", spec.std(), 1e-12, 1e6));
  }
  if (spec.train_limit() < 0 || spec.test_limit() < 0) {
    return absl::InvalidArgumentError(
        "data.train_limit and data.test_limit must not be negative");
  }
  RETURN_IF_ERROR(
      CheckAtMost("data.train_limit", spec.train_limit(), kMaxSamples));
  RETURN_IF_ERROR(
      CheckAtMost("data.test_limit", spec.test_limit(), kMaxSamples));
  switch (spec.source_case()) {
    case DataSpec::kText:
      return ValidateText(spec.text());
    case DataSpec::kSynthetic:
      return ValidateSynthetic(spec.synthetic());
    case DataSpec::kIdx:
      return ValidateIdx(spec.idx());
    case DataSpec::kFashionMnistDir:
      if (!spec.fashion_mnist_dir().empty()) return absl::OkStatus();
      return absl::InvalidArgumentError("data.fashion_mnist_dir is empty");
    case DataSpec::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "data has no source (set data.text, data.fashion_mnist_dir, data.idx "
      "or data.synthetic)");
}

absl::Status CheckEmbeddingVocabulary(const ModelSpec& model, int64_t vocab,
                                      const std::string& what) {
  for (int l = 0; l < model.layers_size(); ++l) {
    if (!model.layers(l).has_token_embedding()) continue;
    const int64_t size = model.layers(l).token_embedding().vocab_size();
    if (size < vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers[", l, "].token_embedding.vocab_size=", size,
          " is smaller than ", what));
    }
  }
  return absl::OkStatus();
}

bool HasTestSplit(const DataSpec& d) {
  if (d.has_text()) {
    return !d.text().has_val_fraction() || d.text().val_fraction() > 0;
  }
  return d.has_fashion_mnist_dir() ||
         (d.has_text() &&
          (!d.text().has_val_fraction() || d.text().val_fraction() > 0)) ||
         (d.has_idx() && !d.idx().test_images().empty()) ||
         (d.has_synthetic() && d.synthetic().test_samples() > 0);
}

// Every check of CheckJobSpec, the errors as they are.
absl::StatusOr<SpecSummary> CheckJobSpecFields(const JobSpec& spec,
                                               const MemoryLimit& memory);

absl::Status WithLayerNames(const ModelSpec& model, const absl::Status& s) {
  if (s.ok()) return s;
  const std::string kRef = "model.layers[";
  const std::string in(s.message());
  std::string out;
  size_t at = 0;
  while (true) {
    const size_t ref = in.find(kRef, at);
    if (ref == std::string::npos) break;
    const size_t digits = ref + kRef.size();
    const size_t close = in.find(']', digits);
    int l = -1;
    if (close == std::string::npos ||
        !absl::SimpleAtoi(in.substr(digits, close - digits), &l)) {
      break;
    }
    out += in.substr(at, close + 1 - at);
    at = close + 1;
    const bool named =
        l >= 0 && l < model.layers_size() && !model.layers(l).name().empty();
    if (named && in.compare(at, 2, " (") != 0) {
      absl::StrAppend(&out, " ('", model.layers(l).name(), "')");
    }
  }
  out += in.substr(at);
  return absl::Status(s.code(), out);
}

absl::StatusOr<SpecSummary> CheckJobSpec(const JobSpec& spec,
                                         const MemoryLimit& memory) {
  absl::StatusOr<SpecSummary> summary = CheckJobSpecFields(spec, memory);
  if (summary.ok()) return summary;
  return WithLayerNames(spec.model(), summary.status());
}

absl::StatusOr<SpecSummary> CheckJobSpecFields(const JobSpec& spec,
                                               const MemoryLimit& memory) {
  RETURN_IF_ERROR(ValidateLoop(spec));
  RETURN_IF_ERROR(ValidateOptimizerSpec(spec.optimizer()));
  RETURN_IF_ERROR(ValidateDataSpec(spec.data()));
  RETURN_IF_ERROR(ValidateCheckpoint(spec.checkpoint()));
  RETURN_IF_ERROR(ValidateFaultTolerance(spec.fault_tolerance()));
  const std::string& compute = spec.precision().compute();
  if (!compute.empty() && compute != "fp32" && compute != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("precision.compute=\"", compute,
                     "\" must be \"fp32\" or \"bf16\" (\"\": fp32)"));
  }
  SpecSummary summary;
  ASSIGN_OR_RETURN(summary.pipeline, ResolvePipeline(spec));
  RETURN_IF_ERROR(CheckPipelineLimits(spec.pipeline()));
  RETURN_IF_ERROR(CheckStepFeatures(spec, summary.pipeline));
  RETURN_IF_ERROR(ValidateDataParallel(spec, summary.pipeline));
  if (spec.data().has_synthetic()) {
    const SyntheticData& s = spec.data().synthetic();
    summary.input = SymbolicShape::Known(
        std::vector<int64_t>(s.sample_shape().begin(), s.sample_shape().end()));
    summary.train_samples = s.train_samples();
    if (spec.data().train_limit() > 0) {
      summary.train_samples =
          std::min(summary.train_samples, spec.data().train_limit());
    }
    RETURN_IF_ERROR(TotalSteps(spec, summary.train_samples).status());
  }
  if (spec.data().has_text()) {
    summary.input = SymbolicShape::Known({spec.data().text().context()});
  }
  ASSIGN_OR_RETURN(summary.layer_outputs,
                   InferModelShapes(spec.model(), summary.input));
  RETURN_IF_ERROR(CheckLogits(summary, spec.data(), spec.model()));
  RETURN_IF_ERROR(CheckTiesAndSchedule(spec.model(), summary.pipeline));
  RETURN_IF_ERROR(CheckTensorGroups(spec.model(), summary.pipeline));
  RETURN_IF_ERROR(CheckPinnedStages(spec, summary.pipeline));
  RETURN_IF_ERROR(CheckMemory(spec, summary, memory));
  return summary;
}

absl::Status CheckStageMemory(const JobSpec& spec, const SymbolicShape& input,
                              const StageNeeds& stage,
                              const MemoryLimit& memory,
                              absl::StatusCode code) {
  ASSIGN_OR_RETURN(const std::vector<SymbolicShape> outputs,
                   InferModelShapes(spec.model(), input));
  const MemoryLimit limit = KnownOrDefault(memory);
  const StageFootprint f = EstimateStage(
      EstimateModel(spec.model(), input, outputs, stage.tensor_degree,
                    stage.recompute, stage.sequence_parallel),
      stage.layer_begin, stage.layer_end, stage.copies, stage.samples);
  const int64_t steps = SaturatingMul(stage.steps, stage.bytes_per_step);
  const int64_t total =
      SaturatingAdd(SaturatingAdd(f.total_bytes, stage.data_bytes), steps);
  if (total <= limit.bytes) return absl::OkStatus();
  std::string message = absl::StrCat(
      stage.what, " (model.layers[", stage.layer_begin, ", ", stage.layer_end,
      ")) needs at least ", FormatBytes(total), ": ", Parts(f, stage.samples));
  if (stage.data_bytes > 0) {
    absl::StrAppend(&message, ", its data (", FormatBytes(stage.data_bytes),
                    ")");
  }
  if (steps > 0) {
    absl::StrAppend(&message, ", its record of ", stage.steps, " steps (",
                    FormatBytes(steps), ")");
  }
  if (f.heaviest_layer >= 0) {
    absl::StrAppend(&message, "; ", LayerField(spec.model(), f.heaviest_layer),
                    " alone holds ", FormatBytes(f.heaviest_bytes));
  }
  absl::StrAppend(&message, "; more than ", Describe(limit));
  return absl::Status(code, message);
}

}  // namespace aqueduct
