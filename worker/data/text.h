// Text data for language modelling (DataSpec.text, proto/job.proto's
// TextData): the tokenizers, the corpus of a spec, its split into training
// and validation tokens, and the random training windows.
//
// The corpus is the files of the spec, read whole and concatenated in order,
// tokenized as one sequence. They are opened under the roots a FileAccess
// allows (common/file_system.h: regular files only, each size checked
// before it is read, at most files.max_text_bytes in all). The first tokens are
// the training split, the rest the validation split (SplitTextTokens). In a
// Dataset (dataset.h) a text split is its tokens, not its windows: sample i is
// the window of context tokens starting at token i * stride, with the next
// token at every position as its labels.
//
// Training windows are drawn at random with replacement, as nanoGPT does:
// row r of global minibatch m starts at TextWindowStart(seed, m, r, windows),
// a pure function of its arguments, so that every stage of a pipeline, a
// resumed job and an independent (Python) reimplementation draw the same
// windows. The validation windows are the non-overlapping windows of the
// validation split, in order.
//
// Thread-safety: Tokenizer is immutable and thread-safe; the functions are
// stateless.
#ifndef AQUEDUCT_WORKER_DATA_TEXT_H_
#define AQUEDUCT_WORKER_DATA_TEXT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/file_system.h"
#include "proto/types.h"
#include "worker/data/dataset.h"
#include "worker/data/sentencepiece.h"

namespace aqueduct {

// Maps text to token ids and back.
//   bytes: vocabulary 256; the id of a byte is its value.
//   chars: the distinct Unicode code points of a text (its "alphabet"),
//          sorted by code point; the id of a character is its rank.
//   sentencepiece: the pieces of a SentencePiece model (Debian's
//          sentencepiece tools; `aq tokenize` trains one with byte
//          fallback, so that every byte of any text has ids). Token files
//          only: text files are not encoded at a job's start.
class Tokenizer {
 public:
  enum class Kind { kBytes, kChars, kSentencePiece };

  // The bytes tokenizer.
  Tokenizer() = default;
  static Tokenizer Bytes() { return Tokenizer(); }
  // A chars tokenizer over `alphabet`, which must be non-empty, strictly
  // increasing and hold only Unicode scalar values (no surrogates, at most
  // U+10FFFF); INVALID_ARGUMENT otherwise.
  static absl::StatusOr<Tokenizer> Chars(std::vector<char32_t> alphabet);
  // The chars tokenizer of `text` (its distinct characters).
  // INVALID_ARGUMENT for invalid UTF-8 or an empty text; errors start with
  // `source` (e.g. the file name).
  static absl::StatusOr<Tokenizer> CharsOf(absl::string_view text,
                                           absl::string_view source);
  // The SentencePiece model in the file `path` (spec field `field`) under
  // `roots` (worker/data/sentencepiece.h: through Debian's spm_* tools).
  // PathRoots::Resolve's and spm::Pieces::Load's errors, naming the field.
  static absl::StatusOr<Tokenizer> SentencePiece(const std::string& path,
                                                 const PathRoots& roots,
                                                 absl::string_view field);
  // The tokenizer a job with data `spec` trains with. "bytes" reads no file;
  // "chars" (the default) reads every file of the spec for its alphabet,
  // with LoadTextCorpus's errors; "sentencepiece" and token files read
  // tokenizer_model (token files without one: FAILED_PRECONDITION, there
  // is nothing to map ids to text with).
  static absl::StatusOr<Tokenizer> ForSpec(const v1::TextData& spec,
                                           const FileAccess& files);

  Kind kind() const { return kind_; }
  // 256 for bytes, the alphabet's size for chars, the pieces of a
  // SentencePiece model.
  int64_t vocab_size() const;
  // chars: the code point of each id (empty for bytes).
  const std::vector<char32_t>& alphabet() const { return alphabet_; }

  // The ids of `text`. bytes: one id per byte, never fails. chars: one id
  // per character; INVALID_ARGUMENT for invalid UTF-8 ("invalid UTF-8 at
  // byte offset 3 (byte 0xff)") or for a character outside the alphabet
  // ("character 'é' (U+00E9) at position 4 (byte offset 4) is not in the
  // vocabulary of 65 characters").
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;
  // The text of `ids`: chars gives UTF-8; bytes gives the bytes as they are
  // (not valid UTF-8 where the ids cut a multi-byte character).
  // INVALID_ARGUMENT naming the id and its position for an id outside
  // [0, vocab_size()).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

