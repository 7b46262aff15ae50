// Checkpoint files on a real file system (the test's temporary directory):
// write, commit, read back and verify; corruption, truncation and missing
// commits; loading across a different partition; pruning and stray files.
#include "common/checkpoint.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// A fresh directory for the running test.
std::string TestDir() {
  std::string dir = absl::StrCat(
      testing::TempDir(), "/checkpoint_test_",
      testing::UnitTest::GetInstance()->current_test_info()->name(), ".",
      std::string(6, 'X'));  // mkdtemp's template.
  EXPECT_NE(mkdtemp(dir.data()), nullptr) << dir;
  // By real path: what files are opened (and errors name) under a root.
  char* real = realpath(dir.c_str(), nullptr);
  if (real != nullptr) dir = real;
  free(real);
  return dir;
}

// Every test's directories lie under the test's temporary directory: the
// checkpoint root.
const PathRoots& Roots() {
  static const PathRoots* roots = [] {
    auto made = PathRoots::Make("--checkpoint_root", {testing::TempDir()});
    EXPECT_TRUE(made.ok()) << made.status();
    return new PathRoots(made.ok() ? *made : PathRoots());
  }();
  return *roots;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

HostTensor F32(std::vector<float> values) {
  HostTensor t;
  t.shape = Shape({static_cast<int64_t>(values.size())});
  t.data.resize(values.size() * sizeof(float));
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// Parameters and Adam state of layers [begin, end), layer i holding the
// values i and 10 i.
SafetensorsFile Layers(int begin, int end) {
  SafetensorsFile file;
  for (int i = begin; i < end; ++i) {
    const std::string p = absl::StrCat("layers.", i, ".weight");
    file.tensors[p] = F32({static_cast<float>(i), 10.0f * i});
    file.tensors[p + ".exp_avg"] = F32({0.5f * i});
  }
  file.metadata["optimizer_steps"] = "7";
  file.metadata["first_layer"] = absl::StrCat(begin);
  return file;
}

// A committed checkpoint of a 5-layer model in two files, [0, 2) and [2, 5).
v1::CheckpointManifest Commit(const std::string& base, int64_t version) {
  v1::CheckpointManifest m;
  m.set_job_id("job-1");
  m.set_version(version);
  m.set_num_layers(5);
  m.set_attempt(1);
  m.set_dir(CheckpointVersionDir(base, "job-1", version));
  const int bounds[][2] = {{0, 2}, {2, 5}};
  for (int s = 0; s < 2; ++s) {
    auto f = WriteCheckpointFile(Roots(), m.dir(), StageFileName(s, 1),
                                 Layers(bounds[s][0], bounds[s][1]), s,
                                 bounds[s][0], bounds[s][1]);
    EXPECT_TRUE(f.ok()) << f.status();
    if (f.ok()) *m.add_files() = *f;
  }
  EXPECT_TRUE(CommitManifest(Roots(), m).ok());
  return m;
}

TEST(CheckpointTest, Names) {
  EXPECT_EQ(CheckpointJobDir("/ck", "job-1"), "/ck/job-1");
  EXPECT_EQ(CheckpointVersionDir("/ck", "job-1", 100), "/ck/job-1/v00000100");
  EXPECT_EQ(CheckpointVersionDir("/ck/", "j", 123456789), "/ck/j/v123456789");
  EXPECT_EQ(StageFileName(3, 2), "stage-3-a2.safetensors");
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);  // The standard check value.
  EXPECT_EQ(Crc32(""), 0u);
}

TEST(CheckpointTest, WriteCommitReadVerify) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 100);
  ASSERT_EQ(m.files_size(), 2);
  EXPECT_EQ(m.files(1).name(), "stage-1-a1.safetensors");
  EXPECT_EQ(m.files(1).stage(), 1);
  EXPECT_EQ(m.files(1).layer_begin(), 2);
  EXPECT_EQ(m.files(1).layer_end(), 5);
  const std::string path = m.dir() + "/" + m.files(1).name();
  const std::string bytes = ReadText(path);
  EXPECT_EQ(m.files(1).bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(m.files(1).crc32(), Crc32(bytes));
  // Only the files and the manifest: no temporary files left.
  EXPECT_EQ(Entries(m.dir()),
            (std::vector<std::string>{"manifest.json", "stage-0-a1.safetensors",
                                      "stage-1-a1.safetensors"}));
  // Proto field names in the JSON.
  EXPECT_NE(ReadText(m.dir() + "/manifest.json").find("\"num_layers\": 5"),
            std::string::npos);

  for (const std::string& p :
       {m.dir(), m.dir() + "/", m.dir() + "/manifest.json"}) {
    auto read = ReadManifest(Roots(), p);
    ASSERT_TRUE(read.ok()) << p << ": " << read.status();
    EXPECT_EQ(read->SerializeAsString(), m.SerializeAsString()) << p;
  }
  EXPECT_TRUE(VerifyCheckpoint(Roots(), m).ok())
      << VerifyCheckpoint(Roots(), m);
}

