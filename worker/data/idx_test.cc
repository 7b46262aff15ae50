#include "worker/data/idx.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "common/device/cpu_device.h"
#include "gtest/gtest.h"
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

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), bytes.size()),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// A 3 x 2 x 2 image file with values 0..11.
std::string Images() {
  std::string s = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
  for (char v = 0; v < 12; ++v) s.push_back(v);
  return s;
}

TEST(IdxTest, ReadsRawAndGzip) {
  const std::string raw = TempPath("images.idx");
  const std::string gz = TempPath("images.idx.gz");
  WriteBytes(raw, Images());
  WriteGz(gz, Images());
  for (const std::string& path : {raw, gz}) {
    auto a = ReadIdxFile(path, Files(), "data.idx.train_images");
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->dims, (std::vector<int64_t>{3, 2, 2}));
    ASSERT_EQ(a->data.size(), 12u);
    EXPECT_EQ(a->data[11], 11);
    auto h = ReadIdxFile(path, Files(), "data.idx.train_images",
                         /*header_only=*/true);
    ASSERT_TRUE(h.ok());
    EXPECT_TRUE(h->data.empty());
  }
}

TEST(IdxTest, TruncatedDataNamesPathAndOffset) {
  const std::string path = TempPath("short.idx");
  std::string s = Images();
  s.resize(s.size() - 5);
  WriteBytes(path, s);
  auto a = ReadIdxFile(path, Files(), "data.idx.train_images");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(a.status().message(),
            path +
                ": truncated at offset 23: the header promises 12 data "
                "bytes from offset 16, found 7");
}

