#include "worker/data/text.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace aqueduct {

namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;

bool IsSurrogate(char32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

// Decodes the UTF-8 sequence at text[*pos] into *c and advances *pos past
// it. False for an invalid sequence (a stray continuation byte, a truncated
// or overlong sequence, a surrogate or a value above U+10FFFF).
bool DecodeOne(absl::string_view text, size_t* pos, char32_t* c) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(*pos);
  if (b0 < 0x80) {
    *c = b0;
    ++*pos;
    return true;
  }
  int extra;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    extra = 1, min = 0x80, *c = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    extra = 2, min = 0x800, *c = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    extra = 3, min = 0x10000, *c = b0 & 0x07;
  } else {
    return false;
  }
  if (*pos + extra >= text.size()) return false;
  for (int k = 1; k <= extra; ++k) {
    const uint8_t b = byte(*pos + k);
    if ((b & 0xC0) != 0x80) return false;
    *c = (*c << 6) | (b & 0x3F);
  }
  if (*c < min || *c > kMaxCodePoint || IsSurrogate(*c)) return false;
  *pos += extra + 1;
  return true;
}

// Appends the code points of `text` to `out`. INVALID_ARGUMENT naming
// `source` and the byte offset of the first invalid sequence (not the byte:
// no error quotes a file).
absl::Status DecodeUtf8(absl::string_view text, absl::string_view source,
                        std::vector<int32_t>* out) {
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t c;
    if (!DecodeOne(text, &pos, &c)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: invalid UTF-8 at byte offset %d", source, pos));
    }
    out->push_back(static_cast<int32_t>(c));
  }
  return absl::OkStatus();
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// "'é' (U+00E9)", or "U+000A" for a control character.
std::string DescribeChar(char32_t c) {
  std::string code = absl::StrFormat("U+%04X", static_cast<uint32_t>(c));
  if (c < 0x20 || (c >= 0x7F && c < 0xA0)) return code;
  std::string glyph;
  AppendUtf8(c, &glyph);
  return absl::StrCat("'", glyph, "' (", code, ")");
}

// The sorted distinct values of `code_points`.
std::vector<char32_t> AlphabetOf(const std::vector<int32_t>& code_points) {
  std::vector<bool> seen(kMaxCodePoint + 1, false);
  for (int32_t c : code_points) seen[c] = true;
  std::vector<char32_t> alphabet;
  for (char32_t c = 0; c <= kMaxCodePoint; ++c) {
    if (seen[c]) alphabet.push_back(c);
  }
  return alphabet;
}

// The contents of the regular file `path` (spec field `field`) under
// files.data, when it fits in the `budget` left of files.max_text_bytes
// (which it then takes from). OpenRegularFile's errors; INVALID_ARGUMENT if
// it is empty; FAILED_PRECONDITION past the budget, before reading.
absl::StatusOr<std::string> ReadTextFile(const std::string& path,
                                         const FileAccess& files,
                                         const std::string& field,
                                         int64_t* budget) {
  ASSIGN_OR_RETURN(const OpenedFile file,
                   OpenRegularFile(path, files.data, field));
  if (file.size > *budget) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": '", path, "' holds ", file.size,
                     " bytes; the text files of "
                     "a job may hold ",
                     files.max_text_bytes, " bytes in all (--max_text_bytes)"));
  }
  if (file.size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file"));
  }
  *budget -= file.size;
  return ReadOpenedFile(file, field, files.stop);
}