 private:
  Kind kind_ = Kind::kBytes;
  std::vector<char32_t> alphabet_;
  std::shared_ptr<const spm::Pieces> pieces_;  // sentencepiece
};

// A spec's text, tokenized: every file, in order, as one sequence.
struct TextCorpus {
  Tokenizer tokenizer;
  std::vector<int32_t> tokens;
};

// Reads and tokenizes the files of `spec` (whose fields ValidateDataSpec
// has checked) under files.data. Errors name the field
// ("data.text.files[2]") and the path: PERMISSION_DENIED outside the roots
// or unreadable; NOT_FOUND for a missing file; INVALID_ARGUMENT for one that
// is not a regular file or is empty, and naming the path and byte offset
// for invalid UTF-8 (chars); FAILED_PRECONDITION when the files hold more
// than files.max_text_bytes in all (found before reading the one that
// passes it); CANCELLED once *files.stop is true.
absl::StatusOr<TextCorpus> LoadTextCorpus(const v1::TextData& spec,
                                          const FileAccess& files);

// spec.val_fraction as the float32 it is stored as (default 0.1f), widened
// to double.
double TextValFraction(const v1::TextData& spec);

// How `total` tokens split:
//   val_tokens   = floor(total * val_fraction + 0.5)
//   train_tokens = total - val_tokens
// (Python: val = math.floor(total * f + 0.5) with f = TextValFraction, e.g.
// numpy.float32(0.1).item()).
struct TextSplitSizes {
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};
TextSplitSizes SplitTextTokens(int64_t total, double val_fraction);

// The fewest tokens a text needs with `context` and `val_fraction`: one
// training window (train_tokens >= context + 1) and, when val_fraction > 0,
// one validation window (val_tokens >= context + 1). -1 if no length below
// 2^62 is enough (a val_fraction too small to hold out a window).
int64_t MinTextTokens(int64_t context, double val_fraction);

// SplitMix64's output function (Vigna), as in java.util.SplittableRandom:
//   x += 0x9E3779B97F4A7C15
//   x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
//   x = (x ^ (x >> 27)) * 0x94D049BB133111EB
//   return x ^ (x >> 31)
// all arithmetic modulo 2^64.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The first token of row `row` of global minibatch `minibatch` (0-based) of
// a job with seed `seed`, among `windows` = train_tokens - context possible
// starts (windows > 0):
//   SplitMix64(SplitMix64(SplitMix64(seed) ^ minibatch) ^ row) % windows
// with minibatch and row as uint64. The window is tokens [start, start +
// context) and its labels tokens [start + 1, start + context]. Python:
//   M = 2**64 - 1
//   def splitmix64(x):
//       x = (x + 0x9E3779B97F4A7C15) & M
//       x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
//       x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
//       return x ^ (x >> 31)
//   start = splitmix64(splitmix64(splitmix64(seed) ^ m) ^ r) % windows
inline int64_t TextWindowStart(uint64_t seed, uint64_t minibatch, uint64_t row,
                               int64_t windows) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed) ^ minibatch) ^ row);
  return static_cast<int64_t>(h % static_cast<uint64_t>(windows));
}

// The training and validation Datasets of `tokens` (pure; LoadTextData's
// second half). Training: tokens [0, train_tokens), stride 1, size
// train_tokens - context. Validation (in DataSplits::test; none when
// val_fraction is 0): tokens [train_tokens, total), stride context, size
// (val_tokens - 1) / context, at most spec.val_windows when that is
// positive. Both have sample_shape [context], labels_per_sample context and
// num_classes `vocab_size`. INVALID_ARGUMENT when the tokens are fewer than
// MinTextTokens, naming `source` (the files), the count and what is needed.
absl::StatusOr<DataSplits> SplitText(std::vector<int32_t> tokens,
                                     int64_t vocab_size,
                                     const v1::TextData& spec,
                                     absl::string_view source);

// LoadTextCorpus, then SplitText.
absl::StatusOr<DataSplits> LoadTextData(const v1::TextData& spec,
                                        const FileAccess& files);

// What LoadTextData would load, without keeping it: sample_shape [context],
// num_classes = the vocabulary, labels_per_sample = context, and
// train_samples = floor(train_tokens / context) (an epoch visits as many
// tokens as the training split holds). Reads every file (the vocabulary of
// chars and the token count need them); errors as LoadTextData.
absl::StatusOr<DataInfo> DescribeTextData(const v1::TextData& spec,
                                          const FileAccess& files);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_DATA_TEXT_H_
