#include "common/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/file_system.h"
#include "common/status.h"
#include "google/protobuf/util/json_util.h"

namespace aqueduct {

namespace {

constexpr size_t kReadChunk = 1 << 20;
// As common/safetensors.cc's reader: a longer header is not a file it reads.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100 << 20;
// How errors name what a spec, an assignment or --resume gave.
constexpr char kDirField[] = "checkpoint.dir";
constexpr char kField[] = "checkpoint";

// UNAVAILABLE (NOT_FOUND for ENOENT) "<path>: <what>: <strerror>", from errno.
absl::Status Errno(absl::string_view what, const std::string& path) {
  const int e = errno;
  const std::string message =
      absl::StrCat(path, ": ", what, ": ", std::strerror(e));
  return e == ENOENT ? absl::NotFoundError(message)
                     : absl::UnavailableError(message);
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// A name that stays inside its directory: no '/', not "." or "..".
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open directory", dir);
  absl::Status s =
      fsync(fd) == 0 ? absl::OkStatus() : Errno("sync directory", dir);
  close(fd);
  return s;
}

// mkdir -p with mode 0700 (a job's checkpoints are its user's alone,
// whatever the umask; issue 22, item 13); the parent of every directory
// created is synced so that the new entry is durable too.
absl::Status MakeDirs(const std::string& path) {
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0700) == 0) {
      // mkdir's mode is masked by the umask; chmod's is not (a umask that
      // took the owner's bits would leave a directory nobody can enter).
      if (chmod(prefix.c_str(), 0700) != 0) return Errno("chmod", prefix);
      RETURN_IF_ERROR(SyncDir(DirName(prefix)));
      continue;
    }
    if (errno != EEXIST) return Errno("create directory", prefix);
    struct stat st;
    if (stat(prefix.c_str(), &st) != 0) return Errno("stat", prefix);
    if (!S_ISDIR(st.st_mode)) {
      return absl::UnavailableError(
          absl::StrCat(prefix, ": exists and is not a directory"));
    }
  }
  return absl::OkStatus();
}

// Writes all of `data` to `fd`, makes it durable and closes `fd` (always).
// Errors name `path`, the file being written.
absl::Status WriteSyncClose(int fd, absl::string_view data,
                            const std::string& path) {
  absl::Status s;
  if (fchmod(fd, 0600) != 0) s = Errno("chmod", path);
  size_t done = 0;
  while (s.ok() && done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = Errno("write", path);
    } else {
      done += static_cast<size_t>(n);
    }
  }
  if (s.ok() && fsync(fd) != 0) s = Errno("sync", path);
  if (close(fd) != 0 && s.ok()) s = Errno("close", path);
  return s;
}

// <dir>/<name> = data, durably: a temporary file in `dir` (created with the
// directories as needed), synced, renamed into place, the directory synced.
// The temporary file is removed on failure. (WriteFileAtomically in
// common/file_system.h does the same through the FileSystem seam but leaves
// its temporary file behind on failure, and has no way to remove it.)
absl::Status DurableWrite(const std::string& dir, const std::string& name,
                          absl::string_view data) {
  RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = JoinPath(dir, name);
  // mkostemp replaces the six trailing 'X's with a unique suffix.
  std::string temp =
      JoinPath(dir, absl::StrCat(".", name, ".tmp.", std::string(6, 'X')));
  const int fd = mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return Errno("create temporary file", path);
  absl::Status s = WriteSyncClose(fd, data, path);
  if (s.ok() && rename(temp.c_str(), path.c_str()) != 0) {
    s = Errno(absl::StrCat("rename from ", temp), path);
  }
  if (!s.ok()) {
    unlink(temp.c_str());
    return s;
  }
  return SyncDir(dir);
}

