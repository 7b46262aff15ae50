#include "coordinator/journal.h"

#include <zlib.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"

namespace aqueduct {

namespace {

constexpr absl::string_view kMagic = "AQJ3";
constexpr absl::string_view kMagicV2 = "AQJ2";
constexpr absl::string_view kSync(
    "\xff"
    "AQJ\xfe\x3c\xc3\xff",
    8);
// Where a header's fields begin (the job id's length varies; the body CRC
// and the header CRC follow it).
constexpr size_t kLengthAt = 8;
constexpr size_t kKindAt = 12;
constexpr size_t kIdLengthAt = 13;
constexpr size_t kIdAt = 15;
// Sync word, body length, kind, id length, body CRC, header CRC.
constexpr size_t kFixedHeader = kIdAt + 4 + 4;

void PutU16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v));
  out->push_back(static_cast<char>(v >> 8));
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetLE(absl::string_view bytes, size_t at, int width) {
  uint32_t v = 0;
  for (int i = 0; i < width; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + i]))
         << (8 * i);
  }
  return v;
}

uint32_t GetU32(absl::string_view bytes, size_t at) {
  return GetLE(bytes, at, 4);
}

uint32_t Crc32(absl::string_view body) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(body.data()),
            static_cast<uInt>(body.size())));
}

const std::string& JobIdOf(const v1::JournalRecord& r) {
  switch (r.kind_case()) {
    case v1::JournalRecord::kSubmitted:
      return r.submitted().job_id();
    case v1::JournalRecord::kFinished:
      return r.finished().job_id();
    case v1::JournalRecord::kStarted:
      return r.started().job_id();
    case v1::JournalRecord::kCheckpoint:
      return r.checkpoint().job_id();
    case v1::JournalRecord::KIND_NOT_SET:
      break;
  }
  static const std::string* const kNone = new std::string();
  return *kNone;
}

// The id a record's header carries.
absl::string_view HeaderJobId(const v1::JournalRecord& r) {
  const std::string& id = JobIdOf(r);
  if (id.size() > kMaxHeaderJobIdBytes) return absl::string_view();
  return id;
}

// Sync word, header (with its CRC), body.
std::string Frame(const v1::JournalRecord& record) {
  const std::string body = record.SerializeAsString();
  const absl::string_view id = HeaderJobId(record);
  std::string out(kSync);
  out.reserve(kFixedHeader + id.size() + body.size());
  PutU32(&out, static_cast<uint32_t>(body.size()));
  out.push_back(static_cast<char>(record.kind_case()));
  PutU16(&out, static_cast<uint16_t>(id.size()));
  out.append(id.data(), id.size());
  PutU32(&out, Crc32(body));
  PutU32(&out, Crc32(absl::string_view(out).substr(kSync.size())));
  return out + body;
}

struct Header {
  size_t size = 0;  // Bytes, sync word included.
  uint32_t body_bytes = 0;
  uint32_t body_crc = 0;
  // A JournalRecord::KindCase, or one this build does not know.
  int kind = 0;
  std::string job_id;
};

// The header at `at` when it validates. `need_sync`: when scanning (where
// a record begins is not known), the sync word must be there too.
std::optional<Header> HeaderAt(absl::string_view bytes, size_t at,
                               bool need_sync) {
  if (at > bytes.size() || bytes.size() - at < kFixedHeader) return {};
  if (need_sync && bytes.substr(at, kSync.size()) != kSync) return {};
  const size_t id_bytes = GetLE(bytes, at + kIdLengthAt, 2);
  if (id_bytes > kMaxHeaderJobIdBytes ||
      bytes.size() - at < kFixedHeader + id_bytes) {
    return {};
  }
  const size_t body_crc_at = at + kIdAt + id_bytes;
  const absl::string_view covered =
      bytes.substr(at + kLengthAt, body_crc_at + 4 - (at + kLengthAt));
  if (GetU32(bytes, body_crc_at + 4) != Crc32(covered)) return {};
  Header h;
  h.size = kFixedHeader + id_bytes;
  h.body_bytes = GetU32(bytes, at + kLengthAt);
  h.kind = static_cast<unsigned char>(bytes[at + kKindAt]);
  h.job_id = std::string(bytes.substr(at + kIdAt, id_bytes));
  h.body_crc = GetU32(bytes, body_crc_at);
  return h;
}