TEST(CheckpointTest, ReadManifestErrorsAndMovedDirectory) {
  const std::string base = TestDir();
  auto missing = ReadManifest(Roots(), base + "/nothing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(base + "/nothing"),
            std::string::npos);

  const v1::CheckpointManifest m = Commit(base, 3);
  WriteText(base + "/bad.json", "{\"version\": ");
  auto bad = ReadManifest(Roots(), base + "/bad.json");
  ASSERT_FALSE(bad.ok());
  // Not named manifest.json: read as a directory, which it is not.
  EXPECT_NE(bad.status().message().find("bad.json"), std::string::npos);
  WriteText(m.dir() + "/manifest.json", "{\"version\": ");
  bad = ReadManifest(Roots(), m.dir());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find(m.dir() + "/manifest.json"),
            std::string::npos);

  // Moved: the manifest says where it was written; dir is where it is now.
  ASSERT_TRUE(CommitManifest(Roots(), m).ok());
  const std::string moved = base + "/moved";
  ASSERT_EQ(rename(m.dir().c_str(), moved.c_str()), 0);
  auto read = ReadManifest(Roots(), moved);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->dir(), moved);
  EXPECT_TRUE(VerifyCheckpoint(Roots(), *read).ok());
}

TEST(CheckpointTest, FlippedByteIsDataLossNamingTheFile) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 1);
  const std::string path = m.dir() + "/" + m.files(0).name();
  std::string bytes = ReadText(path);
  bytes[bytes.size() - 3] ^= 0x01;  // In the tensor data.
  WriteText(path, bytes);

  absl::Status s = VerifyCheckpoint(Roots(), m);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(s.message().find("CRC-32"), std::string::npos) << s;
  auto loaded = LoadCheckpointLayers(Roots(), m, 0, 5);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find(path), std::string::npos);
  // The other file alone still loads.
  EXPECT_TRUE(LoadCheckpointLayers(Roots(), m, 2, 5).ok());
}