TEST(IdxTest, TruncatedGzip) {
  const std::string gz = TempPath("cut.idx.gz");
  WriteGz(gz, Images());
  std::ifstream in(gz, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  WriteBytes(gz, bytes.substr(0, bytes.size() - 12));
  auto a = ReadIdxFile(gz, Files(), "data.idx.train_images");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(a.status().message().find(gz), std::string::npos);
  EXPECT_NE(a.status().message().find("offset"), std::string::npos)
      << a.status();
}

TEST(IdxTest, CorruptGzip) {
  const std::string gz = TempPath("bad.idx.gz");
  WriteGz(gz, Images() + std::string(4000, 'x'));
  std::fstream f(gz, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(20);
  f.write("\xff\xff\xff\xff\xff\xff", 6);
  f.close();
  auto a = ReadIdxFile(gz, Files(), "data.idx.train_images");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(a.status().message().find(gz), std::string::npos) << a.status();
}

TEST(IdxTest, BadHeaders) {
  const std::string path = TempPath("hdr.idx");
  WriteBytes(path, std::string("\x01\x02\x08\x01", 4));
  EXPECT_EQ(
      ReadIdxFile(path, Files(), "data.idx.train_images").status().message(),
      path +
          ": not an IDX file (it does not start with the two zero "
          "bytes of the IDX magic number)");
  WriteBytes(path, std::string("\x00\x00\x0d\x01\x00\x00\x00\x01\x00", 9));
  auto t = ReadIdxFile(path, Files(), "data.idx.train_images");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("element type at offset 2 is not 0x08"),
            std::string::npos);
  WriteBytes(path, std::string("\x00\x00\x08\x09", 4));
  EXPECT_NE(ReadIdxFile(path, Files(), "data.idx.train_images")
                .status()
                .message()
                .find("dimension count at offset 3 is outside [1, 4]"),
            std::string::npos);
  WriteBytes(path, std::string("\x00\x00\x08\x02\x00\x00", 6));
  EXPECT_NE(ReadIdxFile(path, Files(), "data.idx.train_images")
                .status()
                .message()
                .find("truncated at offset 6: dimension 0 of 2"),
            std::string::npos);
  WriteBytes(path, Images() + "zz");
  EXPECT_NE(ReadIdxFile(path, Files(), "data.idx.train_images")
                .status()
                .message()
                .find("unexpected data at offset 28"),
            std::string::npos);
  EXPECT_EQ(
      ReadIdxFile(TempPath("missing.idx"), Files(), "data.idx.train_images")
          .status()
          .code(),
      absl::StatusCode::kNotFound);
}

// Files a spec may not name, and files whose header claims more than they
// hold: refused before anything is allocated, naming the field and the
// path, quoting no byte.
TEST(IdxTest, OnlyRegularFilesUnderTheRoot) {
  auto shadow = ReadIdxFile("/etc/shadow", Files(), "data.idx.train_images");
  EXPECT_EQ(shadow.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(shadow.status().message().find(
                "data.idx.train_images: '/etc/shadow' is outside --data_root"),
            std::string::npos)
      << shadow.status();
  const std::string dots = TempPath("../../../../../../etc/passwd");
  EXPECT_EQ(ReadIdxFile(dots, Files(), "data.idx.test_labels").status().code(),
            absl::StatusCode::kPermissionDenied);
  const std::string link = TempPath("passwd-link.idx");
  unlink(link.c_str());
  ASSERT_EQ(symlink("/etc/passwd", link.c_str()), 0);
  EXPECT_EQ(ReadIdxFile(link, Files(), "data.idx.train_images").status().code(),
            absl::StatusCode::kPermissionDenied);

  const std::string fifo = TempPath("images.fifo");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto f = ReadIdxFile(fifo, Files(), "data.idx.train_images");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("is a FIFO, not a regular file"),
            std::string::npos);
  EXPECT_EQ(ReadIdxFile(TempPath(""), Files(), "data.idx.train_images")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  const std::string secret = TempPath("secret.idx");
  WriteBytes(secret, "SECRET: root:$6$hash");
  auto s = ReadIdxFile(secret, Files(), "data.idx.train_images");
  EXPECT_EQ(s.status().message().find("SECRET"), std::string::npos);
  EXPECT_EQ(s.status().message().find("0x"), std::string::npos);
}

TEST(IdxTest, AHeaderClaimingMoreThanTheFileIsRefusedBeforeAllocating) {
  // 65535 x 65535 x 16 bytes (64 GiB) promised by 16 bytes.
  const std::string claim(
      "\x00\x00\x08\x03\x00\x00\xff\xff\x00\x00\xff"
      "\xff\x00\x00\x00\x10",
      16);
  const std::string raw = TempPath("claims.idx");
  WriteBytes(raw, claim);
  auto a = ReadIdxFile(raw, Files(), "data.idx.train_images");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(a.status().message(),
            raw +
                ": truncated at offset 16: the header promises 68717379600 "
                "data bytes from offset 16, found 0");
  const std::string gz = TempPath("claims.idx.gz");
  WriteGz(gz, claim + std::string(1000, '\0'));
  a = ReadIdxFile(gz, Files(), "data.idx.train_images");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(a.status().message().find("compressed bytes can hold"),
            std::string::npos)
      << a.status();
}

TEST(IdxTest, AStoppedReadEndsCancelled) {
  const std::string path = TempPath("stopped.idx");
  WriteBytes(path, Images());
  std::atomic<bool> stop{true};
  FileAccess files = Files();
  files.stop = &stop;
  EXPECT_EQ(ReadIdxFile(path, files, "data.idx.train_images").status().code(),
            absl::StatusCode::kCancelled);
}

TEST(DatasetTest, FashionMnistDirOutsideTheRoot) {
  DataSpec spec;
  spec.set_fashion_mnist_dir("/etc");
  auto info = DescribeData(spec, Files());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(info.status().message().find(
                "data.fashion_mnist_dir: '/etc' is outside --data_root"),
            std::string::npos)
      << info.status();
  EXPECT_EQ(LoadData(spec, Files()).status().code(),
            absl::StatusCode::kPermissionDenied);
  FileAccess none;  // No --data_root at all.
  spec.set_fashion_mnist_dir(TempPath(""));
  EXPECT_NE(DescribeData(spec, none).status().message().find("(none set)"),
            std::string::npos);
}

TEST(IdxTest, WriteRoundTrip) {
  IdxArray a;
  a.dims = {2, 3};
  a.data = {1, 2, 3, 4, 5, 6};
  const std::string path = TempPath("rt.idx");
  ASSERT_TRUE(WriteIdxFile(path, a).ok());
  auto b = ReadIdxFile(path, Files(), "data.idx.train_images");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dims, a.dims);
  EXPECT_EQ(b->data, a.data);
}

TEST(DatasetTest, IdxNormalisationAndLabelChecks) {
  IdxArray images;
  images.dims = {4, 2, 2};
  for (int i = 0; i < 16; ++i) images.data.push_back(i * 17);
  IdxArray labels;
  labels.dims = {4};
  labels.data = {0, 1, 2, 1};
  ASSERT_TRUE(WriteIdxFile(TempPath("ti.idx"), images).ok());
  ASSERT_TRUE(WriteIdxFile(TempPath("tl.idx"), labels).ok());
  DataSpec spec;
  spec.mutable_idx()->set_train_images(TempPath("ti.idx"));
  spec.mutable_idx()->set_train_labels(TempPath("tl.idx"));
  spec.set_mean(0.5f);
  spec.set_std(0.25f);
  auto info = DescribeData(spec, Files());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->sample_shape, Shape({1, 2, 2}));
  EXPECT_EQ(info->num_classes, 3);
  auto data = LoadData(spec, Files());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_FALSE(data->test.has_value());
  EXPECT_EQ(data->train.size, 4);
  EXPECT_NEAR(data->train.inputs[15], (255 / 255.0 - 0.5) / 0.25, 1e-5);
  EXPECT_NEAR(data->train.inputs[0], -2.0, 1e-5);

  // Test labels outside the training classes are refused.
  IdxArray bad_labels;
  bad_labels.dims = {4};
  bad_labels.data = {0, 7, 1, 1};
  ASSERT_TRUE(WriteIdxFile(TempPath("bl.idx"), bad_labels).ok());
  spec.mutable_idx()->set_test_images(TempPath("ti.idx"));
  spec.mutable_idx()->set_test_labels(TempPath("bl.idx"));
  auto bad = LoadData(spec, Files());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("label 7 of sample 1"),
            std::string::npos)
      << bad.status();

  // Sample and label counts must agree.
  labels.dims = {3};
  labels.data.resize(3);
  ASSERT_TRUE(WriteIdxFile(TempPath("tl3.idx"), labels).ok());
  DataSpec mismatch;
  mismatch.mutable_idx()->set_train_images(TempPath("ti.idx"));
  mismatch.mutable_idx()->set_train_labels(TempPath("tl3.idx"));
  EXPECT_NE(
      LoadData(mismatch, Files()).status().message().find("holds 3 labels"),
      std::string::npos);
}