std::string FilesOf(const v1::TextData& spec) {
  return absl::StrJoin(spec.files(), ", ");
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::Chars(std::vector<char32_t> alphabet) {
  if (alphabet.empty()) {
    return absl::InvalidArgumentError("a chars tokenizer needs characters");
  }
  for (size_t i = 0; i < alphabet.size(); ++i) {
    if (alphabet[i] > kMaxCodePoint || IsSurrogate(alphabet[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("alphabet[%d]=U+%04X is not a Unicode scalar value",
                          i, static_cast<uint32_t>(alphabet[i])));
    }
    if (i > 0 && alphabet[i] <= alphabet[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the alphabet is not strictly increasing at index ", i));
    }
  }
  Tokenizer t;
  t.kind_ = Kind::kChars;
  t.alphabet_ = std::move(alphabet);
  return t;
}

absl::StatusOr<Tokenizer> Tokenizer::CharsOf(absl::string_view text,
                                             absl::string_view source) {
  std::vector<int32_t> code_points;
  RETURN_IF_ERROR(DecodeUtf8(text, source, &code_points));
  if (code_points.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": empty text"));
  }
  return Chars(AlphabetOf(code_points));
}

absl::StatusOr<Tokenizer> Tokenizer::SentencePiece(const std::string& path,
                                                   const PathRoots& roots,
                                                   absl::string_view field) {
  ASSIGN_OR_RETURN(const std::string resolved, roots.Resolve(path, field));
  absl::StatusOr<std::unique_ptr<spm::Pieces>> pieces =
      spm::Pieces::Load(resolved);
  if (!pieces.ok()) return Annotate(pieces.status(), field);
  Tokenizer t;
  t.kind_ = Kind::kSentencePiece;
  t.pieces_ = std::move(*pieces);
  return t;
}

absl::StatusOr<Tokenizer> Tokenizer::ForSpec(const v1::TextData& spec,
                                             const FileAccess& files) {
  if (spec.tokenizer() == "bytes") return Bytes();
  if (spec.tokenizer() == "sentencepiece" || !spec.token_dtype().empty()) {
    if (spec.tokenizer_model().empty()) {
      return absl::FailedPreconditionError(
          "data.text.tokenizer_model is not set: the token files' ids have "
          "no tokenizer to map them to text");
    }
    return SentencePiece(spec.tokenizer_model(), files.data,
                         "data.text.tokenizer_model");
  }
  ASSIGN_OR_RETURN(TextCorpus corpus, LoadTextCorpus(spec, files));
  return std::move(corpus.tokenizer);
}

int64_t Tokenizer::vocab_size() const {
  if (kind_ == Kind::kSentencePiece) return pieces_->size();
  return kind_ == Kind::kBytes ? 256 : static_cast<int64_t>(alphabet_.size());
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(
    absl::string_view text) const {
  std::vector<int32_t> ids;
  if (kind_ == Kind::kSentencePiece) {
    return pieces_->Encode(std::string(text));
  }
  ids.reserve(text.size());
  if (kind_ == Kind::kBytes) {
    for (char c : text) ids.push_back(static_cast<uint8_t>(c));
    return ids;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t at = pos;
    char32_t c;
    if (!DecodeOne(text, &pos, &c)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("invalid UTF-8 at byte offset %d (byte 0x%02x)", at,
                          static_cast<uint8_t>(text[at])));
    }
    const auto it = std::lower_bound(alphabet_.begin(), alphabet_.end(), c);
    if (it == alphabet_.end() || *it != c) {
      return absl::InvalidArgumentError(absl::StrCat(
          "character ", DescribeChar(c), " at position ", ids.size(),
          " (byte offset ", at, ") is not in the vocabulary of ",
          alphabet_.size(), " characters"));
    }
    ids.push_back(static_cast<int32_t>(it - alphabet_.begin()));
  }
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(
    absl::Span<const int32_t> ids) const {
  if (kind_ == Kind::kSentencePiece) return pieces_->Decode(ids);
  std::string text;
  text.reserve(ids.size());
  const int64_t vocab = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at position ", i,
                       " is outside the vocabulary [0, ", vocab, ")"));
    }
    if (kind_ == Kind::kBytes) {
      text.push_back(static_cast<char>(ids[i]));
    } else {
      AppendUtf8(alphabet_[ids[i]], &text);
    }
  }
  return text;
}

