#include "common/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace aqueduct {

namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int e = errno;
  const std::string message =
      absl::StrCat(path, ": ", what, ": ", std::strerror(e));
  return e == ENOENT ? absl::NotFoundError(message)
                     : absl::UnavailableError(message);
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override { close(fd_); }

  absl::Status Append(absl::string_view data) override {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = write(fd_, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("write", path_);
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fdatasync(fd_) != 0) return Errno("sync", path_);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  const int fd_;
};

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno("open", path);
    std::string out;
    char buffer[1 << 16];
    while (true) {
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        absl::Status s = Errno("read", path);
        close(fd);
        return s;
      }
      if (n == 0) break;
      out.append(buffer, static_cast<size_t>(n));
    }
    close(fd);
    return out;
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    return Open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    return Open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC);
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0) {
      return Errno(absl::StrCat("rename from ", from), to);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno("open directory", dir);
    const int rc = fsync(fd);
    absl::Status s = rc == 0 ? absl::OkStatus() : Errno("sync directory", dir);
    close(fd);
    return s;
  }

 private:
  static absl::StatusOr<std::unique_ptr<WritableFile>> Open(
      const std::string& path, int flags) {
    const int fd = open(path.c_str(), flags, 0644);
    if (fd < 0) return Errno("open", path);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
};

// Reads of a client's file go in chunks of this size, checking the stop
// flag between them.
constexpr size_t kReadChunk = size_t{4} << 20;

// `path` made absolute against the working directory, with empty and "."
// components dropped and ".." resolved by name (no file system access
// beyond getcwd).
std::string NormalizeByName(const std::string& path) {
  std::string absolute = path;
  if (absolute.empty() || absolute[0] != '/') {
    char* cwd = getcwd(nullptr, 0);
    absolute = absl::StrCat(cwd != nullptr ? cwd : "", "/", path);
    std::free(cwd);
  }
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(absolute, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

// Whether `path` is `root` or lies below it (both absolute and normalised).
bool Under(absl::string_view path, absl::string_view root) {
  if (root == "/") return absl::StartsWith(path, "/");
  return path == root ||
         (absl::StartsWith(path, root) && path.size() > root.size() &&
          path[root.size()] == '/');
}

// realpath(3) of `path`; nullopt (errno set) when it fails.
std::optional<std::string> RealPath(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) return std::nullopt;
  std::string out(real);
  std::free(real);
  return out;
}

absl::Status CheckPathText(const std::string& path, absl::string_view field) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  }
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": the path holds a NUL byte"));
  }
  return absl::OkStatus();
}

// "a directory", "a FIFO", ... for what is not a regular file.
const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "of an unknown kind";
}

// The error of an open(2) of `path` (errno) that failed.
absl::Status OpenError(const std::string& path, absl::string_view field,
                       bool resolved) {
  const int e = errno;
  const std::string what = absl::StrCat(field, ": '", path, "'");
  if (e == ENOENT) {
    return absl::NotFoundError(absl::StrCat(what, " does not exist"));
  }
  if (e == ELOOP && resolved) {
    // A symbolic link appeared where Resolve found none.
    return absl::PermissionDeniedError(
        absl::StrCat(what, " changed into a symbolic link while opened"));
  }
  if (e == EACCES || e == EPERM) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " cannot be read: ", std::strerror(e)));
  }
  return absl::UnavailableError(
      absl::StrCat(what, " cannot be opened: ", std::strerror(e)));
}

}  // namespace

FileSystem* DefaultFileSystem() {
  static PosixFileSystem* fs = new PosixFileSystem();
  return fs;
}

namespace {

class PrivatePosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return base_->ReadFile(path);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    // The base's O_TRUNC open keeps the mode set here.
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0) {
      const int err = errno;
      if (fd >= 0) close(fd);
      return absl::UnavailableError(
          absl::StrCat("create ", path, ": ", std::strerror(err)));
    }
    close(fd);
    return base_->NewWritableFile(path);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    return base_->NewAppendableFile(path);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return base_->Rename(from, to);
  }
  absl::Status SyncDir(const std::string& dir) override {
    return base_->SyncDir(dir);
  }

 private:
  FileSystem* const base_ = DefaultFileSystem();
};

}  // namespace

