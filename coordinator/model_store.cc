#include "coordinator/model_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "zlib.h"

namespace aqueduct {

namespace {

constexpr char kSuffix[] = ".safetensors";
constexpr char kPartSuffix[] = ".safetensors.part";

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int e = errno;
  const std::string message =
      absl::StrCat(path, ": ", what, ": ", std::strerror(e));
  return e == ENOENT ? absl::NotFoundError(message)
                     : absl::UnavailableError(message);
}

uint32_t Crc32(uint32_t crc, absl::string_view data) {
  return static_cast<uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

// Job ids name files: letters, digits, '-', '_' and '.', not starting with
// '.', at most 128 characters.
bool IsPlainName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

// Closes a file descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  const int fd_;
};

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("write", path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Reads up to `n` bytes at `offset` into `out`; fewer only at the end of
// the file.
absl::StatusOr<size_t> ReadAt(int fd, int64_t offset, size_t n, char* out,
                              const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got =
        pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Errno("read", path);
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open directory", dir);
  FdCloser closer(fd);
  if (fsync(fd) != 0) return Errno("sync directory", dir);
  return absl::OkStatus();
}

// Size, modification time and inode of the open file `fd`.
absl::Status Describe(int fd, const std::string& path, int64_t* bytes,
                      int64_t* mtime_ns, uint64_t* inode) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno("stat", path);
  *bytes = static_cast<int64_t>(st.st_size);
  *mtime_ns =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  *inode = static_cast<uint64_t>(st.st_ino);
  return absl::OkStatus();
}

absl::Status ChangedWhileRead(const std::string& path) {
  return absl::DataLossError(
      absl::StrCat(path, ": the model file changed while it was read"));
}

// Removes the .part files a previous process left in `dir`.
void RemoveLeftoverParts(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!absl::EndsWith(name, kPartSuffix)) continue;
    const std::string path = absl::StrCat(dir, "/", name);
    if (unlink(path.c_str()) == 0) {
      AQ_LOG_INFO("removed {}, an upload a previous coordinator left", path);
    }
  }
  closedir(d);
}

}  // namespace

// ---- ModelUpload.

ModelUpload::ModelUpload(ModelStore* store, std::string job_id,
                         std::string path, int fd, int64_t total_bytes,
                         uint32_t crc32)
    : store_(store),
      job_id_(std::move(job_id)),
      path_(std::move(path)),
      fd_(fd),
      total_bytes_(total_bytes),
      declared_crc32_(crc32) {}

ModelUpload::~ModelUpload() {
  if (!over_) Abandon();
}

void ModelUpload::Abandon() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  const std::string part = path_ + ".part";
  (void)unlink(part.c_str());
  over_ = true;
  store_->EndUpload(job_id_);
}

absl::Status ModelUpload::Fail(absl::Status status) {
  Abandon();
  return status;
}

absl::Status ModelUpload::Append(int64_t offset, absl::string_view data) {
  if (over_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the model upload of job ", job_id_, " is over"));
  }
  if (offset != received_) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "model upload of job ", job_id_, ": a chunk at offset ", offset,
        " where ", received_, " was expected (chunks must be contiguous)")));
  }
  if (static_cast<uint64_t>(data.size()) >
      static_cast<uint64_t>(total_bytes_ - received_)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "model upload of job ", job_id_, ": ", data.size(), " bytes at offset ",
        offset, " run past the declared size ", total_bytes_)));
  }
  if (absl::Status s = WriteAll(fd_, data, path_ + ".part"); !s.ok()) {
    return Fail(s);
  }
  received_ += static_cast<int64_t>(data.size());
  crc32_ = Crc32(crc32_, data);
  return absl::OkStatus();
}

absl::StatusOr<StoredModel> ModelUpload::Commit() {
  if (over_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the model upload of job ", job_id_, " is over"));
  }
  if (received_ != total_bytes_) {
    return Fail(absl::DataLossError(
        absl::StrCat("model upload of job ", job_id_, " ended after ",
                     received_, " of its ", total_bytes_, " bytes")));
  }
  if (crc32_ != declared_crc32_) {
    return Fail(absl::DataLossError(absl::StrCat(
        "model upload of job ", job_id_, ": the bytes received have CRC-32 ",
        crc32_, ", not the declared ", declared_crc32_)));
  }
  const std::string part = path_ + ".part";
  if (fdatasync(fd_) != 0) return Fail(Errno("sync", part));
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) return Fail(Errno("close", part));
  if (rename(part.c_str(), path_.c_str()) != 0) {
    return Fail(Errno(absl::StrCat("rename to ", path_), part));
  }
  if (absl::Status s = SyncDir(store_->options().dir); !s.ok()) {
    return Fail(s);
  }
  store_->RememberCrc(path_, crc32_);
  over_ = true;
  store_->EndUpload(job_id_);
  return StoredModel{path_, total_bytes_, crc32_};
}

// ---- ModelStore.