TEST(CheckpointTest, TruncatedAndMissingFilesAreDataLoss) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 1);
  const std::string path = m.dir() + "/" + m.files(1).name();
  const std::string bytes = ReadText(path);
  WriteText(path, bytes.substr(0, bytes.size() - 1));

  absl::Status s = VerifyCheckpoint(Roots(), m);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(s.message().find(absl::StrCat(bytes.size() - 1, " bytes")),
            std::string::npos)
      << s;
  EXPECT_EQ(LoadCheckpointLayers(Roots(), m, 3, 4).status().code(),
            absl::StatusCode::kDataLoss);

  ASSERT_EQ(unlink(path.c_str()), 0);
  s = VerifyCheckpoint(Roots(), m);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s;
  EXPECT_EQ(LoadCheckpointLayers(Roots(), m, 3, 4).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(CheckpointTest, LayersMustBeCoveredExactlyOnce) {
  const std::string base = TestDir();
  v1::CheckpointManifest m = Commit(base, 1);
  m.set_num_layers(6);  // Layer 5 is in no file.
  absl::Status s = VerifyCheckpoint(Roots(), m);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;

  m.set_num_layers(5);
  m.mutable_files(1)->set_layer_begin(1);  // Layer 1 twice.
  s = VerifyCheckpoint(Roots(), m);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("layer 1 is in both"), std::string::npos) << s;

  m.mutable_files(1)->set_layer_begin(3);  // Layer 2 in none.
  s = VerifyCheckpoint(Roots(), m);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("layers [2, 3) are in no checkpoint file"),
            std::string::npos)
      << s;
  EXPECT_EQ(LoadCheckpointLayers(Roots(), m, 1, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Layers the files do hold still load.
  EXPECT_TRUE(LoadCheckpointLayers(Roots(), m, 3, 5).ok());
  EXPECT_EQ(LoadCheckpointLayers(Roots(), m, 2, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, LoadAcrossADifferentPartition) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 1);
  auto loaded = LoadCheckpointLayers(Roots(), m, 1, 4);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::vector<std::string> names;
  for (const auto& [name, t] : loaded->tensors) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "layers.1.weight", "layers.1.weight.exp_avg",
                       "layers.2.weight", "layers.2.weight.exp_avg",
                       "layers.3.weight", "layers.3.weight.exp_avg"}));
  for (int i = 1; i < 4; ++i) {
    const HostTensor& t =
        loaded->tensors[absl::StrCat("layers.", i, ".weight")];
    float v[2];
    ASSERT_EQ(t.data.size(), sizeof(v));
    std::memcpy(v, t.data.data(), sizeof(v));
    EXPECT_EQ(v[0], static_cast<float>(i));
    EXPECT_EQ(v[1], 10.0f * i);
  }
  // The metadata of the first file read, the one of layers [0, 2).
  EXPECT_EQ(loaded->metadata["first_layer"], "0");
  EXPECT_EQ(loaded->metadata["optimizer_steps"], "7");
  auto none = LoadCheckpointLayers(Roots(), m, 2, 2);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->tensors.empty());
}

TEST(CheckpointTest, ScanIgnoresUncommittedAndCorruptVersions) {
  const std::string base = TestDir();
  const std::string job = CheckpointJobDir(base, "job-1");
  Commit(base, 20);
  Commit(base, 3);
  // v00000040: files written, never committed.
  const std::string uncommitted = CheckpointVersionDir(base, "job-1", 40);
  ASSERT_TRUE(WriteCheckpointFile(Roots(), uncommitted, StageFileName(0, 1),
                                  Layers(0, 2), 0, 0, 2)
                  .ok());
  // v00000050: committed, then a file is corrupted.
  const v1::CheckpointManifest corrupt = Commit(base, 50);
  WriteText(corrupt.dir() + "/" + corrupt.files(0).name(), "garbage");
  // Not version directories: ignored without a word.
  ASSERT_EQ(mkdir((job + "/other").c_str(), 0755), 0);
  WriteText(job + "/v00000060", "a file, not a directory");
  WriteText(job + "/notes.txt", "hello");

  std::vector<std::string> warnings;
  const std::vector<v1::CheckpointManifest> found =
      ScanCheckpoints(Roots(), job, &warnings);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].version(), 3);
  EXPECT_EQ(found[1].version(), 20);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find(uncommitted), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("never committed"), std::string::npos);
  EXPECT_NE(warnings[1].find(corrupt.dir()), std::string::npos) << warnings[1];
  EXPECT_NE(warnings[1].find(corrupt.files(0).name()), std::string::npos)
      << warnings[1];

  EXPECT_TRUE(
      ScanCheckpoints(Roots(), base + "/no-such-job", &warnings).empty());
  EXPECT_EQ(warnings.size(), 2u);
  EXPECT_EQ(ScanCheckpoints(Roots(), job, nullptr).size(), 2u);
}

