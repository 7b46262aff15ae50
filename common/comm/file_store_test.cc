// FileRendezvousStore between two processes.
#include "common/comm/file_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir =
      absl::StrCat(base != nullptr ? base : "/tmp", "/file_store_XXXXXX");
  return mkdtemp(dir.data()) != nullptr ? dir : "";
}

TEST(FileRendezvousStoreTest, ValuesCrossProcesses) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The other process: answers the parent's key with its own.
    FileRendezvousStore store(dir);
    auto question = store.Get("job/q", absl::Seconds(10));
    const bool ok =
        question.ok() && store.Set("job/a", *question + " answered").ok();
    _exit(ok ? 0 : 1);
  }
  FileRendezvousStore store(dir);
  const std::string binary("\0\x01 key/with/slashes", 20);
  ASSERT_TRUE(store.Set("job/q", binary).ok());
  auto answer = store.Get("job/a", absl::Seconds(10));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, binary + " answered");
}

TEST(FileRendezvousStoreTest, MissingKeyTimesOutNamingIt) {
  const std::string dir = TempDir();
  FileRendezvousStore store(dir);
  const absl::Time start = absl::Now();
  auto v = store.Get("nccl_unique_id", absl::Milliseconds(50));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("'nccl_unique_id'"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace aqueduct