v1::JournalRecord::KindCase KnownKind(int kind) {
  return kind <= v1::JournalRecord::kCheckpoint
             ? static_cast<v1::JournalRecord::KindCase>(kind)
             : v1::JournalRecord::KIND_NOT_SET;
}

// Whether the header's body is all in `bytes`.
bool BodyIsWhole(absl::string_view bytes, size_t at, const Header& h) {
  return h.body_bytes <= bytes.size() - at - h.size;
}

// Adds the record at `at`, whose header is `h`, when its body is whole,
// passes its CRC, parses (a length past INT_MAX would turn negative in
// ParseFromArray's int) and agrees with the header.
bool TakeRecord(absl::string_view bytes, size_t at, const Header& h,
                JournalContents* contents) {
  if (!BodyIsWhole(bytes, at, h) ||
      h.body_bytes > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    return false;
  }
  const absl::string_view body = bytes.substr(at + h.size, h.body_bytes);
  v1::JournalRecord record;
  if (Crc32(body) != h.body_crc ||
      !record.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return false;
  }
  // A kind this build does not know (from a newer one) parses as none.
  if (record.kind_case() != v1::JournalRecord::KIND_NOT_SET &&
      (record.kind_case() != h.kind || HeaderJobId(record) != h.job_id)) {
    return false;
  }
  contents->records.push_back(std::move(record));
  contents->offsets.push_back(static_cast<int64_t>(at));
  return true;
}

// The offset of the first sync word at or after `from` whose header
// validates (the size of `bytes` when none).
size_t NextHeader(absl::string_view bytes, size_t from) {
  while (from < bytes.size()) {
    const size_t at = bytes.find(kSync, from);
    if (at == absl::string_view::npos) break;
    if (HeaderAt(bytes, at, /*need_sync=*/true)) return at;
    from = at + 1;
  }
  return bytes.size();
}

// Bytes [at, end), with no job named.
JournalDamage Region(size_t at, size_t end) {
  JournalDamage damage;
  damage.offset = static_cast<int64_t>(at);
  damage.bytes = static_cast<int64_t>(end - at);
  return damage;
}

// Sets ignored_* from the last damaged region, when it reaches the end.
void NoteTail(size_t size, JournalContents* contents) {
  if (contents->damaged.empty()) return;
  const JournalDamage& last = contents->damaged.back();
  if (last.offset + last.bytes != static_cast<int64_t>(size)) return;
  contents->ignored_at = last.offset;
  contents->ignored_bytes = last.bytes;
}

// Parses AQJ3 records from `at`, where one begins, to the end.
void ParseFramed(absl::string_view bytes, size_t at,
                 JournalContents* contents) {
  while (at < bytes.size()) {
    const std::optional<Header> h = HeaderAt(bytes, at, /*need_sync=*/false);
    if (h && TakeRecord(bytes, at, *h, contents)) {
      at += h->size + h->body_bytes;
      continue;
    }
    JournalDamage damage = Region(at, at);
    // A record whose header validated ends where its length says, and the
    // next one begins there; otherwise the next is found by its sync word.
    // Nothing inside the damaged record is taken for a record.
    size_t next = 0;
    if (h) {
      damage.job_id = h->job_id;
      damage.kind = KnownKind(h->kind);
    }
    if (h && BodyIsWhole(bytes, at, *h)) {
      next = at + h->size + h->body_bytes;
    } else {
      next = NextHeader(bytes, at + 1);
    }
    damage.bytes = static_cast<int64_t>(next - at);
    contents->damaged.push_back(std::move(damage));
    at = next;
  }
  NoteTail(bytes.size(), contents);
}

