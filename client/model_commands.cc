// aq weights, aq checkpoints and aq verify-checkpoint: a job's trained
// model fetched from the coordinator into a local file (written to
// FILE.part, its size and CRC-32 checked, then renamed to FILE), the job's
// committed checkpoints, and one checkpoint on disk checked offline.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/remote.h"
#include "client/terminal_text.h"
#include "common/checkpoint.h"
#include "common/status.h"
#include "proto/service_types.h"
#include "zlib.h"

namespace aqueduct {
namespace {

constexpr char kWeightsDescription[] =
    "Fetches a job's trained model (a safetensors file, docs/weights.md)\n"
    "from the coordinator into FILE: written to FILE.part, its size and\n"
    "CRC-32 checked, then renamed to FILE. A job has a model once it has\n"
    "SUCCEEDED (aq status JOB shows it).\n";
constexpr char kCheckpointsDescription[] =
    "Lists a job's committed checkpoints, oldest first: version (optimizer\n"
    "steps applied), when it was committed, the attempt that wrote it, its\n"
    "files, their total size and its directory. aq submit SPEC --resume\n"
    "JOB|DIRECTORY starts a job from one.\n";

constexpr char kVerifyDescription[] =
    "Checks a checkpoint on this machine, without the coordinator: PATH is a\n"
    "version directory (<dir>/<job>/v<version>) or its manifest.json. The\n"
    "manifest must parse and record the directory's version, every file it\n"
    "lists must have the recorded size and CRC-32, and the files must hold\n"
    "every layer of the model exactly once and parse as safetensors. Exit 0\n"
    "when it would load, 1 (with the reason) when it would not.\n";

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

// A model received chunk by chunk into <path>.part, checked as it comes
// (each chunk where the previous one ended, the same size and CRC-32 on
// every chunk) and at the end (size, CRC-32), then renamed to `path`.
// Dropped before Finish succeeds, it removes the .part file.
class ModelFile {
 public:
  explicit ModelFile(std::string path)
      : path_(std::move(path)), part_(path_ + ".part") {}
  ~ModelFile() {
    if (fd_ >= 0) close(fd_);
    if (!done_) std::remove(part_.c_str());
  }
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  absl::Status Open() {
    fd_ = open(part_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    return fd_ >= 0 ? absl::OkStatus() : Errno("write", part_);
  }

  // Writes `chunk`; false (see error()) when it does not follow the
  // previous ones or cannot be written.
  bool Take(const v1::ModelChunk& chunk) {
    error_ = Check(chunk);
    if (error_.ok()) error_ = Write(chunk.data());
    return error_.ok();
  }

  // After the last chunk: checks the size and CRC-32, syncs, renames.
  absl::Status Finish() {
    RETURN_IF_ERROR(error_);
    if (!started_) return absl::DataLossError("the coordinator sent no data");
    if (written_ != total_) {
      return absl::DataLossError(absl::StrCat("the coordinator sent ", written_,
                                              " of the model's ", total_,
                                              " bytes"));
    }
    if (crc_ != expected_crc_) {
      return absl::DataLossError(absl::StrCat("the model received has CRC-32 ",
                                              crc_, ", not the announced ",
                                              expected_crc_));
    }
    if (fsync(fd_) != 0) return Errno("sync", part_);
    const int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) return Errno("write", part_);
    if (std::rename(part_.c_str(), path_.c_str()) != 0) {
      return Errno("rename " + part_ + " to", path_);
    }
    done_ = true;
    return absl::OkStatus();
  }

  const absl::Status& error() const { return error_; }
  int64_t bytes() const { return written_; }
  uint32_t crc32() const { return crc_; }

 private:
  absl::Status Check(const v1::ModelChunk& chunk) {
    if (!started_) {
      if (chunk.total_bytes() < 0) {
        return absl::DataLossError(
            absl::StrCat("the coordinator announced a model of ",
                         chunk.total_bytes(), " bytes"));
      }
      started_ = true;
      total_ = chunk.total_bytes();
      expected_crc_ = chunk.crc32();
    }
    if (chunk.total_bytes() != total_ || chunk.crc32() != expected_crc_) {
      return absl::DataLossError("the model changed while it was fetched");
    }
    if (chunk.offset() != written_) {
      return absl::DataLossError(absl::StrCat("a chunk at offset ",
                                              chunk.offset(), " where ",
                                              written_, " was expected"));
    }
    if (static_cast<uint64_t>(chunk.data().size()) >
        static_cast<uint64_t>(total_ - written_)) {
      return absl::DataLossError(absl::StrCat(
          "the coordinator sent more than the model's ", total_, " bytes"));
    }
    return absl::OkStatus();
  }

  absl::Status Write(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = write(fd_, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("write", part_);
      done += static_cast<size_t>(n);
    }
    written_ += static_cast<int64_t>(data.size());
    crc_ = static_cast<uint32_t>(crc32_z(
        crc_, reinterpret_cast<const Bytef*>(data.data()), data.size()));
    return absl::OkStatus();
  }