// The layer index of "layers.<i>.<...>", or -1.
int LayerIndexOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "layers.")) return -1;
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos || dot == 0 || dot + 1 == name.size()) {
    return -1;
  }
  const absl::string_view digits = name.substr(0, dot);
  if (!std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) {
    return -1;
  }
  int index = -1;
  return absl::SimpleAtoi(digits, &index) ? index : -1;
}

// The version of a directory named "v<digits>", or -1.
int64_t VersionOfDirName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "v") || name.empty()) return -1;
  if (!std::all_of(name.begin(), name.end(), absl::ascii_isdigit)) return -1;
  int64_t version = -1;
  return absl::SimpleAtoi(name, &version) ? version : -1;
}

// The entries of `dir` (without "." and ".."), with lstat's mode.
absl::StatusOr<std::vector<std::pair<std::string, mode_t>>> ListDir(
    const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Errno("open directory", dir);
  std::vector<std::pair<std::string, mode_t>> entries;
  absl::Status s;
  while (true) {
    errno = 0;
    const struct dirent* e = readdir(d);
    if (e == nullptr) {
      if (errno != 0) s = Errno("read directory", dir);
      break;
    }
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (lstat(JoinPath(dir, name).c_str(), &st) != 0) continue;  // Raced.
    entries.emplace_back(name, st.st_mode);
  }
  closedir(d);
  if (!s.ok()) return s;
  std::sort(entries.begin(), entries.end());
  return entries;
}

