// FaultFileSystem (tests only): an in-memory FileSystem that can cut the
// bytes written at any offset (a crash mid-write: the bytes before the cut
// land, the call fails, later writes fail too), fail syncs or renames.
// Thread-safe.
#ifndef AQUEDUCT_COMMON_FAULT_FILE_SYSTEM_H_
#define AQUEDUCT_COMMON_FAULT_FILE_SYSTEM_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/file_system.h"

namespace aqueduct {

class FaultFileSystem final : public FileSystem {
 public:
  // Writes stop after `n` more bytes in all (the crash point).
  void CutWritesAfter(int64_t n) {
    absl::MutexLock lock(&mu_);
    budget_ = n;
  }
  void FailSyncs(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_syncs_ = fail;
  }
  void FailRenames(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_renames_ = fail;
  }
  std::string Contents(const std::string& path) {
    absl::MutexLock lock(&mu_);
    return files_[path];
  }
  void SetContents(const std::string& path, std::string data) {
    absl::MutexLock lock(&mu_);
    files_[path] = std::move(data);
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return absl::NotFoundError(path);
    return it->second;
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    absl::MutexLock lock(&mu_);
    files_[path].clear();
    return std::unique_ptr<WritableFile>(new File(this, path));
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    absl::MutexLock lock(&mu_);
    files_[path];
    return std::unique_ptr<WritableFile>(new File(this, path));
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    absl::MutexLock lock(&mu_);
    if (fail_renames_) return absl::UnavailableError("injected rename fault");
    auto it = files_.find(from);
    if (it == files_.end()) return absl::NotFoundError(from);
    files_[to] = std::move(it->second);
    files_.erase(from);
    return absl::OkStatus();
  }
  absl::Status SyncDir(const std::string&) override { return SyncStatus(); }

 private:
  class File final : public WritableFile {
   public:
    File(FaultFileSystem* fs, std::string path)
        : fs_(fs), path_(std::move(path)) {}
    absl::Status Append(absl::string_view data) override {
      return fs_->Write(path_, data);
    }
    absl::Status Sync() override { return fs_->SyncStatus(); }

   private:
    FaultFileSystem* fs_;
    const std::string path_;
  };

  absl::Status Write(const std::string& path, absl::string_view data) {
    absl::MutexLock lock(&mu_);
    const int64_t n = std::min<int64_t>(budget_, data.size());
    files_[path].append(data.data(), static_cast<size_t>(n));
    budget_ -= n;
    if (n < static_cast<int64_t>(data.size())) {
      return absl::UnavailableError(
          absl::StrCat(path, ": injected write fault"));
    }
    return absl::OkStatus();
  }
  absl::Status SyncStatus() {
    absl::MutexLock lock(&mu_);
    return fail_syncs_ ? absl::UnavailableError("injected sync fault")
                       : absl::OkStatus();
  }

  absl::Mutex mu_;
  std::map<std::string, std::string> files_ ABSL_GUARDED_BY(mu_);
  int64_t budget_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::max();
  bool fail_syncs_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_renames_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_FAULT_FILE_SYSTEM_H_
