// aq tokenize: a corpus tokenized once into token files (nanoGPT's
// train.bin and val.bin), with a SentencePiece model trained on it (or one
// given), so that jobs map the ids instead of reading and tokenizing the
// text on every start (TextData.token_dtype, worker/data/tokens.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/commands.h"
#include "common/status.h"
#include "worker/data/sentencepiece.h"
#include "worker/data/text.h"
#include "worker/data/tokens.h"

ABSL_FLAG(std::string, out_dir, "",
          "where to write train.bin, val.bin and tokenizer.model");
ABSL_FLAG(std::string, model, "",
          "an existing SentencePiece .model (default: train one on the text)");
ABSL_FLAG(int32_t, vocab_size, 4096, "pieces of the model trained");
ABSL_FLAG(std::string, model_type, "bpe", "bpe or unigram");
ABSL_FLAG(double, val_fraction, 0.1, "the last fraction held out as val.bin");

namespace aqueduct {
namespace {

constexpr char kTokenizeDescription[] =
    "Tokenizes the UTF-8 text FILEs (concatenated in order, as a job's\n"
    "data.text.files) once into token files in --out_dir: train.bin and\n"
    "val.bin (the last --val_fraction of the tokens), raw little-endian\n"
    "uint16 ids (uint32 past 65,536 pieces), nanoGPT's form. The tokenizer\n"
    "is a SentencePiece model (Debian's spm_train) trained on the\n"
    "text (--vocab_size pieces, --model_type bpe or unigram; byte fallback,\n"
    "so any text encodes; no normalisation, so decoding gives the text\n"
    "back) and written as tokenizer.model, or the --model given. Prints\n"
    "the data.text block a job spec uses them with (--output json: the\n"
    "counts and paths).\n";

CommandLineSpec TokenizeSpec() {
  return SubcommandSpec("tokenize", "FILE... --out_dir DIR [flags]",
                        kTokenizeDescription,
                        {{"out_dir", "DIR", ""},
                         {"model", "FILE", ""},
                         {"vocab_size", "N", ""},
                         {"model_type", "TYPE", ""},
                         {"val_fraction", "F", ""},
                         {"threads", "T", ""},
                         OutputFlag()});
}

// The tokenizer: --model, or one trained into `dir`/tokenizer.model.
absl::StatusOr<std::unique_ptr<spm::Pieces>> TokenizerFor(
    const std::vector<std::string>& files, const std::string& dir,
    std::string* model_path) {
  const std::string given = absl::GetFlag(FLAGS_model);
  if (!given.empty()) {
    *model_path = std::filesystem::absolute(given).string();
    return spm::Pieces::Load(*model_path);
  }
  const std::string type = absl::GetFlag(FLAGS_model_type);
  if (type != "bpe" && type != "unigram") {
    return absl::InvalidArgumentError(
        absl::StrCat("--model_type=", type, " is not bpe or unigram"));
  }
  const int64_t vocab = absl::GetFlag(FLAGS_vocab_size);
  if (vocab < 260 || vocab > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab_size=", vocab,
        " must be in [260, 16777216] (the 256 byte pieces and a few more)"));
  }
  const int threads = absl::GetFlag(FLAGS_threads) > 0
                          ? absl::GetFlag(FLAGS_threads)
                          : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const std::string prefix = absl::StrCat(dir, "/tokenizer");
  RETURN_IF_ERROR(spm::Train(files, prefix, vocab, type, threads));
  std::remove(absl::StrCat(prefix, ".vocab").c_str());
  *model_path = absl::StrCat(prefix, ".model");
  return spm::Pieces::Load(*model_path);
}

struct Tokenized {
  std::string model;
  int64_t vocab = 0, train = 0, val = 0, bytes = 0;
  int width = 2;
  double seconds = 0;
};