// The version directories under `job_dir` as (version, path), by version.
absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ListVersionDirs(
    const std::string& job_dir) {
  ASSIGN_OR_RETURN(auto entries, ListDir(job_dir));
  std::vector<std::pair<int64_t, std::string>> dirs;
  for (const auto& [name, mode] : entries) {
    const int64_t version = VersionOfDirName(name);
    if (version >= 0 && S_ISDIR(mode)) {
      dirs.emplace_back(version, JoinPath(job_dir, name));
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

absl::Status Unlink(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Errno("remove", path);
  }
  return absl::OkStatus();
}

// Whether `a` and `b` name the same existing directory.
bool SameDirectory(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (a.empty() || stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) {
    return false;
  }
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// DATA_LOSS unless `size` and `crc` are what `f` records.
absl::Status CheckContents(const std::string& path, const v1::CheckpointFile& f,
                           int64_t size, uint32_t crc) {
  if (size != f.bytes()) {
    return absl::DataLossError(absl::StrCat(path, ": ", size,
                                            " bytes, the manifest records ",
                                            f.bytes(), " (truncated?)"));
  }
  if (crc != f.crc32()) {
    return absl::DataLossError(
        absl::StrFormat("%s: CRC-32 %08x, the manifest records %08x (the "
                        "file is corrupt)",
                        path, crc, f.crc32()));
  }
  return absl::OkStatus();
}

// The path of `f` in `dir`; DATA_LOSS for a name that leaves the directory.
absl::StatusOr<std::string> FilePath(const std::string& dir,
                                     const v1::CheckpointFile& f) {
  if (!IsPlainFileName(f.name())) {
    return absl::DataLossError(absl::StrCat(
        dir, ": the manifest names a file '", f.name(),
        "', which is not a plain file name in the version directory"));
  }
  return JoinPath(dir, f.name());
}

// The CRC-32 of an opened file, read in chunks.
absl::StatusOr<uint32_t> FileCrc32(const OpenedFile& file) {
  std::vector<char> buffer(kReadChunk);
  uLong crc = crc32(0L, Z_NULL, 0);
  off_t offset = 0;
  while (true) {
    const ssize_t n =
        pread(file.fd.get(), buffer.data(), buffer.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("read", file.path);
    if (n == 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()),
                static_cast<uInt>(n));
    offset += n;
  }
  return static_cast<uint32_t>(crc);
}

// Opens the file `path` a manifest lists as `f`: DATA_LOSS when it is
// missing, not a regular file, or not of the recorded size (checked before
// anything is read); PERMISSION_DENIED outside `roots`.
absl::StatusOr<OpenedFile> OpenListedFile(const PathRoots& roots,
                                          const std::string& path,
                                          const v1::CheckpointFile& f) {
  absl::StatusOr<OpenedFile> file = OpenRegularFile(path, roots, kField);
  if (absl::IsNotFound(file.status())) {
    return absl::DataLossError(absl::StrCat(
        path, ": missing (the manifest records ", f.bytes(), " bytes)"));
  }
  if (absl::IsInvalidArgument(file.status())) {
    return absl::DataLossError(file.status().message());
  }
  if (file.ok() && file->size != f.bytes()) {
    return CheckContents(path, f, file->size, 0);
  }
  return file;
}

// Checks one file of a manifest against the disk without loading it whole.
absl::Status VerifyFile(const PathRoots& roots, const std::string& dir,
                        const v1::CheckpointFile& f) {
  ASSIGN_OR_RETURN(const std::string path, FilePath(dir, f));
  ASSIGN_OR_RETURN(const OpenedFile file, OpenListedFile(roots, path, f));
  ASSIGN_OR_RETURN(const uint32_t crc, FileCrc32(file));
  return CheckContents(path, f, file.size, crc);
}

// INVALID_ARGUMENT unless the 8-byte header length of the safetensors file
// `file` fits its size and the reader's limit; the length itself (the
// file's first bytes) is not shown.
absl::Status CheckSafetensorsHeader(const OpenedFile& file,
                                    const std::string& path,
                                    absl::string_view field) {
  const std::string what =
      absl::StrCat(field, ": '", path, "' is not a safetensors file: ");
  uint8_t le[8];
  if (file.size < 8 || pread(file.fd.get(), le, 8, 0) != 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "its ", file.size, " bytes hold no 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(le[i]) << (8 * i);
  if (n > static_cast<uint64_t>(file.size) - 8 ||
      n > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "its header length does not fit its ", file.size, " bytes"));
  }
  return absl::OkStatus();
}

// Reads one file of a manifest, checks it and parses it.
absl::StatusOr<SafetensorsFile> ReadCheckedFile(const PathRoots& roots,
                                                const std::string& dir,
                                                const v1::CheckpointFile& f,
                                                const std::atomic<bool>* stop) {
  ASSIGN_OR_RETURN(const std::string path, FilePath(dir, f));
  ASSIGN_OR_RETURN(const OpenedFile file, OpenListedFile(roots, path, f));
  ASSIGN_OR_RETURN(const std::string bytes, ReadOpenedFile(file, kField, stop));
  RETURN_IF_ERROR(
      CheckContents(path, f, static_cast<int64_t>(bytes.size()), Crc32(bytes)));
  if (absl::Status s = CheckSafetensorsHeader(file, path, kField); !s.ok()) {
    return absl::DataLossError(s.message());
  }
  absl::StatusOr<SafetensorsFile> parsed = ParseSafetensors(bytes);
  if (!parsed.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", parsed.status().message()));
  }
  return parsed;
}

// Checks that `files` (those of a manifest whose layer range overlaps
// [begin, end), sorted by layer_begin) hold every layer of [begin, end) in
// exactly one file.
absl::Status CheckCoverage(const std::vector<const v1::CheckpointFile*>& files,
                           int begin, int end) {
  int next = begin;
  const v1::CheckpointFile* previous = nullptr;
  for (const v1::CheckpointFile* f : files) {
    const int lo = std::max(f->layer_begin(), begin);
    if (lo > next) {
      return absl::FailedPreconditionError(absl::StrCat(
          "layers [", next, ", ", lo, ") are in no checkpoint file"));
    }
    if (lo < next) {
      return absl::FailedPreconditionError(absl::StrCat(
          "layer ", lo, " is in both ", previous->name(), " and ", f->name()));
    }
    next = std::min(f->layer_end(), end);
    previous = f;
  }
  if (next < end) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layers [", next, ", ", end, ") are in no checkpoint file"));
  }
  return absl::OkStatus();
}

// The files of `m` that hold layers of [begin, end), by layer_begin.
std::vector<const v1::CheckpointFile*> Overlapping(
    const v1::CheckpointManifest& m, int begin, int end) {
  std::vector<const v1::CheckpointFile*> files;
  for (const v1::CheckpointFile& f : m.files()) {
    if (f.layer_begin() < f.layer_end() && f.layer_begin() < end &&
        f.layer_end() > begin) {
      files.push_back(&f);
    }
  }
  std::stable_sort(
      files.begin(), files.end(),
      [](const v1::CheckpointFile* a, const v1::CheckpointFile* b) {
        return a->layer_begin() < b->layer_begin();
      });
  return files;
}

// FAILED_PRECONDITION unless the files of `m` hold layers [0, num_layers),
// each in exactly one file, and nothing else.
absl::Status CheckManifestLayers(const v1::CheckpointManifest& m) {
  if (m.num_layers() < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("num_layers is ", m.num_layers()));
  }
  for (const v1::CheckpointFile& f : m.files()) {
    if (f.layer_begin() < 0 || f.layer_begin() >= f.layer_end() ||
        f.layer_end() > m.num_layers()) {
      return absl::FailedPreconditionError(absl::StrCat(
          f.name(), " records layers [", f.layer_begin(), ", ", f.layer_end(),
          "), not a range within the model's [0, ", m.num_layers(), ")"));
    }
  }
  return CheckCoverage(Overlapping(m, 0, m.num_layers()), 0, m.num_layers());
}

