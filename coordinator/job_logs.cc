#include "coordinator/job_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "google/protobuf/util/json_util.h"

namespace aqueduct {

namespace {

constexpr char kSuffix[] = ".log";

std::string Capped(std::string text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  text.resize(end);
  return text + "...";
}

std::string ToJsonLine(const v1::LogLine& line) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(line, &json, options);
  return json + "\n";
}

}  // namespace

bool IsFileSafeJobId(const std::string& job_id) {
  if (job_id.empty() || job_id.size() > 128 || job_id[0] == '.') return false;
  for (char c : job_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

JobLogStore::JobLogStore(JobLogOptions options)
    : options_(std::move(options)) {}

absl::Status JobLogStore::Open(const std::string& dir) {
  std::error_code ec = MakePrivateDirectory(dir);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("job logs directory ", dir, ": ", ec.message()));
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= sizeof(kSuffix) - 1 ||
        name.compare(name.size() - 4, 4, kSuffix) != 0) {
      continue;
    }
    const std::string job = name.substr(0, name.size() - 4);
    if (!IsFileSafeJobId(job)) continue;
    // Written 0644 by older versions.
    std::error_code mode_error;
    std::filesystem::permissions(entry.path(),
                                 std::filesystem::perms::owner_read |
                                     std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::replace,
                                 mode_error);
    LoadFile(entry.path().string(), job);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("job logs directory ", dir, ": ", ec.message()));
  }
  absl::MutexLock lock(&mu_);
  dir_ = dir;
  return absl::OkStatus();
}

void JobLogStore::LoadFile(const std::string& path, const std::string& job) {
  std::ifstream in(path);
  std::string text;
  Log log;
  int64_t bad = 0;
  while (std::getline(in, text)) {
    log.file_bytes += static_cast<int64_t>(text.size()) + 1;
    v1::LogLine line;
    if (!google::protobuf::util::JsonStringToMessage(text, &line).ok() ||
        line.seq() <= log.last_seq) {
      ++bad;
      continue;
    }
    log.last_seq = line.seq();
    log.lines.push_back(std::move(line));
    if (log.lines.size() > options_.max_lines_per_job) log.lines.pop_front();
  }
  if (bad > 0) {
    AQ_LOG_WARN("job log {}: skipped {} line(s) that did not parse", path, bad);
  }
  absl::MutexLock lock(&mu_);
  logs_[job] = std::move(log);
}

std::string JobLogStore::PathLocked(const std::string& job_id) const {
  return absl::StrCat(dir_, "/", job_id, kSuffix);
}

void JobLogStore::WriteLocked(const std::string& job_id, Log& log,
                              const std::string& text) {
  if (dir_.empty() || !IsFileSafeJobId(job_id)) return;
  const std::string path = PathLocked(job_id);
  absl::Status s;
  if (log.file_bytes + static_cast<int64_t>(text.size()) >
      options_.max_file_bytes) {
    // Rewrite with the lines kept in memory (they include `text`'s).
    std::string all;
    for (const v1::LogLine& line : log.lines) all += ToJsonLine(line);
    s = WriteFileAtomically(PrivateFileSystem(), path, all);
    if (s.ok()) log.file_bytes = static_cast<int64_t>(all.size());
  } else {
    s = AppendToFile(path, text);
    if (s.ok()) log.file_bytes += static_cast<int64_t>(text.size());
  }
  if (!s.ok() && !write_failed_) {
    write_failed_ = true;
    AQ_LOG_ERROR("job logs: {}; lines are kept in memory only from now on",
                 s.ToString());
  }
}

int64_t JobLogStore::Append(const std::string& job_id,
                            std::vector<v1::LogLine> lines) {
  absl::MutexLock lock(&mu_);
  Log& log = logs_[job_id];
  std::string text;
  for (v1::LogLine& line : lines) {
    line.set_seq(++log.last_seq);
    line.set_text(
        Capped(std::move(*line.mutable_text()), options_.max_line_bytes));
    text += ToJsonLine(line);
    log.lines.push_back(std::move(line));
    if (log.lines.size() > options_.max_lines_per_job) log.lines.pop_front();
  }
  if (!text.empty()) WriteLocked(job_id, log, text);
  return log.last_seq;
}

int64_t JobLogStore::AppendEvent(const std::string& job_id, int64_t time_ms,
                                 const std::string& level,
                                 const std::string& text) {
  std::vector<v1::LogLine> lines(1);
  lines[0].set_time_ms(time_ms);
  lines[0].set_level(level);
  lines[0].set_worker("coordinator");
  lines[0].set_stage(-1);
  lines[0].set_text(text);
  return Append(job_id, std::move(lines));
}

std::vector<v1::LogLine> JobLogStore::Read(const std::string& job_id,
                                           int64_t since_seq,
                                           std::optional<int> stage, size_t max,
                                           int64_t* scanned) const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LogLine> out;
  if (scanned != nullptr) *scanned = since_seq;
  auto it = logs_.find(job_id);
  if (it == logs_.end()) return out;
  const std::deque<v1::LogLine>& lines = it->second.lines;
  // Lines are in seq order: skip to the first one after since_seq.
  auto from = std::upper_bound(
      lines.begin(), lines.end(), since_seq,
      [](int64_t seq, const v1::LogLine& line) { return seq < line.seq(); });
  for (; from != lines.end() && out.size() < max; ++from) {
    if (scanned != nullptr) *scanned = from->seq();
    if (stage.has_value() && from->stage() != *stage) continue;
    out.push_back(*from);
  }
  return out;
}

int64_t JobLogStore::LastSeq(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = logs_.find(job_id);
  return it == logs_.end() ? 0 : it->second.last_seq;
}

bool JobLogStore::WaitForLines(const std::string& job_id, int64_t since_seq,
                               absl::Time deadline) const {
  auto newer = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = logs_.find(job_id);
    return it != logs_.end() && it->second.last_seq > since_seq;
  };
  absl::MutexLock lock(&mu_);
  return AwaitMonotonic(mu_, absl::Condition(&newer), deadline);
}

absl::Status JobLogStore::Sync(const std::string& job_id) {
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    if (dir_.empty() || !IsFileSafeJobId(job_id) || logs_.count(job_id) == 0) {
      return absl::OkStatus();
    }
    path = PathLocked(job_id);
  }
  return SyncExistingFile(path);
}

void JobLogStore::Remove(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  logs_.erase(job_id);
  if (dir_.empty() || !IsFileSafeJobId(job_id)) return;
  std::error_code ec;
  std::filesystem::remove(PathLocked(job_id), ec);
}

}  // namespace aqueduct
