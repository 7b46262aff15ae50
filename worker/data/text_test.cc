#include "worker/data/text.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/device/cpu_device.h"
#include "gtest/gtest.h"
#include "pipeline/spec.h"
#include "worker/data/dataset.h"

namespace aqueduct {
namespace {

// The test's files lie under its temporary directory: the --data_root.
const FileAccess& Files() {
  static const FileAccess* files = [] {
    const char* dir = std::getenv("TEST_TMPDIR");
    auto roots = PathRoots::Make("--data_root", {dir ? dir : "/tmp"});
    EXPECT_TRUE(roots.ok()) << roots.status();
    auto* access = new FileAccess;
    if (roots.ok()) access->data = *roots;
    return access;
  }();
  return *files;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// Writes `bytes` to a temporary file named `name`; returns its path.
std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

v1::TextData Text(const std::vector<std::string>& files, int64_t context,
                  const std::string& tokenizer = "chars") {
  v1::TextData t;
  for (const std::string& f : files) t.add_files(f);
  t.set_context(context);
  t.set_tokenizer(tokenizer);
  return t;
}

std::string Message(const absl::Status& status) {
  return std::string(status.message());
}

// "a" through "z" repeated: 26 distinct characters.
std::string Alphabetic(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + i % 26));
  return s;
}

TEST(TokenizerTest, BytesRoundTrip) {
  const Tokenizer t = Tokenizer::Bytes();
  EXPECT_EQ(t.kind(), Tokenizer::Kind::kBytes);
  EXPECT_EQ(t.vocab_size(), 256);
  const std::string text = "h\xc3\xa9!\n";  // "hé!\n"
  auto ids = t.Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{'h', 0xC3, 0xA9, '!', '\n'}));
  auto back = t.Decode(*ids);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, text);
  EXPECT_EQ(Message(t.Decode({65, 256}).status()),
            "token id 256 at position 1 is outside the vocabulary [0, 256)");
}

TEST(TokenizerTest, CharsRoundTripWithMultiByteCharacters) {
  // 'é' (2 bytes), '€' (3 bytes) and U+1F600 (4 bytes).
  const std::string text =
      "b\xc3\xa9"
      "a\xe2\x82\xac\xf0\x9f\x98\x80"
      "a";
  auto t = Tokenizer::CharsOf(text, "text");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind(), Tokenizer::Kind::kChars);
  EXPECT_EQ(t->alphabet(),
            (std::vector<char32_t>{U'a', U'b', 0xE9, 0x20AC, 0x1F600}));
  EXPECT_EQ(t->vocab_size(), 5);
  auto ids = t->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 2, 0, 3, 4, 0}));
  auto back = t->Decode(*ids);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, text);
  EXPECT_EQ(Message(t->Decode({5}).status()),
            "token id 5 at position 0 is outside the vocabulary [0, 5)");
}

TEST(TokenizerTest, UnknownAndInvalidPromptCharactersAreNamed) {
  auto t = Tokenizer::CharsOf("abc\n", "text");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Message(t->Encode("ab\xc3\xa9").status()),
            "character '\xc3\xa9' (U+00E9) at position 2 (byte offset 2) is "
            "not in the vocabulary of 4 characters");
  EXPECT_EQ(Message(t->Encode("a\tb").status()),
            "character U+0009 at position 1 (byte offset 1) is not in the "
            "vocabulary of 4 characters");
  EXPECT_EQ(Message(t->Encode("ab\xff").status()),
            "invalid UTF-8 at byte offset 2 (byte 0xff)");
  EXPECT_EQ(Message(Tokenizer::Chars({U'b', U'a'}).status()),
            "the alphabet is not strictly increasing at index 1");
  EXPECT_EQ(Message(Tokenizer::Chars({0xD800}).status()),
            "alphabet[0]=U+D800 is not a Unicode scalar value");
}

