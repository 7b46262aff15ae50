#include "worker/data/sentencepiece.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

extern char** environ;

namespace aqueduct {
namespace spm {

namespace {

// Each tool run ends within this (a corpus of 1 GiB encodes in minutes).
constexpr std::chrono::seconds kToolDeadline{3600};

// A directory of temporary files, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string t =
        absl::StrCat(base != nullptr ? base : "/tmp", "/aq-spm-XXXXXX");
    if (mkdtemp(t.data()) != nullptr) path_ = t;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  bool ok() const { return !path_.empty(); }
  std::string File(const std::string& name) const {
    return absl::StrCat(path_, "/", name);
  }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits for `pid` until the deadline, then kills it; its exit status.
int WaitWithDeadline(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + kToolDeadline;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

// Runs `argv` (the tool first, found on PATH) with its stdout into `out`
// and stderr into `err`; the error names the tool, its exit and stderr.
absl::Status RunTool(const std::vector<std::string>& argv,
                     const std::string& out, const std::string& err) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr,
                              args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(argv[0], " cannot run (", std::strerror(rc),
                     "): Debian's sentencepiece package provides it"));
  }
  const int status = WaitWithDeadline(pid);
  if (status == 0) return absl::OkStatus();
  std::string message = ReadAll(err);
  if (message.size() > 2000) message = message.substr(message.size() - 2000);
  return absl::InvalidArgumentError(
      absl::StrCat(argv[0], status < 0 ? " ran past its deadline" : " failed",
                   ": ", message));
}

// The ids of every line of spm_encode's output.
absl::StatusOr<std::vector<std::vector<int32_t>>> ParseIdLines(
    const std::string& text) {
  std::vector<std::vector<int32_t>> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<int32_t>& ids = lines.emplace_back();
    for (absl::string_view word :
         absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(word, &id)) {
        return absl::InternalError(
            absl::StrCat("spm_encode wrote '", word, "', not an id"));
      }
      ids.push_back(id);
    }
  }
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pieces>> Pieces::Load(const std::string& path) {
  TempDir tmp;
  if (!tmp.ok()) return absl::InternalError("no temporary directory");
  const std::string vocab = tmp.File("vocab");
  RETURN_IF_ERROR(
      RunTool({"spm_export_vocab", "--model=" + path}, vocab, tmp.File("err")));
  auto pieces = std::unique_ptr<Pieces>(new Pieces());
  pieces->path_ = path;
  for (absl::string_view line :
       absl::StrSplit(ReadAll(vocab), '\n', absl::SkipEmpty())) {
    const std::string piece(line.substr(0, line.find('\t')));
    if (piece == "<0x0A>") {
      pieces->newline_ = static_cast<int32_t>(pieces->pieces_.size());
    }
    pieces->pieces_.push_back(piece);
  }
  if (pieces->newline_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": the model has no byte piece <0x0A> (train it with "
                     "--byte_fallback, as aq tokenize does)"));
  }
  return pieces;
}

absl::StatusOr<std::vector<int32_t>> Pieces::EncodeFile(
    const std::string& path) const {
  TempDir tmp;
  if (!tmp.ok()) return absl::InternalError("no temporary directory");
  const std::string out = tmp.File("ids");
  RETURN_IF_ERROR(
      RunTool({"spm_encode", "--model=" + path_, "--output_format=id", path},
              out, tmp.File("err")));
  ASSIGN_OR_RETURN(auto lines, ParseIdLines(ReadAll(out)));
  // A newline after every line but a last one the file does not end.
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto size = static_cast<int64_t>(in.tellg());
  char last = '\n';
  if (size > 0) {
    in.seekg(size - 1);
    in.get(last);
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < lines.size(); ++i) {
    ids.insert(ids.end(), lines[i].begin(), lines[i].end());
    if (i + 1 < lines.size() || last == '\n') ids.push_back(newline_);
  }
  return ids;
}

absl::StatusOr<std::vector<int32_t>> Pieces::Encode(
    const std::string& text) const {
  TempDir tmp;
  if (!tmp.ok()) return absl::InternalError("no temporary directory");
  const std::string in = tmp.File("text");
  std::ofstream(in, std::ios::binary) << text;
  return EncodeFile(in);
}

absl::StatusOr<std::string> Pieces::Decode(
    absl::Span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at position ", i,
                       " is outside the vocabulary [0, ", size(), ")"));
    }
  }
  TempDir tmp;
  if (!tmp.ok()) return absl::InternalError("no temporary directory");
  // One line of ids per line of text: the newlines cut the lines.
  std::string lines;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == newline_) {
      lines += '\n';
      continue;
    }
    if (!lines.empty() && lines.back() != '\n') lines += ' ';
    absl::StrAppend(&lines, ids[i]);
  }
  const bool open_line = !lines.empty() && lines.back() != '\n';
  if (open_line) lines += '\n';
  const std::string in = tmp.File("ids"), out = tmp.File("text");
  std::ofstream(in, std::ios::binary) << lines;
  RETURN_IF_ERROR(
      RunTool({"spm_decode", "--model=" + path_, "--input_format=id", in}, out,
              tmp.File("err")));
  std::string text = ReadAll(out);
  if (open_line && !text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

absl::Status Train(const std::vector<std::string>& files,
                   const std::string& prefix, int64_t vocab_size,
                   const std::string& model_type, int threads) {
  for (const std::string& f : files) {
    if (f.find_first_of(" ,\t\n") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", f, "': spm_train cannot take a path with a space or a comma"));
    }
  }
  TempDir tmp;
  if (!tmp.ok()) return absl::InternalError("no temporary directory");
  return RunTool(
      {"spm_train", "--input=" + absl::StrJoin(files, ","),
       "--model_prefix=" + prefix, absl::StrCat("--vocab_size=", vocab_size),
       "--model_type=" + model_type, "--byte_fallback=true",
       "--character_coverage=1.0", "--normalization_rule_name=identity",
       "--remove_extra_whitespaces=false", "--add_dummy_prefix=false",
       "--split_digits=true", "--max_sentence_length=65536",
       absl::StrCat("--num_threads=", threads)},
      tmp.File("out"), tmp.File("err"));
}

}  // namespace spm
}  // namespace aqueduct
