// A small file-system seam (after LevelDB's Env): what durable state needs
// from the disk (read a file, write or append and sync, rename, sync a
// directory), behind an interface so that tests can cut a
// write at any byte or fail a sync (common/fault_file_system.h).
//
// And the one way a daemon opens a file that a job spec or a client names
// (data, init_weights, checkpoints, --resume manifests): only under the
// directories its operator allowed (PathRoots: the worker's --data_root and
// --checkpoint_root, the coordinator's --checkpoint_root), only a regular
// file (opened non-blocking, so that a FIFO or a device cannot hang the
// open; checked with fstat on the open descriptor, not stat-then-open), and
// only up to a size known before anything is allocated. A path outside the
// roots is refused alike whether it exists or not, and no error quotes a
// file's bytes.
//
// Thread-safety: implementations are thread-safe; a WritableFile is used by
// one thread at a time. PathRoots and FileAccess are immutable values; the
// functions are thread-safe.
#ifndef AQUEDUCT_COMMON_FILE_SYSTEM_H_
#define AQUEDUCT_COMMON_FILE_SYSTEM_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

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

// The POSIX file system, except that a new file is created mode 0600
// whatever the process's umask (and a stale one is made 0600): for files
// that show a job to whoever can read them (its log, its trace). A
// process-wide stateless instance.
FileSystem* PrivateFileSystem();

// Creates `dir` (and missing parents) and makes it mode 0700, also when it
// exists already (as older versions left it, 0755).
std::error_code MakePrivateDirectory(const std::string& dir);

// The directory part of `path` ("." for a bare name).
std::string DirName(const std::string& path);

// Appends `data` to `path` (created mode 0600 if missing), without a
// sync. UNAVAILABLE naming the path and the error.
absl::Status AppendToFile(const std::string& path, absl::string_view data);

// Syncs the existing file at `path` to disk (open, fsync, close; a file
// another handle appends to). UNAVAILABLE naming the path and the error.
absl::Status SyncExistingFile(const std::string& path);

// Writes `data` to `path` durably: a temporary file beside it, synced, then
// renamed over `path`, then the directory synced.
absl::Status WriteFileAtomically(FileSystem* fs, const std::string& path,
                                 absl::string_view data);

// ---- Files a client names ----

// An open file descriptor, closed when destroyed. Movable, not copyable.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  // The descriptor, no longer owned (-1 when none).
  int release();

 private:
  int fd_ = -1;
};

// The directories under which a daemon may open what a client names.
class PathRoots {
 public:
  // No directory: every path is refused.
  PathRoots() = default;
  // Every path is allowed, as given: a command-line tool (`aq train-local`)
  // reading its own user's files.
  static PathRoots Anywhere();
  // The directories `dirs` (relative ones against the working directory;
  // each resolved to its real path), named `flag` ("--data_root") in
  // errors. INVALID_ARGUMENT naming the flag and the directory when one is
  // empty, does not exist or is not a directory.
  static absl::StatusOr<PathRoots> Make(absl::string_view flag,
                                        const std::vector<std::string>& dirs);

  bool anywhere() const { return anywhere_; }
  // The roots' real paths.
  const std::vector<std::string>& dirs() const { return real_; }
  // "--data_root (/a, /b)", or "--data_root (none set)".
  std::string Describe() const;

  // The real path of the existing `path` when it lies under a root (or is
  // one); Anywhere(): `path` as given. Errors:
  //   PERMISSION_DENIED "<field>: '<path>' is outside --data_root (<roots>)"
  //     for a path outside every root, whether or not it exists: absolute,
  //     relative to the working directory, through "..", or through a
  //     symbolic link that leads out;
  //   NOT_FOUND "<field>: '<path>' does not exist" for a missing path
  //     inside a root;
  //   INVALID_ARGUMENT for an empty path or one holding a NUL byte.
  absl::StatusOr<std::string> Resolve(const std::string& path,
                                      absl::string_view field) const;
  // As Resolve, for a directory that may not exist yet (mkdir -p makes
  // it): the real path of its deepest existing ancestor, then the rest
  // of the path with "." and ".." resolved by name. Anywhere(): `path`.
  // (A symbolic link planted below that ancestor between this check and
  // the mkdir, by someone who may write under the root, is not guarded
  // against: the roots are the operator's directories.)
  absl::StatusOr<std::string> ResolveForCreate(const std::string& path,
                                               absl::string_view field) const;
  // Whether the absolute, real path `real` lies under a root.
  bool Contains(absl::string_view real) const;
  // The PERMISSION_DENIED error of a path outside the roots.
  absl::Status Outside(const std::string& path, absl::string_view field) const;

 private:
  // Whether `absolute` (normalised by name) lies under a root as given or
  // as resolved.
  bool LexicallyInside(const std::string& absolute) const;

  bool anywhere_ = false;
  std::string flag_;
  std::vector<std::string> given_;  // Absolute, normalised by name.
  std::vector<std::string> real_;   // realpath(3) of each.
};

// The default of --max_text_bytes: what the text files of one job may hold
// in all.
inline constexpr int64_t kDefaultMaxTextBytes = int64_t{1} << 30;

// What a daemon lets a job open: data files and init_weights under `data`,
// checkpoints under `checkpoints`, at most `max_text_bytes` of text per
// job; long reads end with CANCELLED once *stop (when set) is true. The
// default value allows nothing.
struct FileAccess {
  PathRoots data;
  PathRoots checkpoints;
  int64_t max_text_bytes = kDefaultMaxTextBytes;
  const std::atomic<bool>* stop = nullptr;

  // Every path, no size limit: a command-line tool reading its user's own
  // files.
  static FileAccess Anywhere();
};

// A regular file opened for reading.
struct OpenedFile {
  ScopedFd fd;
  // Its size when opened (fstat).
  int64_t size = 0;
  // The path opened (resolved under the roots).
  std::string path;
};

// Opens `path` under `roots` for reading: O_RDONLY | O_CLOEXEC | O_NOCTTY |
// O_NONBLOCK (a FIFO or a device cannot block the open), O_NOFOLLOW on a
// resolved path, then fstat on the descriptor. PathRoots::Resolve's errors;
// PERMISSION_DENIED "<field>: '<path>' cannot be read: <reason>";
// INVALID_ARGUMENT "<field>: '<path>' is a directory (a FIFO, a character
// device, ...), not a regular file".
absl::StatusOr<OpenedFile> OpenRegularFile(const std::string& path,
                                           const PathRoots& roots,
                                           absl::string_view field);

// All `file.size` bytes of `file` from its start, read in chunks; CANCELLED
// when *stop (if set) becomes true between chunks; DATA_LOSS if the file is
// shorter than when it was opened; UNAVAILABLE for a read error. Errors
// start with "<field>: '<path>'".
absl::StatusOr<std::string> ReadOpenedFile(const OpenedFile& file,
                                           absl::string_view field,
                                           const std::atomic<bool>* stop);

// OpenRegularFile, then ReadOpenedFile when the file holds at most
// `max_bytes`: FAILED_PRECONDITION "<field>: '<path>' holds N bytes, more
// than the M allowed (<limit>)" otherwise, before anything is read.
absl::StatusOr<std::string> ReadRegularFile(
    const std::string& path, const PathRoots& roots, absl::string_view field,
    int64_t max_bytes, absl::string_view limit,
    const std::atomic<bool>* stop = nullptr);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_FILE_SYSTEM_H_
