// The coordinator's model store on a real directory: uploads in chunks
// are checked (contiguous, within the declared size, the CRC-32 at the
// end) and leave no file behind when they fail; one upload per job at a
// time; files are read back bit-exact in chunks that carry the size and
// CRC-32 of the whole file.
#include "coordinator/model_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "zlib.h"

namespace aqueduct {
namespace {

uint32_t Crc(const std::string& s) {
  return static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(s.data()), s.size()));
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// A fresh directory for each test.
std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/model_store_", name, "_", getpid());
  mkdir(dir.c_str(), 0700);
  return dir + "/models";
}

class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.dir = TestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    options_.chunk_bytes = 1000;
    options_.max_bytes = 1 << 20;
    auto store = ModelStore::Open(options_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // Uploads `bytes` in chunks of `chunk` bytes and commits.
  absl::StatusOr<StoredModel> Upload(const std::string& job,
                                     const std::string& bytes, size_t chunk) {
    auto upload = store_->BeginUpload(job, bytes.size(), Crc(bytes));
    if (!upload.ok()) return upload.status();
    for (size_t offset = 0; offset < bytes.size(); offset += chunk) {
      absl::Status s = (*upload)->Append(
          offset, absl::string_view(bytes).substr(offset, chunk));
      if (!s.ok()) return s;
    }
    return (*upload)->Commit();
  }

  // Reads `path` back through the store, checking every chunk's header.
  std::string ReadBack(const std::string& path, absl::Status* status) {
    std::string out;
    int64_t total = -1;
    uint32_t crc = 0;
    *status = store_->Read(
        path, [] { return false; },
        [&](const v1::ModelChunk& c) {
          EXPECT_EQ(c.offset(), static_cast<int64_t>(out.size()));
          if (total < 0) {
            total = c.total_bytes();
            crc = c.crc32();
          }
          EXPECT_EQ(c.total_bytes(), total);
          EXPECT_EQ(c.crc32(), crc);
          EXPECT_LE(c.data().size(), 1000u);
          out += c.data();
          return true;
        });
    if (status->ok()) {
      EXPECT_EQ(total, static_cast<int64_t>(out.size()));
      EXPECT_EQ(crc, Crc(out));
    }
    return out;
  }

  ModelStoreOptions options_;
  std::unique_ptr<ModelStore> store_;
};

TEST_F(ModelStoreTest, MultiChunkUploadReadsBackBitExact) {
  const std::string bytes = RandomBytes(3500, 1);
  auto stored = Upload("job-1", bytes, 1024);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->path, options_.dir + "/job-1.safetensors");
  EXPECT_EQ(stored->bytes, 3500);
  EXPECT_EQ(stored->crc32, Crc(bytes));
  EXPECT_FALSE(Exists(stored->path + ".part"));
  absl::Status s;
  EXPECT_EQ(ReadBack(stored->path, &s), bytes);
  EXPECT_TRUE(s.ok()) << s;

  // A store that did not write the file computes its CRC-32.
  store_ = *ModelStore::Open(options_);
  EXPECT_EQ(ReadBack(stored->path, &s), bytes);
  EXPECT_TRUE(s.ok()) << s;

  // A new upload of the job replaces the model.
  const std::string second = RandomBytes(1200, 2);
  ASSERT_TRUE(Upload("job-1", second, 700).ok());
  EXPECT_EQ(ReadBack(stored->path, &s), second);
}

TEST_F(ModelStoreTest, CorruptCrcIsRefusedAndLeavesNoFile) {
  const std::string bytes = RandomBytes(2500, 3);
  auto upload = store_->BeginUpload("job-2", bytes.size(), Crc(bytes) ^ 1);
  ASSERT_TRUE(upload.ok()) << upload.status();
  ASSERT_TRUE((*upload)->Append(0, bytes).ok());
  const auto committed = (*upload)->Commit();
  EXPECT_EQ(committed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(committed.status().message().find("CRC-32"), std::string::npos);
  EXPECT_FALSE(Exists(options_.dir + "/job-2.safetensors"));
  EXPECT_FALSE(Exists(options_.dir + "/job-2.safetensors.part"));
}

TEST_F(ModelStoreTest, NonContiguousOrOversizedChunksAreRefused) {
  const std::string bytes = RandomBytes(2000, 4);
  auto upload = store_->BeginUpload("job-3", bytes.size(), Crc(bytes));
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append(0, bytes.substr(0, 500)).ok());
  EXPECT_TRUE(Exists(options_.dir + "/job-3.safetensors.part"));
  const absl::Status gap = (*upload)->Append(600, bytes.substr(600, 500));
  EXPECT_EQ(gap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gap.message().find("contiguous"), std::string::npos) << gap;
  EXPECT_FALSE(Exists(options_.dir + "/job-3.safetensors.part"));
  EXPECT_FALSE((*upload)->Commit().ok());  // The upload is over.
  upload->reset();

  upload = store_->BeginUpload("job-3", 10, 0);
  ASSERT_TRUE(upload.ok());
  EXPECT_EQ((*upload)->Append(0, bytes.substr(0, 11)).code(),
            absl::StatusCode::kInvalidArgument);

  upload = store_->BeginUpload("job-3", 10, Crc(bytes.substr(0, 10)));
  ASSERT_TRUE((*upload)->Append(0, bytes.substr(0, 9)).ok());
  EXPECT_EQ((*upload)->Commit().status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(Exists(options_.dir + "/job-3.safetensors"));
  EXPECT_FALSE(Exists(options_.dir + "/job-3.safetensors.part"));
}

TEST_F(ModelStoreTest, BadHeadersAreRefusedBeforeAnyFile) {
  EXPECT_EQ(store_->BeginUpload("../etc", 10, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginUpload("", 10, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginUpload("job-4", 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginUpload("job-4", -5, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginUpload("job-4", (1 << 20) + 1, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(Exists(options_.dir + "/job-4.safetensors.part"));
}

TEST_F(ModelStoreTest, OneUploadPerJobAtATime) {
  auto first = store_->BeginUpload("job-5", 10, 0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(store_->BeginUpload("job-5", 10, 0).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_TRUE(store_->BeginUpload("job-6", 10, 0).ok());  // Another job.
  // An abandoned upload removes its .part and frees the job.
  ASSERT_TRUE((*first)->Append(0, "abc").ok());
  first->reset();
  EXPECT_FALSE(Exists(options_.dir + "/job-5.safetensors.part"));
  EXPECT_TRUE(store_->BeginUpload("job-5", 10, 0).ok());
}

TEST_F(ModelStoreTest, LeftoverPartsAreRemovedOnOpen) {
  const std::string part = options_.dir + "/job-7.safetensors.part";
  std::ofstream(part) << "half a model";
  ASSERT_TRUE(Exists(part));
  ASSERT_TRUE(ModelStore::Open(options_).ok());
  EXPECT_FALSE(Exists(part));
}

TEST_F(ModelStoreTest, ReadErrorsNameTheFile) {
  absl::Status s;
  ReadBack(options_.dir + "/nope.safetensors", &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("nope.safetensors"), std::string::npos);
  // A reader that goes away ends the stream.
  ASSERT_TRUE(Upload("job-8", RandomBytes(3000, 5), 3000).ok());
  int chunks = 0;
  s = store_->Read(
      store_->PathFor("job-8"), [] { return false; },
      [&](const v1::ModelChunk&) { return ++chunks < 2; });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(chunks, 2);
}

}  // namespace
}  // namespace aqueduct
