#include "common/file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

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

}  // namespace

FileSystem* DefaultFileSystem() {
  static PosixFileSystem* fs = new PosixFileSystem();
  return fs;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
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

}  // namespace aqueduct