absl::StatusOr<TextCorpus> LoadTextCorpus(const v1::TextData& spec,
                                          const FileAccess& files) {
  TextCorpus corpus;
  const bool bytes = spec.tokenizer() == "bytes";
  int64_t budget = files.max_text_bytes;
  for (int i = 0; i < spec.files_size(); ++i) {
    const std::string& path = spec.files(i);
    ASSIGN_OR_RETURN(
        std::string text,
        ReadTextFile(path, files, absl::StrCat("data.text.files[", i, "]"),
                     &budget));
    if (bytes) {
      corpus.tokens.reserve(corpus.tokens.size() + text.size());
      for (char c : text) corpus.tokens.push_back(static_cast<uint8_t>(c));
    } else {
      RETURN_IF_ERROR(DecodeUtf8(text, path, &corpus.tokens));
    }
  }
  if (bytes) return corpus;
  // Code points become ranks in the alphabet, in place.
  ASSIGN_OR_RETURN(corpus.tokenizer,
                   Tokenizer::Chars(AlphabetOf(corpus.tokens)));
  std::vector<int32_t> rank(kMaxCodePoint + 1, -1);
  const std::vector<char32_t>& alphabet = corpus.tokenizer.alphabet();
  for (size_t i = 0; i < alphabet.size(); ++i) {
    rank[alphabet[i]] = static_cast<int32_t>(i);
  }
  for (int32_t& t : corpus.tokens) t = rank[t];
  return corpus;
}

double TextValFraction(const v1::TextData& spec) {
  return static_cast<double>(spec.has_val_fraction() ? spec.val_fraction()
                                                     : 0.1f);
}

TextSplitSizes SplitTextTokens(int64_t total, double val_fraction) {
  TextSplitSizes sizes;
  sizes.val_tokens = static_cast<int64_t>(
      std::floor(static_cast<double>(total) * val_fraction + 0.5));
  sizes.val_tokens = std::clamp<int64_t>(sizes.val_tokens, 0, total);
  sizes.train_tokens = total - sizes.val_tokens;
  return sizes;
}

int64_t MinTextTokens(int64_t context, double val_fraction) {
  const auto enough = [&](int64_t total) {
    const TextSplitSizes s = SplitTextTokens(total, val_fraction);
    return s.train_tokens >= context + 1 &&
           (val_fraction <= 0 || s.val_tokens >= context + 1);
  };
  int64_t hi = int64_t{1} << 62;
  if (!enough(hi)) return -1;
  // Both splits grow with the total, so `enough` is monotonic.
  int64_t lo = 0;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (enough(mid) ? hi : lo) = mid;
  }
  return hi;
}

absl::StatusOr<DataSplits> SplitText(std::vector<int32_t> tokens,
                                     int64_t vocab_size,
                                     const v1::TextData& spec,
                                     absl::string_view source) {
  const int64_t context = spec.context();
  const double f = TextValFraction(spec);
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t needed = MinTextTokens(context, f);
  if (needed < 0 || total < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.text: the text of ", source, " has ", total, " tokens; context=",
        context, " with val_fraction=", static_cast<float>(f), " needs ",
        needed < 0 ? "more than 2^62" : absl::StrCat("at least ", needed), " (",
        context + 1, " for a training window",
        f > 0 ? absl::StrCat(" and ", context + 1, " for a validation window")
              : "",
        ")"));
  }
  const TextSplitSizes sizes = SplitTextTokens(total, f);
  Dataset base;
  base.sample_shape = Shape({context});
  base.num_classes = static_cast<int>(vocab_size);
  base.labels_per_sample = context;
  base.context = context;
  DataSplits splits;
  if (sizes.val_tokens > 0) {
    Dataset val = base;
    val.tokens.assign(tokens.begin() + sizes.train_tokens, tokens.end());
    val.stride = context;
    val.size = (sizes.val_tokens - 1) / context;
    if (spec.val_windows() > 0)
      val.size = std::min(val.size, spec.val_windows());
    splits.test = std::move(val);
  }
  tokens.resize(sizes.train_tokens);
  splits.train = std::move(base);
  splits.train.tokens = std::move(tokens);
  splits.train.stride = 1;
  splits.train.size = sizes.train_tokens - context;
  return splits;
}

