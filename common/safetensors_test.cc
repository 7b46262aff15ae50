#include "common/safetensors.h"

#include <cstring>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

HostTensor F32(Shape shape, std::vector<float> values) {
  HostTensor t;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data.resize(values.size() * 4);
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

std::string WithHeader(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + json + data;
}

TEST(SafetensorsTest, RoundTrip) {
  SafetensorsFile file;
  file.tensors["layers.1.weight"] = F32(Shape({2, 3}), {1, 2, 3, 4, 5, 6});
  file.tensors["layers.1.bias"] = F32(Shape({2}), {-1, 0.5});
  file.tensors["scalar"] = F32(Shape(), {7});
  file.metadata["format"] = "pt";
  auto bytes = SerializeSafetensors(file);
  ASSERT_TRUE(bytes.ok());
  // Header length is little-endian and the data starts 8-byte aligned.
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) {
    n |= uint64_t{static_cast<uint8_t>((*bytes)[i])} << (8 * i);
  }
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes->size(), 8 + n + 4 * 9);
  auto back = ParseSafetensors(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->tensors.size(), 3u);
  EXPECT_EQ(back->tensors["layers.1.weight"].shape, Shape({2, 3}));
  EXPECT_EQ(back->tensors["layers.1.weight"].data,
            file.tensors["layers.1.weight"].data);
  EXPECT_EQ(back->tensors["scalar"].shape, Shape());
  EXPECT_EQ(back->metadata["format"], "pt");

  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                             : "/tmp") +
      "/rt.safetensors";
  ASSERT_TRUE(WriteSafetensorsFile(path, file).ok());
  auto from_disk = ReadSafetensorsFile(path);
  ASSERT_TRUE(from_disk.ok());
  EXPECT_EQ(from_disk->tensors["layers.1.bias"].data,
            file.tensors["layers.1.bias"].data);
}

TEST(SafetensorsTest, ParsesAHandWrittenFile) {
  // As safetensors.torch.save_file writes it (other key order, no padding).
  const std::string json =
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})";
  auto f = ParseSafetensors(WithHeader(json, std::string(12, '\x01')));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tensors["a"].dtype, DType::kBF16);
  EXPECT_EQ(f->tensors["b"].data.size(), 4u);
}

TEST(SafetensorsTest, RejectsMalformedFiles) {
  const std::string data(8, '\0');
  struct Case {
    std::string bytes;
    std::string expect;
  };
  std::string huge(8, '\0');
  huge[0] = '\x40';
  huge[1] = '\x42';
  huge[2] = '\x0f';  // ~1 MB header in a 9-byte file.
  const std::vector<Case> cases = {
      {"abc", "shorter than the 8-byte header length"},
      {huge + "{", "is larger than the file's remaining 1 bytes"},
      {WithHeader("[1, 2]", ""), "header is not a JSON object"},
      {WithHeader("{not json", ""), "header is not a JSON object"},
      {WithHeader(R"({"w":{"dtype":"F64x","shape":[2],"data_offsets":[0,8]}})",
                  data),
       "unknown dtype 'F64x'"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})",
                  data),
       "are outside the 8 data bytes"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                  data),
       "hold 8 bytes but F32 [3] needs 12"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("v":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                  data),
       "data_offsets overlap"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  data),
       "leave a gap at byte 0"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                  data),
       "4 bytes after the last tensor"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                  data),
       "shape entry is not a non-negative integer"},
      {WithHeader(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", data),
       "needs dtype, shape and data_offsets"},
      // 2^52 x 4096 floats: the element count overflowed int64 (UBSan, in
      // the fuzz target) and wrapped to 0, which matched 0 data bytes.
      {WithHeader(R"({"w":{"dtype":"F32","shape":[4503599627370496,4096],)"
                  R"("data_offsets":[0,0]}})",
                  ""),
       "shape entry 1 (4096) makes the tensor larger than"},
  };
  for (const Case& c : cases) {
    auto f = ParseSafetensors(c.bytes);
    ASSERT_FALSE(f.ok()) << c.expect;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(f.status().message().find(c.expect), std::string::npos)
        << "got: " << f.status().message() << "\nwanted: " << c.expect;
  }
}

// Zero-sized tensors are valid, whatever their other dimensions, as long
// as those do not multiply past int64.
TEST(SafetensorsTest, EmptyTensorsParse) {
  auto f = ParseSafetensors(
      WithHeader(R"({"e":{"dtype":"BF16","shape":[0,4503599627370496],)"
                 R"("data_offsets":[0,0]}})",
                 ""));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tensors.at("e").shape, Shape({0, 4503599627370496}));
  EXPECT_TRUE(f->tensors.at("e").data.empty());
}

TEST(SafetensorsTest, SerializeChecksSizes) {
  SafetensorsFile file;
  file.tensors["w"] = F32(Shape({3}), {1, 2});
  EXPECT_FALSE(SerializeSafetensors(file).ok());
}

}  // namespace
}  // namespace aqueduct