FileSystem* PrivateFileSystem() {
  static PrivatePosixFileSystem* fs = new PrivatePosixFileSystem();
  return fs;
}

std::error_code MakePrivateDirectory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!ec) {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace, ec);
  }
  return ec;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status AppendToFile(const std::string& path, absl::string_view data) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return absl::UnavailableError(
          absl::StrCat("write ", path, ": ", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::Status SyncExistingFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("fsync ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(FileSystem* fs, const std::string& path,
                                 absl::string_view data) {
  const std::string temporary = path + ".tmp";
  {
    auto file = fs->NewWritableFile(temporary);
    if (!file.ok()) return file.status();
    if (absl::Status s = (*file)->Append(data); !s.ok()) return s;
    if (absl::Status s = (*file)->Sync(); !s.ok()) return s;
  }
  if (absl::Status s = fs->Rename(temporary, path); !s.ok()) return s;
  return fs->SyncDir(DirName(path));
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) close(fd_);
}

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

int ScopedFd::release() { return std::exchange(fd_, -1); }

PathRoots PathRoots::Anywhere() {
  PathRoots roots;
  roots.anywhere_ = true;
  return roots;
}

absl::StatusOr<PathRoots> PathRoots::Make(
    absl::string_view flag, const std::vector<std::string>& dirs) {
  PathRoots roots;
  roots.flag_ = std::string(flag);
  for (const std::string& dir : dirs) {
    if (dir.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": an empty directory name"));
    }
    const std::optional<std::string> real = RealPath(dir);
    if (!real.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", dir, "': ", std::strerror(errno)));
    }
    struct stat st;
    if (stat(real->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", dir, "' is not a directory"));
    }
    roots.given_.push_back(NormalizeByName(dir));
    roots.real_.push_back(*real);
  }
  return roots;
}

std::string PathRoots::Describe() const {
  if (anywhere_) return "anywhere";
  const std::string flag = flag_.empty() ? "the allowed roots" : flag_;
  if (given_.empty()) return absl::StrCat(flag, " (none set)");
  return absl::StrCat(flag, " (", absl::StrJoin(given_, ", "), ")");
}

bool PathRoots::Contains(absl::string_view real) const {
  if (anywhere_) return true;
  return std::any_of(real_.begin(), real_.end(), [&](const std::string& root) {
    return Under(real, root);
  });
}

bool PathRoots::LexicallyInside(const std::string& absolute) const {
  for (size_t i = 0; i < given_.size(); ++i) {
    if (Under(absolute, given_[i]) || Under(absolute, real_[i])) return true;
  }
  return false;
}

absl::Status PathRoots::Outside(const std::string& path,
                                absl::string_view field) const {
  return absl::PermissionDeniedError(
      absl::StrCat(field, ": '", path, "' is outside ", Describe()));
}

absl::StatusOr<std::string> PathRoots::Resolve(const std::string& path,
                                               absl::string_view field) const {
  if (absl::Status s = CheckPathText(path, field); !s.ok()) return s;
  if (anywhere_) return path;
  // Outside a root by name, every failure reads alike: whether the path
  // exists there is not for a client to learn.
  const bool inside = LexicallyInside(NormalizeByName(path));
  const std::optional<std::string> real = RealPath(path);
  if (!real.has_value()) {
    const int e = errno;
    if (!inside) return Outside(path, field);
    if (e == ENOENT || e == ENOTDIR) {
      return absl::NotFoundError(
          absl::StrCat(field, ": '", path, "' does not exist"));
    }
    return absl::PermissionDeniedError(absl::StrCat(
        field, ": '", path, "' cannot be resolved: ", std::strerror(e)));
  }
  if (!Contains(*real)) return Outside(path, field);
  return *real;
}