TEST(CheckpointTest, PruneKeepsOnlyTheGivenVersions) {
  const std::string base = TestDir();
  const std::string job = CheckpointJobDir(base, "job-1");
  for (int64_t v : {1, 2, 3}) Commit(base, v);
  WriteText(job + "/notes.txt", "hello");
  ASSERT_EQ(mkdir((job + "/other").c_str(), 0755), 0);
  WriteText(job + "/other/file", "x");

  ASSERT_TRUE(PruneCheckpoints(Roots(), job, {3}).ok());
  EXPECT_EQ(Entries(job),
            (std::vector<std::string>{"notes.txt", "other", "v00000003"}));
  EXPECT_TRUE(Exists(job + "/other/file"));
  ASSERT_EQ(ScanCheckpoints(Roots(), job, nullptr).size(), 1u);

  // A version directory holding a subdirectory is not removed (nor is the
  // subdirectory), but its regular files are, the manifest among them.
  const std::string v3 = CheckpointVersionDir(base, "job-1", 3);
  ASSERT_EQ(mkdir((v3 + "/sub").c_str(), 0755), 0);
  absl::Status s = PruneCheckpoints(Roots(), job, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(v3), std::string::npos) << s;
  EXPECT_EQ(Entries(v3), std::vector<std::string>{"sub"});
  EXPECT_TRUE(PruneCheckpoints(Roots(), base + "/no-such-job", {}).ok());
}

// Committing version 3: the uncommitted version 2 goes, version 4 (still
// being written) stays.
TEST(CheckpointTest, PruneLeavesLaterVersionsAlone) {
  const std::string base = TestDir();
  const std::string job = CheckpointJobDir(base, "job-1");
  Commit(base, 1);
  for (int64_t v : {2, 4}) {
    ASSERT_TRUE(WriteCheckpointFile(Roots(),
                                    CheckpointVersionDir(base, "job-1", v),
                                    StageFileName(0, 1), Layers(0, 2), 0, 0, 2)
                    .ok());
  }
  Commit(base, 3);
  ASSERT_TRUE(PruneCheckpoints(Roots(), job, {1, 3}, 3).ok());
  EXPECT_EQ(Entries(job),
            (std::vector<std::string>{"v00000001", "v00000003", "v00000004"}));
  EXPECT_EQ(Entries(CheckpointVersionDir(base, "job-1", 4)),
            std::vector<std::string>{"stage-0-a1.safetensors"});
}

TEST(CheckpointTest, RemoveStrayFiles) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 1);
  WriteText(m.dir() + "/stage-0-a0.safetensors", "an earlier attempt");
  WriteText(m.dir() + "/.stage-1-a1.safetensors.tmp.abcdef", "a failed write");
  ASSERT_EQ(mkdir((m.dir() + "/sub").c_str(), 0755), 0);
  ASSERT_TRUE(RemoveStrayFiles(Roots(), m).ok());
  EXPECT_EQ(Entries(m.dir()),
            (std::vector<std::string>{"manifest.json", "stage-0-a1.safetensors",
                                      "stage-1-a1.safetensors", "sub"}));
  EXPECT_TRUE(VerifyCheckpoint(Roots(), m).ok());
}