// Removes the regular files of a version directory (the manifest first),
// then the directory.
absl::Status RemoveVersionDir(const std::string& dir) {
  RETURN_IF_ERROR(Unlink(JoinPath(dir, kManifestFileName)));
  ASSIGN_OR_RETURN(auto entries, ListDir(dir));
  for (const auto& [name, mode] : entries) {
    if (S_ISREG(mode)) RETURN_IF_ERROR(Unlink(JoinPath(dir, name)));
  }
  if (rmdir(dir.c_str()) != 0) {
    if (errno == ENOTEMPTY || errno == EEXIST) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, ": not removed: it holds entries other than regular files"));
    }
    return Errno("remove directory", dir);
  }
  return absl::OkStatus();
}

// The manifest of a version directory if it is a committed checkpoint of
// `version`; otherwise why not.
absl::StatusOr<v1::CheckpointManifest> ReadCommitted(const PathRoots& roots,
                                                     const std::string& dir,
                                                     int64_t version) {
  absl::StatusOr<v1::CheckpointManifest> read = ReadManifest(roots, dir);
  if (absl::IsNotFound(read.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no ", kManifestFileName, " (the checkpoint was never committed)"));
  }
  ASSIGN_OR_RETURN(v1::CheckpointManifest m, std::move(read));
  if (m.version() != version) {
    return absl::FailedPreconditionError(
        absl::StrCat("the manifest records version ", m.version()));
  }
  RETURN_IF_ERROR(VerifyCheckpoint(roots, m));
  return m;
}

// The real path of the existing directory `dir` under `roots` (as given
// for Anywhere()); NOT_FOUND when missing.
absl::StatusOr<std::string> ResolveDir(const PathRoots& roots,
                                       const std::string& dir) {
  return roots.Resolve(StripTrailingSlashes(dir), kDirField);
}

}  // namespace

std::string CheckpointJobDir(absl::string_view dir, absl::string_view job_id) {
  return JoinPath(dir, job_id);
}

std::string CheckpointVersionDir(absl::string_view dir,
                                 absl::string_view job_id, int64_t version) {
  return absl::StrFormat("%s/v%08d", CheckpointJobDir(dir, job_id), version);
}

std::string StageFileName(int stage, int attempt) {
  return absl::StrCat("stage-", stage, "-a", attempt, ".safetensors");
}

uint32_t Crc32(absl::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()),
                static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

