#include "common/file_system.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// A fresh directory under the test's temporary directory, by real path.
std::string MakeDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
  char* real = realpath(dir.c_str(), nullptr);
  std::string out = real != nullptr ? real : dir;
  std::free(real);
  return out;
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

class PathRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeDir("fs_root");
    outside_ = MakeDir("fs_outside");
    WriteFile(root_ + "/data.txt", "inside");
    WriteFile(outside_ + "/secret.txt", "SECRET-CONTENT");
    auto roots = PathRoots::Make("--data_root", {root_});
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_ = *roots;
  }

  std::string root_, outside_;
  PathRoots roots_;
};

TEST_F(PathRootsTest, ResolvesAFileInsideToItsRealPath) {
  auto path = roots_.Resolve(root_ + "/./data.txt", "data.text.files[0]");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, root_ + "/data.txt");
}

TEST_F(PathRootsTest, RefusesAnAbsolutePathOutsideNamingFieldAndFlag) {
  auto path = roots_.Resolve(outside_ + "/secret.txt", "data.text.files[1]");
  EXPECT_EQ(path.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(path.status().message(),
            "data.text.files[1]: '" + outside_ +
                "/secret.txt' is outside --data_root (" + root_ + ")");
}

TEST_F(PathRootsTest, OutsideReadsAlikeWhetherOrNotThePathExists) {
  auto there = roots_.Resolve("/etc/shadow", "init_weights");
  auto missing = roots_.Resolve("/etc/no-such-file-here", "init_weights");
  EXPECT_EQ(there.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      there.status().message(),
      "init_weights: '/etc/shadow' is outside --data_root (" + root_ + ")");
  EXPECT_EQ(missing.status().message(),
            "init_weights: '/etc/no-such-file-here' is outside --data_root (" +
                root_ + ")");
}

TEST_F(PathRootsTest, RefusesDotDotOutOfTheRoot) {
  const std::string sneaky = root_ + "/../fs_outside/secret.txt";
  auto path = roots_.Resolve(sneaky, "data.idx.train_images");
  EXPECT_EQ(path.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(path.status().message().find("is outside --data_root"),
            std::string::npos);
}

TEST_F(PathRootsTest, RefusesASymlinkInsideThatLeadsOut) {
  ASSERT_EQ(
      symlink((outside_ + "/secret.txt").c_str(), (root_ + "/link").c_str()),
      0);
  auto path = roots_.Resolve(root_ + "/link", "data.text.files[0]");
  EXPECT_EQ(path.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(path.status().message(), "data.text.files[0]: '" + root_ +
                                         "/link' is outside --data_root (" +
                                         root_ + ")");
}

TEST_F(PathRootsTest, FollowsASymlinkThatLeadsIn) {
  ASSERT_EQ(
      symlink((root_ + "/data.txt").c_str(), (outside_ + "/into-root").c_str()),
      0);
  auto path = roots_.Resolve(outside_ + "/into-root", "data.text.files[0]");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, root_ + "/data.txt");
}

TEST_F(PathRootsTest, RefusesARelativePathOutside) {
  // The test's working directory is not under the root.
  auto path = roots_.Resolve("some/relative/file", "data.fashion_mnist_dir");
  EXPECT_EQ(path.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(PathRootsTest, AMissingPathInsideIsNotFound) {
  auto path = roots_.Resolve(root_ + "/missing.txt", "data.text.files[0]");
  EXPECT_EQ(path.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(path.status().message(),
            "data.text.files[0]: '" + root_ + "/missing.txt' does not exist");
}

TEST_F(PathRootsTest, NoRootRefusesEverything) {
  PathRoots none;
  auto path = none.Resolve(root_ + "/data.txt", "checkpoint.dir");
  EXPECT_EQ(path.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(path.status().message().find("(none set)"), std::string::npos);
}

TEST_F(PathRootsTest, SeveralRootsAndAnywhere) {
  auto both = PathRoots::Make("--data_root", {root_, outside_});
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE(both->Resolve(outside_ + "/secret.txt", "f").ok());
  EXPECT_EQ(both->Describe(), "--data_root (" + root_ + ", " + outside_ + ")");
  auto any = PathRoots::Anywhere().Resolve("relative/x", "f");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(*any, "relative/x");
}

TEST_F(PathRootsTest, MakeRefusesMissingDirectoriesAndFiles) {
  auto missing = PathRoots::Make("--checkpoint_root", {root_ + "/nope"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("--checkpoint_root: '" + root_ +
                                            "/nope'"),
            std::string::npos);
  auto file = PathRoots::Make("--data_root", {root_ + "/data.txt"});
  EXPECT_EQ(file.status().message(),
            "--data_root: '" + root_ + "/data.txt' is not a directory");
}

TEST_F(PathRootsTest, ResolveForCreateAllowsNewDirectoriesInsideOnly) {
  auto fresh =
      roots_.ResolveForCreate(root_ + "/ck/job-1/v00000002", "checkpoint.dir");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*fresh, root_ + "/ck/job-1/v00000002");
  auto out = roots_.ResolveForCreate(outside_ + "/ck", "checkpoint.dir");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kPermissionDenied);
  auto dots = roots_.ResolveForCreate(root_ + "/new/../../fs_outside/ck",
                                      "checkpoint.dir");
  EXPECT_EQ(dots.status().code(), absl::StatusCode::kPermissionDenied);
  ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/out").c_str()), 0);
  auto linked = roots_.ResolveForCreate(root_ + "/out/new", "checkpoint.dir");
  EXPECT_EQ(linked.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(PathRootsTest, OpensRegularFilesOnly) {
  auto file = OpenRegularFile(root_ + "/data.txt", roots_, "f");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size, 6);
  auto bytes = ReadOpenedFile(*file, "f", nullptr);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, "inside");

  auto dir = OpenRegularFile(root_, roots_, "data.text.files[0]");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dir.status().message(), "data.text.files[0]: '" + root_ +
                                        "' is a directory, not a regular file");
  auto zero =
      OpenRegularFile("/dev/zero", PathRoots::Anywhere(), "init_weights");
  EXPECT_EQ(zero.status().message(),
            "init_weights: '/dev/zero' is a character device, not a regular "
            "file");
}

TEST_F(PathRootsTest, AFifoIsRefusedPromptly) {
  const std::string fifo = root_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  auto file = OpenRegularFile(fifo, roots_, "data.text.files[0]");
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_LT(waited, std::chrono::seconds(2));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file.status().message(),
            "data.text.files[0]: '" + fifo + "' is a FIFO, not a regular file");
}

TEST_F(PathRootsTest, ReadRegularFileChecksTheSizeFirst) {
  WriteFile(root_ + "/big.txt", std::string(100, 'x'));
  auto big = ReadRegularFile(root_ + "/big.txt", roots_, "data.text.files[0]",
                             10, "--max_text_bytes");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(big.status().message(),
            "data.text.files[0]: '" + root_ +
                "/big.txt' holds 100 bytes, more than the 10 allowed "
                "(--max_text_bytes)");
}

TEST_F(PathRootsTest, AStoppedReadEndsCancelled) {
  std::atomic<bool> stop{true};
  auto read = ReadRegularFile(root_ + "/data.txt", roots_, "init_weights",
                              1 << 20, "limit", &stop);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kCancelled);
}

// While it lives, the calling thread works without CAP_DAC_OVERRIDE and
// CAP_DAC_READ_SEARCH in its effective set (they stay permitted, and come
// back at the end): root reads a mode-000 file only through them, so with
// them gone a file's mode binds root as it binds any user. For others the
// effective set holds neither, and nothing changes.
class WithoutDacOverride {
 public:
  WithoutDacOverride() {
    header_.version = _LINUX_CAPABILITY_VERSION_3;
    header_.pid = 0;  // The calling thread.
    if (syscall(SYS_capget, &header_, saved_) != 0) {
      error_ = errno;
      return;
    }
    __user_cap_data_struct dropped[2] = {saved_[0], saved_[1]};
    dropped[0].effective &=
        ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
    if (syscall(SYS_capset, &header_, dropped) != 0) error_ = errno;
  }
  ~WithoutDacOverride() {
    if (error_ == 0) syscall(SYS_capset, &header_, saved_);
  }
  WithoutDacOverride(const WithoutDacOverride&) = delete;
  WithoutDacOverride& operator=(const WithoutDacOverride&) = delete;

  // 0, or the errno of the capget or capset that failed.
  int error() const { return error_; }

 private:
  __user_cap_header_struct header_{};
  __user_cap_data_struct saved_[2]{};
  int error_ = 0;
};

// As root too (CI runs as root): the read runs without the capabilities
// that let root read a mode-000 file.
TEST_F(PathRootsTest, AnUnreadableFileInsideIsNamedWithoutItsContent) {
  const std::string shadow = root_ + "/shadow";
  WriteFile(shadow, "root:$6$secret");
  ASSERT_EQ(chmod(shadow.c_str(), 0), 0);
  WithoutDacOverride bound;
  ASSERT_EQ(bound.error(), 0) << std::strerror(bound.error());
  // The premise: this thread cannot open the file, whoever it runs as.
  const int fd = open(shadow.c_str(), O_RDONLY);
  const int open_errno = errno;
  if (fd >= 0) close(fd);
  ASSERT_LT(fd, 0) << "the test's thread can still read a mode-000 file";
  ASSERT_EQ(open_errno, EACCES) << std::strerror(open_errno);

  auto file = ReadRegularFile(shadow, roots_, "init_weights", 1 << 20, "limit");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kPermissionDenied)
      << file.status();
  EXPECT_EQ(file.status().message(),
            "init_weights: '" + shadow +
                "' cannot be read: " + std::strerror(EACCES));
  EXPECT_EQ(file.status().message().find("secret"), std::string::npos);
}

}  // namespace
}  // namespace aqueduct