  const std::string path_;
  const std::string part_;
  int fd_ = -1;
  bool started_ = false;
  bool done_ = false;
  int64_t total_ = 0;
  int64_t written_ = 0;
  uint32_t expected_crc_ = 0;
  uint32_t crc_ = 0;
  absl::Status error_;
};

CommandLineSpec WeightsSpec() {
  CommandLineSpec spec = SubcommandSpec(
      "weights", "JOB -o FILE [flags]", kWeightsDescription,
      {{"output_file", "FILE", "where to write the model (required)"},
       CoordinatorFlag(),
       OutputFlag()});
  spec.aliases = {{"o", "output_file"}, {"out", "output_file"}};
  return spec;
}

void PrintWritten(const std::string& job, const std::string& path,
                  const ModelFile& file) {
  if (JsonOutput()) {
    std::cout << "{\"job_id\":" << JsonString(job)
              << ",\"file\":" << JsonString(path)
              << ",\"bytes\":" << file.bytes() << ",\"crc32\":" << file.crc32()
              << "}" << std::endl;
  } else {
    std::cout << "wrote " << path << " (" << file.bytes() << " bytes, model of "
              << job << ")" << std::endl;
  }
}

std::string CommittedTime(int64_t ms) {
  if (ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(ms),
                          absl::LocalTimeZone());
}

void PrintCheckpointTable(const v1::ListCheckpointsResponse& response) {
  std::cout << absl::StrFormat("%-8s %-19s %-7s %-5s %-12s %s\n", "version",
                               "committed", "attempt", "files", "bytes",
                               "directory");
  for (const CheckpointManifest& m : response.checkpoints()) {
    int64_t bytes = 0;
    for (const CheckpointFile& f : m.files()) bytes += f.bytes();
    std::cout << absl::StrFormat("%-8s %-19s %-7d %-5d %-12d %s\n",
                                 absl::StrCat("v", m.version()),
                                 CommittedTime(m.committed_ms()), m.attempt(),
                                 m.files_size(), bytes, Printable(m.dir()));
  }
}

// The version a directory's name v<digits> gives, or -1 for another name.
int64_t VersionOfDirName(const std::string& dir) {
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  const size_t slash = name.find_last_of('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  if (name.size() < 2 || name.size() > 19 || name[0] != 'v') return -1;
  int64_t version = 0;
  for (size_t i = 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    version = version * 10 + (name[i] - '0');
  }
  return version;
}

// Reads, verifies and loads the checkpoint at `path`.
absl::StatusOr<v1::CheckpointManifest> CheckCheckpoint(
    const std::string& path) {
  ASSIGN_OR_RETURN(v1::CheckpointManifest m,
                   ReadManifest(PathRoots::Anywhere(), path));
  const int64_t named = VersionOfDirName(m.dir());
  if (named >= 0 && named != m.version()) {
    return absl::FailedPreconditionError(
        absl::StrCat(m.dir(), ": the manifest records version ", m.version()));
  }
  RETURN_IF_ERROR(VerifyCheckpoint(PathRoots::Anywhere(), m));
  // Every tensor read and parsed, as a job resuming from it would.
  RETURN_IF_ERROR(
      LoadCheckpointLayers(PathRoots::Anywhere(), m, 0, m.num_layers())
          .status());
  return m;
}

void PrintVerified(const v1::CheckpointManifest& m) {
  int64_t bytes = 0;
  for (const CheckpointFile& f : m.files()) bytes += f.bytes();
  if (JsonOutput()) {
    std::cout << "{\"job_id\":" << JsonString(m.job_id())
              << ",\"version\":" << m.version()
              << ",\"dir\":" << JsonString(m.dir())
              << ",\"files\":" << m.files_size() << ",\"bytes\":" << bytes
              << ",\"layers\":" << m.num_layers() << ",\"ok\":true}"
              << std::endl;
  } else {
    std::cout << "checkpoint v" << m.version() << " of "
              << Printable(m.job_id()) << ": " << m.files_size() << " files, "
              << bytes << " bytes, " << m.num_layers() << " layers: OK"
              << std::endl;
  }
}

}  // namespace

int FetchModel(const std::string& job, const std::string& path, bool quiet) {
  if (absl::Status s = CheckWritable(path); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  ModelFile file(path);
  if (absl::Status s = file.Open(); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  Remote remote;
  v1::GetModelRequest request;
  request.set_job_id(job);
  const absl::Status s = remote.client().GetModel(
      request, kModelTimeout,
      [&file](const v1::ModelChunk& chunk) { return file.Take(chunk); });
  if (!s.ok()) return remote.Failed(s);
  if (absl::Status f = file.Finish(); !f.ok()) {
    return Fail(absl::StrCat("the model of job ", job, ": ", f.message()));
  }
  if (!quiet) PrintWritten(job, path, file);
  return kExitOk;
}

int WeightsMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = WeightsSpec();
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  const std::string path = absl::GetFlag(FLAGS_output_file);
  if (path.empty()) return UsageError(spec, "weights needs -o FILE");
  return FetchModel(parsed.positional[0], path, /*quiet=*/false);
}

int CheckpointsMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec =
      SubcommandSpec("checkpoints", "JOB [flags]", kCheckpointsDescription,
                     {CoordinatorFlag(), OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  Remote remote;
  v1::ListCheckpointsRequest request;
  request.set_job_id(parsed.positional[0]);
  const auto response = remote.client().ListCheckpoints(request, kQueryTimeout);
  if (!response.ok()) return remote.Failed(response.status());
  if (JsonOutput()) {
    std::cout << (response->checkpoints().empty() ? "{\"checkpoints\":[]}"
                                                  : ProtoJson(*response))
              << std::endl;
  } else if (response->checkpoints().empty()) {
    std::cout << "no checkpoints" << std::endl;
  } else {
    PrintCheckpointTable(*response);
  }
  return kExitOk;
}

int VerifyCheckpointMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = SubcommandSpec(
      "verify-checkpoint", "PATH [flags]", kVerifyDescription, {OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  const std::string& path = parsed.positional[0];
  if (path.empty()) return UsageError(spec, "PATH is empty");
  const absl::StatusOr<v1::CheckpointManifest> m = CheckCheckpoint(path);
  if (!m.ok()) {
    return Fail(absl::StrCat("checkpoint ", path,
                             " does not verify: ", m.status().message()));
  }
  PrintVerified(*m);
  return kExitOk;
}

}  // namespace aqueduct