absl::StatusOr<v1::CheckpointFile> WriteCheckpointFile(
    const PathRoots& roots, const std::string& version_dir,
    const std::string& name, const SafetensorsFile& file, int stage,
    int layer_begin, int layer_end) {
  const std::string path = JoinPath(version_dir, name);
  if (!IsPlainFileName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": '", name, "' is not a plain file name"));
  }
  if (layer_begin < 0 || layer_end < layer_begin) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": bad layer range [", layer_begin, ", ", layer_end, ")"));
  }
  ASSIGN_OR_RETURN(const std::string dir,
                   roots.ResolveForCreate(version_dir, kDirField));
  absl::StatusOr<std::string> bytes = SerializeSafetensors(file);
  if (!bytes.ok()) return Annotate(bytes.status(), path);
  RETURN_IF_ERROR(DurableWrite(dir, name, *bytes));
  v1::CheckpointFile out;
  out.set_name(name);
  out.set_stage(stage);
  out.set_layer_begin(layer_begin);
  out.set_layer_end(layer_end);
  out.set_bytes(static_cast<int64_t>(bytes->size()));
  out.set_crc32(Crc32(*bytes));
  return out;
}

absl::Status CommitManifest(const PathRoots& roots,
                            const v1::CheckpointManifest& m) {
  if (m.dir().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint manifest of job ", m.job_id(), " version ",
                     m.version(), " has no dir"));
  }
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto s = google::protobuf::util::MessageToJsonString(m, &json, options);
  if (!s.ok()) {
    return absl::InternalError(absl::StrCat(
        JoinPath(m.dir(), kManifestFileName), ": ", s.message().as_string()));
  }
  ASSIGN_OR_RETURN(const std::string dir,
                   roots.ResolveForCreate(m.dir(), kDirField));
  return DurableWrite(dir, kManifestFileName, json);
}

absl::StatusOr<v1::CheckpointManifest> ReadManifest(const PathRoots& roots,
                                                    const std::string& path) {
  const std::string p = StripTrailingSlashes(path);
  std::string dir = p;
  std::string file = JoinPath(p, kManifestFileName);
  const size_t slash = p.find_last_of('/');
  if (p.substr(slash == std::string::npos ? 0 : slash + 1) ==
      kManifestFileName) {
    dir = DirName(p);
    file = p;
  }
  absl::StatusOr<std::string> text = ReadRegularFile(
      file, roots, kField, kMaxManifestBytes, "the largest manifest read");
  if (absl::IsInvalidArgument(text.status()) ||
      absl::IsFailedPrecondition(text.status())) {
    return absl::DataLossError(text.status().message());
  }
  if (!text.ok()) return text.status();
  v1::CheckpointManifest m;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // Written by a newer version.
  // The parser's message quotes the text around the error: not shown.
  if (!google::protobuf::util::JsonStringToMessage(*text, &m, options).ok()) {
    return absl::DataLossError(absl::StrCat(
        file, ": not a checkpoint manifest (its JSON does not parse as one)"));
  }
  if (!roots.anywhere()) {
    // Where it was read from, by real path: what the files are opened in.
    ASSIGN_OR_RETURN(const std::string real, roots.Resolve(file, kField));
    m.set_dir(DirName(real));
  } else if (!SameDirectory(m.dir(), dir)) {
    m.set_dir(dir);
  }
  return m;
}

