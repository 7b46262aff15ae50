#include "coordinator/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("journal ", path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const std::string& bytes,
                      const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// A 4-byte little-endian length, then the record.
std::string Frame(const v1::JournalRecord& record) {
  const std::string body = record.SerializeAsString();
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + body;
}

}  // namespace

absl::StatusOr<JournalContents> JobJournal::Read(const std::string& path) {
  JournalContents contents;
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    if (access(path.c_str(), F_OK) != 0) return contents;  // No journal yet.
    return Errno("open", path);
  }
  std::ostringstream all;
  all << in.rdbuf();
  const std::string bytes = all.str();
  size_t at = 0;
  while (at + 4 <= bytes.size()) {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) {
      n |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + i]))
           << (8 * i);
    }
    if (at + 4 + n > bytes.size()) break;
    v1::JournalRecord record;
    if (!record.ParseFromArray(bytes.data() + at + 4, static_cast<int>(n))) {
      break;
    }
    contents.records.push_back(std::move(record));
    at += 4 + n;
  }
  contents.ignored_bytes = static_cast<int64_t>(bytes.size() - at);
  return contents;
}

absl::StatusOr<std::unique_ptr<JobJournal>> JobJournal::Create(
    const std::string& path, const std::vector<v1::JournalRecord>& records) {
  const std::string temporary = path + ".tmp";
  {
    const int fd =
        open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("create", temporary);
    std::string bytes;
    for (const v1::JournalRecord& r : records) bytes += Frame(r);
    absl::Status s = WriteAll(fd, bytes, temporary);
    if (s.ok() && fdatasync(fd) != 0) s = Errno("sync", temporary);
    close(fd);
    if (!s.ok()) return s;
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    return Errno("rename into place", path);
  }
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  return std::unique_ptr<JobJournal>(new JobJournal(path, fd));
}

JobJournal::~JobJournal() { close(fd_); }

absl::Status JobJournal::Append(const v1::JournalRecord& record) {
  RETURN_IF_ERROR(WriteAll(fd_, Frame(record), path_));
  if (fdatasync(fd_) != 0) return Errno("sync", path_);
  return absl::OkStatus();
}

}  // namespace aqueduct