TEST(TokenizerTest, InvalidUtf8InAFileNamesThePathAndOffset) {
  const std::string good = WriteFile("good.txt", "hello\n");
  struct Case {
    std::string bytes;
    int offset;
  };
  const std::vector<Case> cases = {
      {"ab\x80", 2},              // A stray continuation byte.
      {"abc\xc3", 3},             // Truncated at the end.
      {"a\xc3z", 1},              // Truncated by an ASCII byte.
      {"ab\xc0\xaf", 2},          // Overlong '/'.
      {"\xed\xa0\x80", 0},        // A surrogate.
      {"xy\xf4\x90\x80\x80", 2},  // Above U+10FFFF.
  };
  for (const Case& c : cases) {
    const std::string bad = WriteFile("bad.txt", c.bytes);
    auto corpus = LoadTextCorpus(Text({good, bad}, 4), Files());
    ASSERT_FALSE(corpus.ok());
    EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
    // Not the byte: no error quotes a file.
    EXPECT_EQ(Message(corpus.status()), bad +
                                            ": invalid UTF-8 at byte "
                                            "offset " +
                                            std::to_string(c.offset));
  }
  // The same bytes are fine as bytes.
  auto bytes = LoadTextCorpus(
      Text({good, WriteFile("bad.txt", "\xff")}, 4, "bytes"), Files());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->tokens.back(), 0xFF);
}

TEST(TextTest, CorpusConcatenatesTheFilesInOrder) {
  const std::string a = WriteFile("a.txt", "ba");
  const std::string b = WriteFile("b.txt", "c\xc3\xa9");
  auto corpus = LoadTextCorpus(Text({a, b, a}, 2), Files());
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->tokenizer.vocab_size(), 4);
  EXPECT_EQ(corpus->tokens, (std::vector<int32_t>{1, 0, 2, 3, 1, 0}));
  auto tokenizer = Tokenizer::ForSpec(Text({a, b, a}, 2), Files());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->alphabet(), corpus->tokenizer.alphabet());
  auto bytes = Tokenizer::ForSpec(Text({"/nonexistent"}, 2, "bytes"), Files());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->vocab_size(), 256);
}