absl::Status VerifyCheckpoint(const PathRoots& roots,
                              const v1::CheckpointManifest& m) {
  RETURN_IF_ERROR(Annotate(CheckManifestLayers(m), m.dir()));
  for (const v1::CheckpointFile& f : m.files()) {
    RETURN_IF_ERROR(VerifyFile(roots, m.dir(), f));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsUnder(
    const PathRoots& roots, const std::string& path, absl::string_view field,
    const std::atomic<bool>* stop) {
  ASSIGN_OR_RETURN(const OpenedFile file, OpenRegularFile(path, roots, field));
  RETURN_IF_ERROR(CheckSafetensorsHeader(file, path, field));
  ASSIGN_OR_RETURN(const std::string bytes, ReadOpenedFile(file, field, stop));
  absl::StatusOr<SafetensorsFile> parsed = ParseSafetensors(bytes);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", path, "': ", parsed.status().message()));
  }
  return parsed;
}

absl::StatusOr<SafetensorsFile> LoadCheckpointLayers(
    const PathRoots& roots, const v1::CheckpointManifest& m, int begin, int end,
    const std::atomic<bool>* stop) {
  if (begin < 0 || end < begin) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad layer range [", begin, ", ", end, ")"));
  }
  const std::vector<const v1::CheckpointFile*> files =
      Overlapping(m, begin, end);
  RETURN_IF_ERROR(Annotate(CheckCoverage(files, begin, end), m.dir()));
  SafetensorsFile out;
  for (const v1::CheckpointFile* f : files) {
    ASSIGN_OR_RETURN(SafetensorsFile file,
                     ReadCheckedFile(roots, m.dir(), *f, stop));
    if (f == files.front()) out.metadata = std::move(file.metadata);
    const int lo = std::max(f->layer_begin(), begin);
    const int hi = std::min(f->layer_end(), end);
    for (auto& [name, tensor] : file.tensors) {
      const int layer = LayerIndexOf(name);
      if (layer >= lo && layer < hi) out.tensors[name] = std::move(tensor);
    }
  }
  return out;
}

std::vector<v1::CheckpointManifest> ScanCheckpoints(
    const PathRoots& roots, const std::string& job_dir,
    std::vector<std::string>* warnings) {
  std::vector<v1::CheckpointManifest> found;
  absl::StatusOr<std::string> real = ResolveDir(roots, job_dir);
  auto dirs =
      real.ok() ? ListVersionDirs(*real)
                : absl::StatusOr<std::vector<std::pair<int64_t, std::string>>>(
                      real.status());
  if (!dirs.ok()) {
    if (!absl::IsNotFound(dirs.status()) && warnings != nullptr) {
      warnings->push_back(std::string(dirs.status().message()));
    }
    return found;
  }
  for (const auto& [version, dir] : *dirs) {
    absl::StatusOr<v1::CheckpointManifest> m =
        ReadCommitted(roots, dir, version);
    if (m.ok()) {
      found.push_back(*std::move(m));
    } else if (warnings != nullptr) {
      warnings->push_back(
          absl::StrCat(dir, ": ignored: ", m.status().message()));
    }
  }
  return found;
}

absl::Status PruneCheckpoints(const PathRoots& roots,
                              const std::string& job_dir,
                              const std::set<int64_t>& keep, int64_t newest) {
  absl::StatusOr<std::string> real = ResolveDir(roots, job_dir);
  if (absl::IsNotFound(real.status())) return absl::OkStatus();
  if (!real.ok()) return real.status();
  auto dirs = ListVersionDirs(*real);
  if (absl::IsNotFound(dirs.status())) return absl::OkStatus();
  if (!dirs.ok()) return dirs.status();
  absl::Status first;
  for (const auto& [version, dir] : *dirs) {
    if (keep.count(version) != 0 || version > newest) continue;
    absl::Status s = RemoveVersionDir(dir);
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status RemoveStrayFiles(const PathRoots& roots,
                              const v1::CheckpointManifest& m) {
  std::set<std::string> wanted = {kManifestFileName};
  for (const v1::CheckpointFile& f : m.files()) wanted.insert(f.name());
  ASSIGN_OR_RETURN(const std::string dir, ResolveDir(roots, m.dir()));
  ASSIGN_OR_RETURN(auto entries, ListDir(dir));
  for (const auto& [name, mode] : entries) {
    if (S_ISREG(mode) && wanted.count(name) == 0) {
      RETURN_IF_ERROR(Unlink(JoinPath(dir, name)));
    }
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
