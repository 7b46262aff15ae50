#include "coordinator/journal.h"

#include <zlib.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace aqueduct {

namespace {

constexpr absl::string_view kMagic = "AQJ2";

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + i]))
         << (8 * i);
  }
  return v;
}

uint32_t Crc32(absl::string_view body) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(body.data()),
            static_cast<uInt>(body.size())));
}

// Length, checksum, body.
std::string Frame(const v1::JournalRecord& record) {
  const std::string body = record.SerializeAsString();
  std::string out;
  out.reserve(body.size() + 8);
  PutU32(&out, static_cast<uint32_t>(body.size()));
  PutU32(&out, Crc32(body));
  return out + body;
}

// Parses records from `at` on; `checksummed` is false for files written
// before the format had checksums.
void ParseRecords(const std::string& bytes, size_t at, bool checksummed,
                  JournalContents* contents) {
  const size_t header = checksummed ? 8 : 4;
  while (at + header <= bytes.size()) {
    const uint32_t n = GetU32(bytes, at);
    // A length past INT_MAX would turn negative in ParseFromArray's int
    // (only a corrupt length in a journal of more than 2 GiB).
    if (n > bytes.size() - at - header ||
        n > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
      break;
    }
    const absl::string_view body(bytes.data() + at + header, n);
    if (checksummed && GetU32(bytes, at + 4) != Crc32(body)) break;
    v1::JournalRecord record;
    if (!record.ParseFromArray(body.data(), static_cast<int>(n))) break;
    contents->records.push_back(std::move(record));
    at += header + n;
  }
  contents->ignored_bytes = static_cast<int64_t>(bytes.size() - at);
  contents->ignored_at =
      contents->ignored_bytes > 0 ? static_cast<int64_t>(at) : -1;
}

}  // namespace

absl::StatusOr<JournalContents> JobJournal::Read(FileSystem* fs,
                                                 const std::string& path) {
  JournalContents contents;
  auto bytes = fs->ReadFile(path);
  if (absl::IsNotFound(bytes.status())) return contents;  // No journal yet.
  if (!bytes.ok()) {
    return absl::UnavailableError(
        absl::StrCat("journal ", path, ": ", bytes.status().message()));
  }
  const bool checksummed = absl::string_view(*bytes).substr(0, 4) == kMagic;
  ParseRecords(*bytes, checksummed ? kMagic.size() : 0, checksummed, &contents);
  return contents;
}

absl::StatusOr<std::unique_ptr<JobJournal>> JobJournal::Create(
    FileSystem* fs, const std::string& path,
    const std::vector<v1::JournalRecord>& records) {
  std::string bytes(kMagic);
  for (const v1::JournalRecord& r : records) bytes += Frame(r);
  absl::Status written = WriteFileAtomically(fs, path, bytes);
  if (!written.ok()) {
    return absl::UnavailableError(
        absl::StrCat("journal ", path, ": ", written.message()));
  }
  auto file = fs->NewAppendableFile(path);
  if (!file.ok()) {
    return absl::UnavailableError(
        absl::StrCat("journal ", path, ": ", file.status().message()));
  }
  return std::unique_ptr<JobJournal>(new JobJournal(path, *std::move(file)));
}

JobJournal::JobJournal(std::string path, std::unique_ptr<WritableFile> file)
    : path_(std::move(path)), file_(std::move(file)) {
  writer_ = std::thread([this] { WriterLoop(); });
}

JobJournal::~JobJournal() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_.join();
}

int64_t JobJournal::Enqueue(v1::JournalRecord record) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(record));
  return ++queued_;
}

absl::Status JobJournal::WaitDurable(int64_t seq) {
  absl::MutexLock lock(&mu_);
  auto done = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return durable_ >= seq || !broken_.ok();
  };
  mu_.Await(absl::Condition(&done));
  return durable_ >= seq ? absl::OkStatus() : broken_;
}

absl::Status JobJournal::Append(const v1::JournalRecord& record) {
  return WaitDurable(Enqueue(record));
}

void JobJournal::AppendAsync(v1::JournalRecord record) {
  Enqueue(std::move(record));
}

absl::Status JobJournal::Flush() {
  int64_t seq;
  {
    absl::MutexLock lock(&mu_);
    seq = queued_;
  }
  return WaitDurable(seq);
}

void JobJournal::WriterLoop() {
  while (true) {
    std::deque<v1::JournalRecord> batch;
    int64_t last;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;
      batch.swap(queue_);
      last = queued_;
      if (!broken_.ok()) continue;  // Waiters see broken_.
    }
    std::string bytes;
    for (const v1::JournalRecord& r : batch) bytes += Frame(r);
    absl::Status s = file_->Append(bytes);
    if (s.ok()) s = file_->Sync();
    absl::MutexLock lock(&mu_);
    if (s.ok()) {
      durable_ = last;
    } else {
      broken_ = absl::UnavailableError(
          absl::StrCat("journal ", path_, ": ", s.message()));
      AQ_LOG_ERROR("{}; no job is recorded from now on", broken_.ToString());
    }
  }
}

}  // namespace aqueduct
