#include "coordinator/trace_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "coordinator/job_logs.h"

namespace aqueduct {

namespace {

constexpr char kSuffix[] = ".trace";
// A record bigger than this is corrupt (a report carries at most tens of
// thousands of events).
constexpr uint32_t kMaxRecordBytes = 64u << 20;

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(const std::string& in, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(in[at + i]))
         << (8 * i);
  }
  return v;
}

uint32_t Crc(const char* data, size_t size) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                     reinterpret_cast<const Bytef*>(data),
                                     static_cast<uInt>(size)));
}

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no trace file ", path));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace

std::string TraceRecord(const v1::StageTrace& part) {
  const std::string body = part.SerializeAsString();
  std::string out;
  PutU32(&out, static_cast<uint32_t>(body.size()));
  PutU32(&out, Crc(body.data(), body.size()));
  return out + body;
}

v1::GetTraceResponse ParseTraceRecords(const std::string& bytes,
                                       int64_t max_events_per_stage) {
  struct Stage {
    v1::StageTrace head;  // Identity; events kept apart.
    std::deque<v1::TraceEvent> events;
  };
  std::map<std::pair<int, int>, Stage> stages;
  int64_t dropped = 0;
  size_t at = 0;
  while (at + 8 <= bytes.size()) {
    const uint32_t size = GetU32(bytes, at);
    const uint32_t crc = GetU32(bytes, at + 4);
    if (size > kMaxRecordBytes || at + 8 + size > bytes.size() ||
        Crc(bytes.data() + at + 8, size) != crc) {
      break;
    }
    v1::StageTrace part;
    if (!part.ParseFromArray(bytes.data() + at + 8, static_cast<int>(size))) {
      break;
    }
    at += 8 + size;
    Stage& s = stages[{part.stage(), part.replica()}];
    s.head.set_worker_id(part.worker_id());
    s.head.set_stage(part.stage());
    s.head.set_replica(part.replica());
    for (v1::TraceEvent& e : *part.mutable_events()) {
      s.events.push_back(std::move(e));
      if (static_cast<int64_t>(s.events.size()) > max_events_per_stage) {
        s.events.pop_front();
        ++dropped;
      }
    }
  }
  v1::GetTraceResponse out;
  for (auto& [key, s] : stages) {
    v1::StageTrace* st = out.add_stages();
    *st = std::move(s.head);
    for (v1::TraceEvent& e : s.events) *st->add_events() = std::move(e);
  }
  out.set_dropped(dropped);
  return out;
}

TraceStore::TraceStore(TraceStoreOptions options)
    : options_(std::move(options)) {}

absl::Status TraceStore::Open(const std::string& dir) {
  if (std::error_code ec = MakePrivateDirectory(dir); ec) {
    return absl::UnavailableError(
        absl::StrCat("traces directory ", dir, ": ", ec.message()));
  }
  absl::MutexLock lock(&mu_);
  dir_ = dir;
  return absl::OkStatus();
}

bool TraceStore::is_open() const {
  absl::MutexLock lock(&mu_);
  return !dir_.empty();
}

std::string TraceStore::PathLocked(const std::string& job_id) const {
  return absl::StrCat(dir_, "/", job_id, kSuffix);
}

absl::Status TraceStore::Append(const std::string& job_id,
                                const v1::StageTrace& part) {
  if (part.events_size() == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (dir_.empty() || !IsFileSafeJobId(job_id)) return absl::OkStatus();
  const std::string path = PathLocked(job_id);
  auto known = file_bytes_.find(job_id);
  if (known == file_bytes_.end()) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    known =
        file_bytes_.emplace(job_id, ec ? 0 : static_cast<int64_t>(size)).first;
  }
  const std::string record = TraceRecord(part);
  if (absl::Status s = AppendToFile(path, record); !s.ok()) return s;
  known->second += static_cast<int64_t>(record.size());
  if (known->second > options_.max_file_bytes) return CompactLocked(job_id);
  return absl::OkStatus();
}

absl::Status TraceStore::CompactLocked(const std::string& job_id) {
  const std::string path = PathLocked(job_id);
  absl::StatusOr<std::string> bytes = ReadAll(path);
  if (!bytes.ok()) return bytes.status();
  // Keep half of what a reader shows, so that compactions are rare.
  const v1::GetTraceResponse kept = ParseTraceRecords(
      *bytes, std::max<int64_t>(1, options_.max_events_per_stage / 2));
  std::string out;
  for (const v1::StageTrace& st : kept.stages()) out += TraceRecord(st);
  if (absl::Status s = WriteFileAtomically(PrivateFileSystem(), path, out);
      !s.ok()) {
    return s;
  }
  file_bytes_[job_id] = static_cast<int64_t>(out.size());
  AQ_LOG_INFO("trace {}: compacted from {} to {} bytes", path, bytes->size(),
              out.size());
  return absl::OkStatus();
}

absl::StatusOr<v1::GetTraceResponse> TraceStore::Read(
    const std::string& job_id) const {
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    if (dir_.empty() || !IsFileSafeJobId(job_id)) {
      return absl::NotFoundError(
          absl::StrCat("no trace kept for job ", job_id.substr(0, 128)));
    }
    path = PathLocked(job_id);
  }
  absl::StatusOr<std::string> bytes = ReadAll(path);
  if (!bytes.ok()) return bytes.status();
  return ParseTraceRecords(*bytes, options_.max_events_per_stage);
}

absl::Status TraceStore::Sync(const std::string& job_id) {
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    if (dir_.empty() || file_bytes_.count(job_id) == 0) {
      return absl::OkStatus();
    }
    path = PathLocked(job_id);
  }
  return SyncExistingFile(path);
}

void TraceStore::Remove(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  file_bytes_.erase(job_id);
  if (dir_.empty() || !IsFileSafeJobId(job_id)) return;
  std::error_code ec;
  std::filesystem::remove(PathLocked(job_id), ec);
}

}  // namespace aqueduct