TEST(TextTest, MissingEmptyAndShortFilesNameThePath) {
  const std::string missing = TempPath("missing.txt");
  auto status = LoadTextCorpus(Text({missing}, 4), Files()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(status),
            "data.text.files[0]: '" + missing + "' does not exist");
  const std::string empty = WriteFile("empty.txt", "");
  status = LoadTextCorpus(Text({empty}, 4), Files()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(status), empty + ": empty file");
  const std::string dir = TempPath("a_directory");
  ::mkdir(dir.c_str(), 0755);
  EXPECT_EQ(
      Message(LoadTextCorpus(Text({dir}, 4), Files()).status()),
      "data.text.files[0]: '" + dir + "' is a directory, not a regular file");

  // 20 tokens with val_fraction 0.1: 18 train, 2 validation; context 4
  // needs 5 of each: 45 tokens (40 + 5).
  const std::string a = WriteFile("short_a.txt", Alphabetic(12));
  const std::string b = WriteFile("short_b.txt", Alphabetic(8));
  DataSpec spec;
  *spec.mutable_text() = Text({a, b}, 4);
  status = LoadData(spec, Files()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::string want =
      "data.text: the text of " + a + ", " + b +
      " has 20 tokens; context=4 with val_fraction=0.1 needs at least 45 (5 "
      "for a training window and 5 for a validation window)";
  EXPECT_EQ(Message(status), want);
  EXPECT_EQ(Message(DescribeData(spec, Files()).status()), want);
  spec.mutable_text()->set_val_fraction(0);
  spec.mutable_text()->set_context(20);
  EXPECT_EQ(Message(LoadData(spec, Files()).status()),
            "data.text: the text of " + a + ", " + b +
                " has 20 tokens; context=20 with val_fraction=0 needs at "
                "least 21 (21 for a training window)");
  spec.mutable_text()->set_context(19);
  EXPECT_TRUE(LoadData(spec, Files()).ok());
}

// Text files a spec may not name: refused naming the field, the path and
// the flag, quoting nothing; the size cap is checked before reading.
TEST(TextTest, OnlyRegularFilesUnderTheRootUpToTheCap) {
  const std::string good = WriteFile("ok.txt", Alphabetic(100));
  for (const std::string& outside :
       {std::string("/etc/shadow"), TempPath("../../../../../../etc/shadow")}) {
    auto status = LoadTextCorpus(Text({good, outside}, 4), Files()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << outside;
    EXPECT_EQ(Message(status).rfind("data.text.files[1]: '" + outside +
                                        "' is outside --data_root (",
                                    0),
              0u)
        << status;
    EXPECT_EQ(Message(status).find("root:"), std::string::npos);
  }
  const std::string link = TempPath("shadow-link.txt");
  unlink(link.c_str());
  ASSERT_EQ(symlink("/etc/shadow", link.c_str()), 0);
  EXPECT_EQ(LoadTextCorpus(Text({link}, 4), Files()).status().code(),
            absl::StatusCode::kPermissionDenied);

  const std::string fifo = TempPath("text.fifo");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(Message(LoadTextCorpus(Text({fifo}, 4), Files()).status()),
            "data.text.files[0]: '" + fifo + "' is a FIFO, not a regular file");

  FileAccess capped = Files();
  capped.max_text_bytes = 150;
  const std::string second = WriteFile("second.txt", Alphabetic(60));
  auto status = LoadTextCorpus(Text({good, second}, 4), capped).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(status),
            "data.text.files[1]: '" + second +
                "' holds 60 bytes; the text files of a job may hold 150 bytes "
                "in all (--max_text_bytes)");
  DataSpec spec;
  *spec.mutable_text() = Text({good, second}, 4);
  EXPECT_EQ(DescribeData(spec, capped).status().code(),
            absl::StatusCode::kFailedPrecondition);
  capped.max_text_bytes = 160;
  EXPECT_TRUE(LoadTextCorpus(Text({good, second}, 4), capped).ok());

  std::atomic<bool> stop{true};
  capped.stop = &stop;
  EXPECT_EQ(LoadTextCorpus(Text({good}, 4), capped).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(TextTest, SplitSizes) {
  EXPECT_EQ(SplitTextTokens(1000, 0.1f).val_tokens, 100);
  EXPECT_EQ(SplitTextTokens(1000, 0.1f).train_tokens, 900);
  EXPECT_EQ(SplitTextTokens(1005, 0.1f).val_tokens, 101);  // 100.5 rounds up.
  EXPECT_EQ(SplitTextTokens(1004, 0.1f).val_tokens, 100);
  EXPECT_EQ(SplitTextTokens(1000, 0.35f).val_tokens, 350);
  EXPECT_EQ(SplitTextTokens(1000, 0).val_tokens, 0);
  EXPECT_EQ(SplitTextTokens(7, 0.5f).val_tokens, 4);
  EXPECT_EQ(MinTextTokens(4, 0.1f), 45);
  EXPECT_EQ(MinTextTokens(4, 0), 5);
  EXPECT_EQ(MinTextTokens(4, 0.5f), 10);
  EXPECT_EQ(MinTextTokens(4, 1e-30), -1);

  const std::string path = WriteFile("split.txt", Alphabetic(1000));
  DataSpec spec;
  *spec.mutable_text() = Text({path}, 8);
  auto data = LoadData(spec, Files());
  ASSERT_TRUE(data.ok()) << data.status();
  const Dataset& train = data->train;
  EXPECT_TRUE(train.is_text());
  EXPECT_EQ(train.tokens.size(), 900u);
  EXPECT_EQ(train.size, 892);
  EXPECT_EQ(train.stride, 1);
  EXPECT_EQ(train.sample_shape, Shape({8}));
  EXPECT_EQ(train.labels_per_sample, 8);
  EXPECT_EQ(train.num_classes, 26);
  ASSERT_TRUE(data->test.has_value());
  EXPECT_EQ(data->test->tokens.size(), 100u);
  EXPECT_EQ(data->test->stride, 8);
  EXPECT_EQ(data->test->size, 12);  // (100 - 1) / 8.
  EXPECT_EQ(data->test->num_classes, 26);
  EXPECT_TRUE(HasTestSplit(spec));

  auto info = DescribeData(spec, Files());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->sample_shape, Shape({8}));
  EXPECT_EQ(info->num_classes, 26);
  EXPECT_EQ(info->labels_per_sample, 8);
  EXPECT_EQ(info->train_samples, 112);  // floor(900 / 8).

  spec.mutable_text()->set_val_fraction(0);
  data = LoadData(spec, Files());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.tokens.size(), 1000u);
  EXPECT_FALSE(data->test.has_value());
  EXPECT_FALSE(HasTestSplit(spec));
}

TEST(TextTest, WindowsAreInputsAndTheNextTokens) {
  // Bytes: the ids are the byte values, so the windows are easy to read.
  std::string text;
  for (int i = 0; i < 100; ++i) text.push_back(static_cast<char>(i));
  DataSpec spec;
  *spec.mutable_text() = Text({WriteFile("windows.txt", text)}, 4, "bytes");
  spec.mutable_text()->set_val_fraction(0.2f);
  auto data = LoadData(spec, Files());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.num_classes, 256);
  std::vector<float> x(12);
  std::vector<int32_t> y(12);
  GatherBatch(data->train, {0, 75, 10}, x.data(), y.data());
  EXPECT_EQ(x,
            (std::vector<float>{0, 1, 2, 3, 75, 76, 77, 78, 10, 11, 12, 13}));
  EXPECT_EQ(y,
            (std::vector<int32_t>{1, 2, 3, 4, 76, 77, 78, 79, 11, 12, 13, 14}));
  EXPECT_EQ(data->train.size, 76);  // The last window ends at token 79.

  // Validation: tokens 80..99, non-overlapping windows of 4 from token 80.
  const Dataset& val = *data->test;
  EXPECT_EQ(val.size, 4);  // (20 - 1) / 4.
  std::vector<float> vx(16);
  std::vector<int32_t> vy(16);
  GatherBatch(val, {0, 1, 2, 3}, vx.data(), vy.data());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(vx[i], 80 + i);
    EXPECT_EQ(vy[i], 81 + i);
  }

  // LoadBatch gathers the same into the device's tensors: labels [rows, T].
  CpuDevice device;
  Tensor tx = *device.Allocate(Shape({3, 4}), DType::kF32);
  Tensor ty = *device.Allocate(Shape({3, 4}), DType::kI32);
  BatchStaging staging;
  ASSERT_TRUE(
      LoadBatch(data->train, {0, 75, 10}, device, tx, ty, staging).ok());
  EXPECT_EQ(std::vector<float>(tx.f32(), tx.f32() + 12), x);
  EXPECT_EQ(std::vector<int32_t>(ty.i32(), ty.i32() + 12), y);
  Tensor one_label = *device.Allocate(Shape({3}), DType::kI32);
  EXPECT_EQ(Message(LoadBatch(data->train, {0, 75, 10}, device, tx, one_label,
                              staging)),
            "a batch of 3 samples of [4] with 4 labels each does not fit "
            "tensors of [3, 4] and [3]");
}