absl::StatusOr<std::unique_ptr<ModelStore>> ModelStore::Open(
    ModelStoreOptions options) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError("the model store needs a directory");
  }
  if (mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Errno("create directory", options.dir);
  }
  struct stat st;
  if (stat(options.dir.c_str(), &st) != 0) return Errno("stat", options.dir);
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.dir, ": not a directory"));
  }
  RemoveLeftoverParts(options.dir);
  return std::unique_ptr<ModelStore>(new ModelStore(std::move(options)));
}

std::string ModelStore::PathFor(const std::string& job_id) const {
  return absl::StrCat(options_.dir, "/", job_id, kSuffix);
}

absl::StatusOr<std::unique_ptr<ModelUpload>> ModelStore::BeginUpload(
    const std::string& job_id, int64_t total_bytes, uint32_t crc32) {
  if (!IsPlainName(job_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model upload: bad job id '", job_id, "'"));
  }
  if (total_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model upload of job ", job_id,
                     ": total_bytes must be positive, got ", total_bytes));
  }
  if (total_bytes > options_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the model of job ", job_id, " is ", total_bytes,
        " bytes, over the coordinator's limit of ", options_.max_bytes));
  }
  {
    absl::MutexLock lock(&mu_);
    if (!uploading_.insert(job_id).second) {
      return absl::AbortedError(absl::StrCat("a model upload of job ", job_id,
                                             " is already in progress"));
    }
  }
  const std::string path = PathFor(job_id);
  const std::string part = path + ".part";
  const int fd =
      open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    absl::Status s = Errno("create", part);
    EndUpload(job_id);
    return s;
  }
  return std::unique_ptr<ModelUpload>(
      new ModelUpload(this, job_id, path, fd, total_bytes, crc32));
}

void ModelStore::EndUpload(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  uploading_.erase(job_id);
}

void ModelStore::RememberCrc(const std::string& path, uint32_t crc32) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  FdCloser closer(fd);
  FileCrc entry;
  if (!Describe(fd, path, &entry.bytes, &entry.mtime_ns, &entry.inode).ok()) {
    return;
  }
  entry.crc32 = crc32;
  absl::MutexLock lock(&mu_);
  crcs_[path] = entry;
}

absl::StatusOr<uint32_t> ModelStore::CrcOf(const std::string& path, int fd,
                                           FileCrc now) {
  {
    absl::MutexLock lock(&mu_);
    auto it = crcs_.find(path);
    if (it != crcs_.end() && it->second.bytes == now.bytes &&
        it->second.mtime_ns == now.mtime_ns && it->second.inode == now.inode) {
      return it->second.crc32;
    }
  }
  std::string buffer(static_cast<size_t>(options_.chunk_bytes), '\0');
  uint32_t crc = 0;
  for (int64_t offset = 0; offset < now.bytes;) {
    const size_t want = static_cast<size_t>(
        std::min<int64_t>(options_.chunk_bytes, now.bytes - offset));
    ASSIGN_OR_RETURN(const size_t got,
                     ReadAt(fd, offset, want, buffer.data(), path));
    if (got < want) return ChangedWhileRead(path);
    crc = Crc32(crc, absl::string_view(buffer.data(), got));
    offset += static_cast<int64_t>(got);
  }
  now.crc32 = crc;
  absl::MutexLock lock(&mu_);
  crcs_[path] = now;
  return crc;
}

absl::Status ModelStore::Read(
    const std::string& path, const std::function<bool()>& cancelled,
    const std::function<bool(const v1::ModelChunk&)>& write) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  FdCloser closer(fd);
  FileCrc before;
  RETURN_IF_ERROR(
      Describe(fd, path, &before.bytes, &before.mtime_ns, &before.inode));
  ASSIGN_OR_RETURN(const uint32_t crc, CrcOf(path, fd, before));
  v1::ModelChunk chunk;
  chunk.set_total_bytes(before.bytes);
  chunk.set_crc32(crc);
  uint32_t sent_crc = 0;
  int64_t offset = 0;
  // At least one chunk, so that the client learns the size of even an
  // empty file.
  do {
    const size_t want = static_cast<size_t>(
        std::min<int64_t>(options_.chunk_bytes, before.bytes - offset));
    std::string* data = chunk.mutable_data();
    data->resize(want);
    ASSIGN_OR_RETURN(const size_t got,
                     ReadAt(fd, offset, want, data->data(), path));
    if (got < want) return ChangedWhileRead(path);
    sent_crc = Crc32(sent_crc, *data);
    chunk.set_offset(offset);
    offset += static_cast<int64_t>(got);
    if (cancelled() || !write(chunk)) {
      return absl::CancelledError("the client went away");
    }
  } while (offset < before.bytes);
  FileCrc after;
  RETURN_IF_ERROR(
      Describe(fd, path, &after.bytes, &after.mtime_ns, &after.inode));
  if (sent_crc != crc || after.bytes != before.bytes ||
      after.mtime_ns != before.mtime_ns) {
    return ChangedWhileRead(path);
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
