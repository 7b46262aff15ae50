// FileRendezvousStore: a RendezvousStore in a directory shared by the
// processes of one machine (tests that run ranks as separate processes, and
// local multi-process runs without a coordinator). A key is a file named by
// the key's hex encoding; Set writes a temporary file and renames it into
// place, so a reader never sees a partial value; Get polls every 5 ms until
// the file exists or the wait ends. Thread-safe and process-safe.
#ifndef AQUEDUCT_COMMON_COMM_FILE_STORE_H_
#define AQUEDUCT_COMMON_COMM_FILE_STORE_H_

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/comm/rendezvous_store.h"

namespace aqueduct {

class FileRendezvousStore final : public RendezvousStore {
 public:
  // `directory` must exist.
  explicit FileRendezvousStore(std::string directory)
      : directory_(std::move(directory)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    const std::string path = PathOf(key);
    const std::string temporary =
        absl::StrCat(path, ".tmp.", getpid(), ".", counter_++);
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      if (!out.good()) {
        return absl::UnavailableError(
            absl::StrCat("store key '", key, "': cannot write ", temporary));
      }
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      std::remove(temporary.c_str());
      return absl::UnavailableError(
          absl::StrCat("store key '", key, "': cannot rename into ", path));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration wait) override {
    const std::string path = PathOf(key);
    const absl::Time deadline = absl::Now() + wait;
    while (true) {
      std::ifstream in(path, std::ios::binary);
      if (in.is_open()) {
        std::ostringstream value;
        value << in.rdbuf();
        return value.str();
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "store key '", key, "' was not set in time (", directory_, ")"));
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

 private:
  std::string PathOf(const std::string& key) const {
    return absl::StrCat(directory_, "/", absl::BytesToHexString(key));
  }

  const std::string directory_;
  std::atomic<int> counter_{0};
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_FILE_STORE_H_