TEST(CheckpointTest, FailedWritesLeaveNoTemporaryFile) {
  const std::string base = TestDir();
  const std::string dir = base + "/v00000001";
  // A write that runs out of room (EFBIG here, as ENOSPC would).
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  sighandler_t old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  auto f = WriteCheckpointFile(Roots(), dir, "big.safetensors", Layers(0, 20),
                               0, 0, 20);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, old_handler);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kUnavailable) << f.status();
  EXPECT_NE(f.status().message().find(dir + "/big.safetensors"),
            std::string::npos)
      << f.status();
  EXPECT_NE(f.status().message().find(std::strerror(EFBIG)), std::string::npos)
      << f.status();
  EXPECT_TRUE(Entries(dir).empty());

  // The rename fails: the name is taken by a non-empty directory.
  ASSERT_EQ(mkdir((dir + "/taken").c_str(), 0755), 0);
  WriteText(dir + "/taken/x", "x");
  f = WriteCheckpointFile(Roots(), dir, "taken", Layers(0, 1), 0, 0, 1);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kUnavailable) << f.status();
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"taken"});

  EXPECT_EQ(
      WriteCheckpointFile(Roots(), dir, "../escape", Layers(0, 1), 0, 0, 1)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  v1::CheckpointManifest no_dir;
  EXPECT_EQ(CommitManifest(Roots(), no_dir).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Roots: nothing outside --checkpoint_root is read, written or removed.

PathRoots RootAt(const std::string& dir) {
  auto roots = PathRoots::Make("--checkpoint_root", {dir});
  EXPECT_TRUE(roots.ok()) << roots.status();
  return roots.ok() ? *roots : PathRoots();
}

TEST(CheckpointRootsTest, ManifestsOutsideTheRootAreRefused) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 1);
  const PathRoots other = RootAt(TestDir());
  auto read = ReadManifest(other, m.dir());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(read.status().message().find(m.dir() + "/manifest.json' is "
                                                   "outside --checkpoint_root"),
            std::string::npos)
      << read.status();
  // Whether it exists or not, and a shadow file reads the same.
  for (const std::string path : {"/etc/shadow", "/etc/no-such-dir/v1"}) {
    auto outside = ReadManifest(other, path);
    EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied)
        << path;
    EXPECT_EQ(outside.status().message().find("root:"), std::string::npos);
  }
  auto dots = ReadManifest(Roots(), TestDir() + "/../../../../etc/passwd");
  EXPECT_FALSE(dots.ok());
  EXPECT_EQ(VerifyCheckpoint(other, m).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(LoadCheckpointLayers(other, m, 0, 5).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(CheckpointRootsTest, UnderARootTheManifestDirIsItsRealPath) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 2);
  ASSERT_EQ(symlink(m.dir().c_str(), (base + "/latest").c_str()), 0);
  auto read = ReadManifest(Roots(), base + "/latest");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->dir(), m.dir());
}