// Parses records of the older formats from `at`, stopping at the first bad
// one; `checksummed` is false for files written before AQJ2.
void ParseLegacy(absl::string_view bytes, size_t at, bool checksummed,
                 JournalContents* contents) {
  const size_t header = checksummed ? 8 : 4;
  while (at + header <= bytes.size()) {
    const uint32_t n = GetU32(bytes, at);
    if (n > bytes.size() - at - header ||
        n > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
      break;
    }
    const absl::string_view body = bytes.substr(at + header, n);
    if (checksummed && GetU32(bytes, at + 4) != Crc32(body)) break;
    v1::JournalRecord record;
    if (!record.ParseFromArray(body.data(), static_cast<int>(n))) break;
    contents->records.push_back(std::move(record));
    contents->offsets.push_back(static_cast<int64_t>(at));
    at += header + n;
  }
  if (at < bytes.size()) contents->damaged.push_back(Region(at, bytes.size()));
  NoteTail(bytes.size(), contents);
}

// A file whose magic is neither: an AQJ3 or AQJ2 one whose magic was
// damaged when records of that format follow, else one from before AQJ2.
void ParseUnknown(absl::string_view bytes, JournalContents* contents) {
  const size_t m = kMagic.size();
  const size_t first =
      HeaderAt(bytes, m, /*need_sync=*/false) ? m : NextHeader(bytes, 0);
  if (first < bytes.size()) {
    contents->damaged.push_back(Region(0, first));
    ParseFramed(bytes, first, contents);
    return;
  }
  if (bytes.size() > m) {
    JournalContents v2;
    v2.damaged.push_back(Region(0, m));
    ParseLegacy(bytes, m, /*checksummed=*/true, &v2);
    if (!v2.records.empty()) {
      *contents = std::move(v2);
      return;
    }
  }
  ParseLegacy(bytes, 0, /*checksummed=*/false, contents);
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
  const absl::string_view all(*bytes);
  const absl::string_view magic = all.substr(0, kMagic.size());
  if (magic == kMagic) {
    ParseFramed(all, kMagic.size(), &contents);
  } else if (magic == kMagicV2) {
    ParseLegacy(all, kMagicV2.size(), /*checksummed=*/true, &contents);
  } else {
    ParseUnknown(all, &contents);
  }
  return contents;
}