namespace {

// A text Dataset of `view` with windows `stride` apart (the training
// split's 1, the validation split's context).
Dataset WindowsOf(const TokenView& view, int64_t vocab,
                  const v1::TextData& spec, bool validation) {
  const int64_t context = spec.context();
  Dataset d;
  d.sample_shape = Shape({context});
  d.num_classes = static_cast<int>(vocab);
  d.labels_per_sample = context;
  d.context = context;
  d.mapped = view;
  d.stride = validation ? context : 1;
  d.size = validation ? (view.count - 1) / context : view.count - context;
  if (validation && spec.val_windows() > 0) {
    d.size = std::min(d.size, spec.val_windows());
  }
  return d;
}

// INVALID_ARGUMENT unless `view` (of `what`) holds a window and its next
// token.
absl::Status CheckWindow(const TokenView& view, const v1::TextData& spec,
                         absl::string_view what) {
  if (view.count >= spec.context() + 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "data.text: ", what, " holds ", view.count, " tokens; context=",
      spec.context(), " needs at least ", spec.context() + 1));
}

// Token files: files[0] mapped, and val_file, or its last val_fraction.
absl::StatusOr<DataSplits> LoadTokenFiles(const v1::TextData& spec,
                                          const FileAccess& files) {
  const int width = TokenWidth(spec.token_dtype());
  const int64_t vocab = spec.vocab_size();
  ASSIGN_OR_RETURN(TokenView all, MapTokenFile(spec.files(0), width, vocab,
                                               files, "data.text.files[0]"));
  TokenView train = all, val;
  if (!spec.val_file().empty()) {
    ASSIGN_OR_RETURN(val, MapTokenFile(spec.val_file(), width, vocab, files,
                                       "data.text.val_file"));
    RETURN_IF_ERROR(CheckWindow(val, spec, spec.val_file()));
  } else {
    const TextSplitSizes sizes =
        SplitTextTokens(all.count, TextValFraction(spec));
    train = all.Sub(0, sizes.train_tokens);
    val = all.Sub(sizes.train_tokens, sizes.val_tokens);
    if (!val.empty()) {
      RETURN_IF_ERROR(CheckWindow(val, spec, "its validation split"));
    }
  }
  RETURN_IF_ERROR(CheckWindow(train, spec, spec.files(0)));
  DataSplits splits;
  splits.train = WindowsOf(train, vocab, spec, false);
  if (!val.empty()) splits.test = WindowsOf(val, vocab, spec, true);
  return splits;
}

}  // namespace

absl::StatusOr<DataSplits> LoadTextData(const v1::TextData& spec,
                                        const FileAccess& files) {
  if (!spec.token_dtype().empty()) return LoadTokenFiles(spec, files);
  ASSIGN_OR_RETURN(TextCorpus corpus, LoadTextCorpus(spec, files));
  return SplitText(std::move(corpus.tokens), corpus.tokenizer.vocab_size(),
                   spec, FilesOf(spec));
}

absl::StatusOr<DataInfo> DescribeTextData(const v1::TextData& spec,
                                          const FileAccess& files) {
  ASSIGN_OR_RETURN(DataSplits splits, LoadTextData(spec, files));
  const Dataset& train = splits.train;
  DataInfo info;
  info.sample_shape = train.sample_shape;
  info.num_classes = train.num_classes;
  info.labels_per_sample = train.labels_per_sample;
  info.train_samples = train.num_tokens() / train.context;
  return info;
}

}  // namespace aqueduct