absl::StatusOr<std::string> PathRoots::ResolveForCreate(
    const std::string& path, absl::string_view field) const {
  if (absl::Status s = CheckPathText(path, field); !s.ok()) return s;
  if (anywhere_) return path;
  const std::string absolute = NormalizeByName(path);
  const bool inside = LexicallyInside(absolute);
  std::string existing = absolute;
  std::string rest;  // The missing components below `existing`.
  std::optional<std::string> real;
  while (!(real = RealPath(existing)).has_value()) {
    if (errno != ENOENT || existing == "/") {
      if (!inside) return Outside(path, field);
      return absl::UnavailableError(absl::StrCat(
          field, ": '", path, "' cannot be created: ", std::strerror(errno)));
    }
    const size_t slash = existing.find_last_of('/');
    rest = rest.empty() ? existing.substr(slash + 1)
                        : absl::StrCat(existing.substr(slash + 1), "/", rest);
    existing = slash == 0 ? "/" : existing.substr(0, slash);
  }
  if (!rest.empty()) {
    *real =
        *real == "/" ? absl::StrCat("/", rest) : absl::StrCat(*real, "/", rest);
  }
  if (!Contains(*real)) return Outside(path, field);
  return *real;
}

FileAccess FileAccess::Anywhere() {
  FileAccess access;
  access.data = PathRoots::Anywhere();
  access.checkpoints = PathRoots::Anywhere();
  access.max_text_bytes = std::numeric_limits<int64_t>::max();
  return access;
}

absl::StatusOr<OpenedFile> OpenRegularFile(const std::string& path,
                                           const PathRoots& roots,
                                           absl::string_view field) {
  absl::StatusOr<std::string> resolved = roots.Resolve(path, field);
  if (!resolved.ok()) return resolved.status();
  const bool checked = !roots.anywhere();
  int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  if (checked) flags |= O_NOFOLLOW;
  OpenedFile file;
  file.path = *std::move(resolved);
  file.fd = ScopedFd(open(file.path.c_str(), flags));
  if (file.fd.get() < 0) return OpenError(path, field, checked);
  if (checked) {
    // What was opened, whatever a directory on the way was renamed to in
    // the meantime, must lie under a root too.
    const std::optional<std::string> opened =
        RealPath(absl::StrCat("/proc/self/fd/", file.fd.get()));
    if (opened.has_value() && !roots.Contains(*opened)) {
      return roots.Outside(path, field);
    }
  }
  struct stat st;
  if (fstat(file.fd.get(), &st) != 0) {
    return absl::UnavailableError(
        absl::StrCat(field, ": '", path, "': stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' is ",
                                                   KindOf(st.st_mode),
                                                   ", not a regular file"));
  }
  file.size = static_cast<int64_t>(st.st_size);
  return file;
}

absl::StatusOr<std::string> ReadOpenedFile(const OpenedFile& file,
                                           absl::string_view field,
                                           const std::atomic<bool>* stop) {
  std::string out(static_cast<size_t>(file.size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(absl::StrCat(
          field, ": reading '", file.path, "' stopped (the job was stopped)"));
    }
    const size_t want = std::min(kReadChunk, out.size() - done);
    const ssize_t n =
        pread(file.fd.get(), out.data() + done, want, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat(
          field, ": '", file.path, "': read: ", std::strerror(errno)));
    }
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat(field, ": '", file.path, "' ended after ", done,
                       " of the ", file.size, " bytes it held when opened"));
    }
    done += static_cast<size_t>(n);
  }
  return out;
}

absl::StatusOr<std::string> ReadRegularFile(
    const std::string& path, const PathRoots& roots, absl::string_view field,
    int64_t max_bytes, absl::string_view limit, const std::atomic<bool>* stop) {
  absl::StatusOr<OpenedFile> file = OpenRegularFile(path, roots, field);
  if (!file.ok()) return file.status();
  if (file->size > max_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": '", path, "' holds ", file->size, " bytes, more than the ",
        max_bytes, " allowed (", limit, ")"));
  }
  return ReadOpenedFile(*file, field, stop);
}

}  // namespace aqueduct