namespace {

// What survived of each job: its submission, whether a final status, and
// where its first record begins.
struct Survivors {
  std::map<std::string, const v1::JobSubmitted*> submitted;
  std::set<std::string> finished;
  std::map<std::string, int64_t> first_at;
};

Survivors SurvivorsOf(const JournalContents& contents) {
  Survivors s;
  for (size_t i = 0; i < contents.records.size(); ++i) {
    const v1::JournalRecord& r = contents.records[i];
    const std::string& id = JobIdOf(r);
    if (id.empty()) continue;  // A kind this build does not know.
    if (r.has_submitted()) s.submitted.emplace(id, &r.submitted());
    if (r.has_finished()) s.finished.insert(id);
    s.first_at.emplace(id, contents.offsets[i]);
  }
  return s;
}

// Each job that lost a record, with the offset of the first one lost. A
// job whose submission is missing while later records of it survived lost
// it in a region whose header was unreadable: the last one before them.
std::map<std::string, int64_t> LostRecords(const JournalContents& contents,
                                           const Survivors& s) {
  std::map<std::string, int64_t> lost;
  std::vector<int64_t> unnamed;  // In the order of the file.
  for (const JournalDamage& d : contents.damaged) {
    if (!d.job_id.empty()) {
      lost.emplace(d.job_id, d.offset);
    } else {
      unnamed.push_back(d.offset);
    }
  }
  for (const auto& [id, first] : s.first_at) {
    if (s.submitted.count(id) > 0 || lost.count(id) > 0) continue;
    auto after = std::lower_bound(unnamed.begin(), unnamed.end(), first);
    if (after != unnamed.begin()) lost.emplace(id, *std::prev(after));
  }
  return lost;
}

v1::JobStatus LostStatus(const std::string& id, const v1::JobSubmitted* sub,
                         int64_t at, absl::string_view file) {
  v1::JobStatus status;
  status.set_job_id(id);
  status.set_state(v1::JOB_FAILED);
  status.set_reason(absl::StrCat(
      "its journal record at byte ", at, " of ", file,
      " was damaged, so its last state is unknown; it is not run again"));
  if (sub != nullptr) {
    status.set_name(sub->spec().name());
    status.set_owner(sub->owner());
    status.set_submitted_ms(sub->submitted_ms());
    status.set_total_steps(sub->total_steps());
  }
  return status;
}

// Puts each of `added` among the records by its offset (after those that
// begin before it).
void MergeByOffset(std::vector<std::pair<int64_t, v1::JournalRecord>> added,
                   JournalContents* contents) {
  std::stable_sort(
      added.begin(), added.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<v1::JournalRecord> records;
  std::vector<int64_t> offsets;
  size_t next = 0;
  const size_t n = contents->records.size();
  for (size_t i = 0; i <= n; ++i) {
    while (next < added.size() &&
           (i == n || added[next].first < contents->offsets[i])) {
      offsets.push_back(added[next].first);
      records.push_back(std::move(added[next].second));
      ++next;
    }
    if (i == n) break;
    offsets.push_back(contents->offsets[i]);
    records.push_back(std::move(contents->records[i]));
  }
  contents->records = std::move(records);
  contents->offsets = std::move(offsets);
}

absl::string_view KindName(v1::JournalRecord::KindCase kind) {
  switch (kind) {
    case v1::JournalRecord::kSubmitted:
      return "submission";
    case v1::JournalRecord::kFinished:
      return "final status";
    case v1::JournalRecord::kStarted:
      return "start";
    case v1::JournalRecord::kCheckpoint:
      return "checkpoint";
    case v1::JournalRecord::KIND_NOT_SET:
      break;
  }
  return "record";
}

std::string JoinOrNone(const std::vector<std::string>& ids) {
  return ids.empty() ? "none" : absl::StrJoin(ids, ", ");
}

}  // namespace

LostJobs FailJobsWithLostRecords(JournalContents* contents,
                                 absl::string_view file) {
  const Survivors s = SurvivorsOf(*contents);
  LostJobs lost;
  std::vector<std::pair<int64_t, v1::JournalRecord>> added;
  for (const auto& [id, at] : LostRecords(*contents, s)) {
    auto sub = s.submitted.find(id);
    if (sub == s.submitted.end()) {
      v1::JournalRecord bare;
      bare.mutable_submitted()->set_job_id(id);
      added.emplace_back(at, std::move(bare));
    }
    if (s.finished.count(id) > 0) {
      lost.kept.push_back(id);
      continue;
    }
    v1::JournalRecord failed;
    *failed.mutable_finished() = LostStatus(
        id, sub == s.submitted.end() ? nullptr : sub->second, at, file);
    added.emplace_back(at, std::move(failed));
    lost.failed.push_back(id);
  }
  MergeByOffset(std::move(added), contents);
  return lost;
}

std::string DescribeDamage(const JournalContents& contents,
                           const LostJobs& lost) {
  std::string out = absl::StrCat(contents.damaged.size(), " damaged region(s)");
  for (const JournalDamage& d : contents.damaged) {
    absl::StrAppend(
        &out, "; bytes [", d.offset, ", ", d.offset + d.bytes, ")",
        d.offset == contents.ignored_at ? " (the end of the file)" : "", ": ");
    if (d.job_id.empty()) {
      absl::StrAppend(&out, "header unreadable");
    } else {
      absl::StrAppend(&out, "the ", KindName(d.kind), " of job ", d.job_id);
    }
  }
  absl::StrAppend(
      &out, "; jobs that lost a record, now FAILED: ", JoinOrNone(lost.failed),
      "; jobs that lost a record but kept their final status: ",
      JoinOrNone(lost.kept));
  return out;
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
