// A small file-system seam (after LevelDB's Env): what durable state needs
// from the disk (read a file, write or append and sync, rename, sync a
// directory), behind an interface so that tests can cut a
// write at any byte or fail a sync (common/fault_file_system.h).
//
// Thread-safety: implementations are thread-safe; a WritableFile is used by
// one thread at a time.
#ifndef AQUEDUCT_COMMON_FILE_SYSTEM_H_
#define AQUEDUCT_COMMON_FILE_SYSTEM_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aqueduct {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all of `data` at the end (UNAVAILABLE naming the path and the
  // system's reason on failure; part of it may have been written).
  virtual absl::Status Append(absl::string_view data) = 0;
  // Makes what was appended durable (fdatasync).
  virtual absl::Status Sync() = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // The whole file; NOT_FOUND when it does not exist.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // A new empty file at `path` (an existing one is truncated).
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // `path` opened for appending (created if missing).
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) = 0;
  // Atomically replaces `to` with `from`.
  virtual absl::Status Rename(const std::string& from,
                              const std::string& to) = 0;
  // Makes the directory's entries (a rename into it) durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
};

// The POSIX file system. A process-wide stateless instance.
FileSystem* DefaultFileSystem();

// The directory part of `path` ("." for a bare name).
std::string DirName(const std::string& path);

// Writes `data` to `path` durably: a temporary file beside it, synced, then
// renamed over `path`, then the directory synced.
absl::Status WriteFileAtomically(FileSystem* fs, const std::string& path,
                                 absl::string_view data);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_FILE_SYSTEM_H_