// Encodes every file (spm_encode reads each where it lies); the ids, and
// the text's bytes in *bytes.
absl::StatusOr<std::vector<int32_t>> EncodeAll(
    const std::vector<std::string>& files, const spm::Pieces& pieces,
    int64_t* bytes) {
  std::vector<int32_t> ids;
  for (const std::string& f : files) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(f, ec);
    if (ec) return absl::NotFoundError(absl::StrCat(f, ": ", ec.message()));
    *bytes += static_cast<int64_t>(size);
    ASSIGN_OR_RETURN(std::vector<int32_t> part, pieces.EncodeFile(f));
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

absl::StatusOr<Tokenized> Tokenize(const std::vector<std::string>& files,
                                   const std::string& dir) {
  const auto start = std::chrono::steady_clock::now();
  const double f = absl::GetFlag(FLAGS_val_fraction);
  if (!(f >= 0 && f <= 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--val_fraction=", f, " must be in [0, 0.5]"));
  }
  Tokenized t;
  ASSIGN_OR_RETURN(const std::unique_ptr<spm::Pieces> pieces,
                   TokenizerFor(files, dir, &t.model));
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   EncodeAll(files, *pieces, &t.bytes));
  t.vocab = pieces->size();
  t.width = t.vocab <= 65536 ? 2 : 4;
  const TextSplitSizes sizes =
      SplitTextTokens(static_cast<int64_t>(ids.size()), f);
  t.train = sizes.train_tokens;
  t.val = sizes.val_tokens;
  const auto all = absl::MakeConstSpan(ids);
  RETURN_IF_ERROR(WriteTokenFile(absl::StrCat(dir, "/train.bin"),
                                 all.subspan(0, t.train), t.width));
  if (t.val > 0) {
    RETURN_IF_ERROR(WriteTokenFile(absl::StrCat(dir, "/val.bin"),
                                   all.subspan(t.train), t.width));
  }
  t.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return t;
}

void Print(const Tokenized& t, const std::string& dir) {
  const std::string dtype = t.width == 2 ? "uint16" : "uint32";
  if (JsonOutput()) {
    std::cout << absl::StrFormat(
                     "{\"train_tokens\":%d,\"val_tokens\":%d,\"vocab_size\":%d,"
                     "\"token_dtype\":\"%s\",\"text_bytes\":%d,\"seconds\":%."
                     "3f,\"train\":%s,\"val\":%s,\"tokenizer_model\":%s}",
                     t.train, t.val, t.vocab, dtype, t.bytes, t.seconds,
                     JsonString(dir + "/train.bin"),
                     JsonString(t.val > 0 ? dir + "/val.bin" : ""),
                     JsonString(t.model))
              << std::endl;
    return;
  }
  std::cout << absl::StrFormat(
      "%d bytes of text -> %d + %d tokens (%.2f bytes per token, %d pieces) "
      "in %.2f s\n",
      t.bytes, t.train, t.val,
      static_cast<double>(t.bytes) / static_cast<double>(t.train + t.val),
      t.vocab, t.seconds);
  std::cout << "data {\n  text {\n    files: \"" << dir << "/train.bin\"\n";
  if (t.val > 0) std::cout << "    val_file: \"" << dir << "/val.bin\"\n";
  std::cout << "    token_dtype: \"" << dtype
            << "\"\n    vocab_size: " << t.vocab
            << "\n    tokenizer: \"sentencepiece\"\n    tokenizer_model: \""
            << t.model << "\"\n    context: 64\n  }\n}\n";
}

}  // namespace

int TokenizeMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = TokenizeSpec();
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1024, &parsed)) return *code;
  const std::string out = absl::GetFlag(FLAGS_out_dir);
  if (out.empty()) return UsageError(spec, "tokenize needs --out_dir DIR");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec)
    return Fail(absl::StrCat("tokenize: --out_dir ", out, ": ", ec.message()));
  const std::string dir = std::filesystem::canonical(out, ec).string();
  if (ec)
    return Fail(absl::StrCat("tokenize: --out_dir ", out, ": ", ec.message()));
  std::vector<std::string> files;
  for (const std::string& f : parsed.positional) {
    files.push_back(std::filesystem::absolute(f).string());
  }
  absl::StatusOr<Tokenized> t = Tokenize(files, dir);
  if (!t.ok()) return Fail(absl::StrCat("tokenize: ", t.status().message()));
  Print(*t, dir);
  return kExitOk;
}

}  // namespace aqueduct