TEST(CheckpointRootsTest, AListedFileLinkingOutIsRefused) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 1);
  const std::string outside = TestDir();
  const std::string file = m.dir() + "/" + m.files(0).name();
  ASSERT_EQ(rename(file.c_str(), (outside + "/moved").c_str()), 0);
  ASSERT_EQ(symlink((outside + "/moved").c_str(), file.c_str()), 0);
  const PathRoots roots = RootAt(base);
  absl::Status s = VerifyCheckpoint(roots, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("outside --checkpoint_root"), std::string::npos);
  EXPECT_EQ(LoadCheckpointLayers(roots, m, 0, 5).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(CheckpointRootsTest, FifosAreRefusedPromptly) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 1);
  const std::string file = m.dir() + "/" + m.files(1).name();
  ASSERT_EQ(unlink(file.c_str()), 0);
  ASSERT_EQ(mkfifo(file.c_str(), 0600), 0);
  absl::Status s = VerifyCheckpoint(Roots(), m);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("is a FIFO, not a regular file"),
            std::string::npos)
      << s;
  EXPECT_EQ(LoadCheckpointLayers(Roots(), m, 2, 5).status().code(),
            absl::StatusCode::kDataLoss);
  const std::string manifest = m.dir() + "/manifest.json";
  ASSERT_EQ(unlink(manifest.c_str()), 0);
  ASSERT_EQ(mkfifo(manifest.c_str(), 0600), 0);
  EXPECT_EQ(ReadManifest(Roots(), m.dir()).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(CheckpointRootsTest, BadJsonIsNotQuoted) {
  const std::string base = TestDir();
  const v1::CheckpointManifest m = Commit(base, 1);
  WriteText(m.dir() + "/manifest.json", "root:$6$SECRETHASH:19000:0:99999");
  auto bad = ReadManifest(Roots(), m.dir());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(bad.status().message().find("SECRET"), std::string::npos)
      << bad.status();
}

TEST(CheckpointRootsTest, NothingIsWrittenOrRemovedOutsideTheRoot) {
  const std::string base = TestDir();
  const std::string outside = TestDir();
  const PathRoots roots = RootAt(base);
  auto f = WriteCheckpointFile(roots, outside + "/job/v00000001", "s.st",
                               Layers(0, 1), 0, 0, 1);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kPermissionDenied);
  const std::string sneaky =
      base + "/../" + outside.substr(outside.find_last_of('/') + 1) + "/job";
  f = WriteCheckpointFile(roots, sneaky, "s.st", Layers(0, 1), 0, 0, 1);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kPermissionDenied);
  v1::CheckpointManifest m;
  m.set_dir(outside + "/job/v00000001");
  EXPECT_EQ(CommitManifest(roots, m).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Entries(outside).empty());

  // Checkpoints outside: neither pruned nor their stray files removed.
  const v1::CheckpointManifest theirs = Commit(outside, 1);
  WriteText(theirs.dir() + "/stray", "x");
  const std::string job = CheckpointJobDir(outside, "job-1");
  EXPECT_EQ(PruneCheckpoints(roots, job, {}).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(RemoveStrayFiles(roots, theirs).code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_EQ(symlink(job.c_str(), (base + "/job-link").c_str()), 0);
  EXPECT_EQ(PruneCheckpoints(roots, base + "/job-link", {}).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Entries(theirs.dir()).size(), 4u);
  std::vector<std::string> warnings;
  EXPECT_TRUE(ScanCheckpoints(roots, job, &warnings).empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("outside --checkpoint_root"), std::string::npos);
}

// init_weights and stage files: the header length is checked against the
// file's size before the rest is read, and not shown.
TEST(CheckpointRootsTest, ReadSafetensorsUnderChecksTheHeaderFirst) {
  const std::string base = TestDir();
  const PathRoots roots = RootAt(base);
  auto good = SerializeSafetensors(Layers(0, 2));
  ASSERT_TRUE(good.ok());
  WriteText(base + "/good.safetensors", *good);
  auto read =
      ReadSafetensorsUnder(roots, base + "/good.safetensors", "init_weights");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->tensors.size(), 4u);

  // The header claims 2^40 bytes in a file of 16.
  std::string claims("\x00\x00\x00\x00\x00\x01\x00\x00{}      ", 16);
  WriteText(base + "/claims.safetensors", claims);
  auto big =
      ReadSafetensorsUnder(roots, base + "/claims.safetensors", "init_weights");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(big.status().message(),
            "init_weights: '" + base +
                "/claims.safetensors' is not a safetensors file: its header "
                "length does not fit its 16 bytes");
  WriteText(base + "/shadow", "root:$6$SECRETHASH:19000:0:99999:7:::");
  auto shadow = ReadSafetensorsUnder(roots, base + "/shadow", "init_weights");
  EXPECT_EQ(shadow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shadow.status().message().find("SECRET"), std::string::npos);
  std::string garbage =
      std::string("\x10\0\0\0\0\0\0\0", 8) + "SECRET-JSON-TEXT";
  WriteText(base + "/garbage", garbage);
  auto json = ReadSafetensorsUnder(roots, base + "/garbage", "init_weights");
  EXPECT_FALSE(json.ok());
  EXPECT_EQ(json.status().message().find("SECRET"), std::string::npos)
      << json.status();

  EXPECT_EQ(
      ReadSafetensorsUnder(roots, "/dev/zero", "init_weights").status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      ReadSafetensorsUnder(PathRoots::Anywhere(), "/dev/zero", "init_weights")
          .status()
          .message(),
      "init_weights: '/dev/zero' is a character device, not a regular "
      "file");
  EXPECT_EQ(ReadSafetensorsUnder(roots, base, "init_weights").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::atomic<bool> stop{true};
  EXPECT_EQ(ReadSafetensorsUnder(roots, base + "/good.safetensors",
                                 "init_weights", &stop)
                .status()
                .code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace aqueduct