TEST(TextTest, ValidationWindowsAreNonOverlappingAndCapped) {
  DataSpec spec;
  *spec.mutable_text() = Text({WriteFile("val.txt", Alphabetic(1000))}, 10);
  spec.mutable_text()->set_val_fraction(0.5f);
  auto data = LoadData(spec, Files());
  ASSERT_TRUE(data.ok()) << data.status();
  const Dataset& val = *data->test;
  EXPECT_EQ(val.size, 49);  // (500 - 1) / 10.
  std::vector<int64_t> all(val.size);
  for (int64_t i = 0; i < val.size; ++i) all[i] = i;
  std::vector<float> x(val.size * 10);
  std::vector<int32_t> y(val.size * 10);
  GatherBatch(val, all, x.data(), y.data());
  // Every validation token is an input exactly once, in order, and each
  // label is the token after its input.
  for (int64_t k = 0; k < val.size * 10; ++k) {
    EXPECT_EQ(x[k], val.tokens[k]);
    EXPECT_EQ(y[k], val.tokens[k + 1]);
  }
  spec.mutable_text()->set_val_windows(7);
  data = LoadData(spec, Files());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->test->size, 7);
  spec.mutable_text()->set_val_windows(1000);
  data = LoadData(spec, Files());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->test->size, 49);
}

// Values computed independently (Python, the formula in text.h), for the
// reimplementation to check itself against.
TEST(TextTest, WindowStartsAreTheDocumentedFunction) {
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(1), 0x910A2DEC89025CC1ull);
  EXPECT_EQ(TextWindowStart(0, 0, 0, 1000), 433);
  EXPECT_EQ(TextWindowStart(0, 0, 1, 1000), 824);
  EXPECT_EQ(TextWindowStart(1, 0, 0, 1000), 595);
  EXPECT_EQ(TextWindowStart(42, 7, 3, 1000000), 242809);
  EXPECT_EQ(TextWindowStart(42, 7, 4, 1000000), 443032);
  EXPECT_EQ(TextWindowStart(12345, 100000, 63, 9999991), 257436);
  EXPECT_EQ(TextWindowStart(~uint64_t{0}, uint64_t{1} << 40, 5,
                            (int64_t{1} << 40) + 7),
            512876134626);
}