TEST(DatasetTest, SamplerIsDeterministicPermutationPerEpoch) {
  EpochSampler a(10, 3, true, 5), b(10, 3, true, 5), c(10, 3, true, 6);
  EXPECT_EQ(a.batches_per_epoch(), 3);
  std::vector<int64_t> epoch0, epoch1;
  for (int m = 0; m < 3; ++m) {
    auto x = a.Batch(m);
    auto y = b.Batch(m);
    EXPECT_EQ(std::vector<int64_t>(x.begin(), x.end()),
              std::vector<int64_t>(y.begin(), y.end()));
    epoch0.insert(epoch0.end(), x.begin(), x.end());
  }
  for (int m = 3; m < 6; ++m) {
    auto x = a.Batch(m);
    epoch1.insert(epoch1.end(), x.begin(), x.end());
  }
  // Within an epoch, no sample repeats; epochs differ in order.
  std::vector<int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
  EXPECT_NE(epoch0, epoch1);
  auto other = c.Batch(0);
  auto first = a.Batch(0);
  EXPECT_NE(std::vector<int64_t>(other.begin(), other.end()),
            std::vector<int64_t>(first.begin(), first.end()));
  EpochSampler plain(10, 4, false, 5);
  EXPECT_EQ(plain.Batch(1)[0], 4);
}

TEST(DatasetTest, SyntheticIsSeededAndValidated) {
  DataSpec spec;
  auto* s = spec.mutable_synthetic();
  s->add_sample_shape(8);
  s->set_num_classes(4);
  s->set_train_samples(100);
  s->set_test_samples(20);
  s->set_seed(3);
  auto a = LoadData(spec, Files());
  auto b = LoadData(spec, Files());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->train.inputs, b->train.inputs);
  EXPECT_EQ(a->train.labels, b->train.labels);
  ASSERT_TRUE(a->test.has_value());
  EXPECT_EQ(a->test->size, 20);
  std::set<int32_t> classes(a->train.labels.begin(), a->train.labels.end());
  EXPECT_GE(classes.size(), 3u);
  s->set_num_classes(1);
  EXPECT_EQ(DescribeData(spec, Files()).status().message(),
            "data.synthetic.num_classes=1 must be in [2, 1000000]");
  DataSpec empty;
  EXPECT_NE(DescribeData(empty, Files())
                .status()
                .message()
                .find("data has no source"),
            std::string::npos);
}

// LoadBatch gathers straight into the CPU device's tensors, and names the
// shapes when the tensors do not fit the batch.
TEST(DatasetTest, LoadBatchGathersIntoTheDeviceTensors) {
  DataSpec spec;
  auto* s = spec.mutable_synthetic();
  s->add_sample_shape(6);
  s->set_num_classes(3);
  s->set_train_samples(50);
  s->set_seed(5);
  auto data = LoadData(spec, Files());
  ASSERT_TRUE(data.ok()) << data.status();
  CpuDevice device;
  const std::vector<int64_t> indices = {7, 0, 49, 7};
  Tensor x = *device.Allocate(Shape({4, 6}), DType::kF32);
  Tensor y = *device.Allocate(Shape({4}), DType::kI32);
  BatchStaging staging;
  ASSERT_TRUE(LoadBatch(data->train, indices, device, x, y, staging).ok());
  std::vector<float> want(24);
  std::vector<int32_t> want_labels(4);
  GatherBatch(data->train, indices, want.data(), want_labels.data());
  EXPECT_EQ(std::vector<float>(x.f32(), x.f32() + 24), want);
  EXPECT_EQ(std::vector<int32_t>(y.i32(), y.i32() + 4), want_labels);
  EXPECT_TRUE(staging.inputs.empty());  // No staging on the CPU.
  Tensor small = *device.Allocate(Shape({3, 6}), DType::kF32);
  EXPECT_EQ(
      LoadBatch(data->train, indices, device, small, y, staging).message(),
      "a batch of 4 samples of [6] does not fit tensors of [3, 6] and "
      "[4]");
}

}  // namespace
}  // namespace aqueduct