TEST(TextTest, SamplerDrawsTheDocumentedWindows) {
  DataSpec spec;
  *spec.mutable_text() = Text({WriteFile("sampler.txt", Alphabetic(1000))}, 8);
  auto data = LoadData(spec, Files());
  ASSERT_TRUE(data.ok()) << data.status();
  // 900 training tokens / 8 / batch 4: 28 batches an epoch; 892 windows.
  EpochSampler a = EpochSampler::For(data->train, 4, true, 42);
  EpochSampler b = EpochSampler::For(data->train, 4, false, 42);
  EXPECT_EQ(a.batches_per_epoch(), 28);
  for (int64_t m : {0, 1, 27, 28, 1000, 5}) {
    auto batch = a.Batch(m);
    ASSERT_EQ(batch.size(), 4u);
    for (int64_t r = 0; r < 4; ++r) {
      EXPECT_EQ(batch[r], TextWindowStart(42, m, r, 892));
    }
    // The shuffle flag does not apply to text.
    auto other = b.Batch(m);
    EXPECT_EQ(std::vector<int64_t>(other.begin(), other.end()),
              std::vector<int64_t>(batch.begin(), batch.end()));
  }
  // Another seed, other windows.
  EpochSampler c = EpochSampler::For(data->train, 4, true, 43);
  auto first = c.Batch(0);
  std::vector<int64_t> seed43(first.begin(), first.end());
  auto again = a.Batch(0);
  EXPECT_NE(seed43, std::vector<int64_t>(again.begin(), again.end()));
  // Images keep the epoch permutation: For matches the constructor.
  DataSpec images;
  auto* s = images.mutable_synthetic();
  s->add_sample_shape(3);
  s->set_num_classes(2);
  s->set_train_samples(10);
  auto synthetic = LoadData(images, Files());
  ASSERT_TRUE(synthetic.ok()) << synthetic.status();
  EpochSampler old(10, 3, true, 9);
  EpochSampler via_for = EpochSampler::For(synthetic->train, 3, true, 9);
  EXPECT_EQ(via_for.batches_per_epoch(), 3);
  for (int64_t m = 0; m < 7; ++m) {
    auto x = old.Batch(m);
    auto y = via_for.Batch(m);
    EXPECT_EQ(std::vector<int64_t>(x.begin(), x.end()),
              std::vector<int64_t>(y.begin(), y.end()));
  }
}

TEST(TextTest, FortuneCookies) {
  const std::string cookie = "/usr/share/games/fortunes/cookie";
  // deploy/setup.sh installs it: missing is a failure, not a skip.
  ASSERT_EQ(::access(cookie.c_str(), R_OK), 0)
      << cookie << " is missing (Debian's fortunes package; "
      << "deploy/setup.sh installs it)";
  DataSpec spec;
  *spec.mutable_text() = Text({cookie}, 64);
  auto roots = PathRoots::Make("--data_root", {"/usr/share/games/fortunes"});
  ASSERT_TRUE(roots.ok()) << roots.status();
  FileAccess files;
  files.data = *roots;
  auto data = LoadData(spec, files);
  ASSERT_TRUE(data.ok()) << data.status();
  const int64_t total = static_cast<int64_t>(data->train.tokens.size() +
                                             data->test->tokens.size());
  EXPECT_GT(total, 100000);
  EXPECT_GT(data->train.num_classes, 60);
  EXPECT_LT(data->train.num_classes, 128);
  auto tokenizer = Tokenizer::ForSpec(spec.text(), files);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // The first window decodes to the file's first 64 characters.
  auto text =
      tokenizer->Decode(absl::MakeConstSpan(data->train.tokens).subspan(0, 64));
  ASSERT_TRUE(text.ok()) << text.status();
  std::ifstream in(cookie, std::ios::binary);
  std::string head(64, '\0');
  in.read(head.data(), 64);
  EXPECT_EQ(*text, head);
  auto ids = tokenizer->Encode(head);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, std::vector<int32_t>(data->train.tokens.begin(),
                                       data->train.tokens.begin() + 64));
}

}  // namespace
}  // namespace aqueduct
