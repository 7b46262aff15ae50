#include "common/daemon.h"

#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/file_system.h"
#include "common/security.h"
#include "common/version.h"

namespace aqueduct {

namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// mkdir(2) that accepts an existing directory.
absl::Status MakeOne(const std::string& path, mode_t mode,
                     const std::string& target) {
  if (mkdir(path.c_str(), mode) == 0 || IsDirectory(path)) {
    return absl::OkStatus();
  }
  const int err = errno;
  const std::string which =
      path == target ? "" : absl::StrCat(" (a parent of ", target, ")");
  if (err == EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create directory ", path, which, ": not a directory"));
  }
  return absl::UnavailableError(absl::StrCat("cannot create directory ", path,
                                             which, ": ", std::strerror(err)));
}

}  // namespace

void ParseDaemonFlags(const std::string& program,
                      const std::string& description,
                      const std::string& main_file, int argc, char** argv) {
  CommandLineSpec spec;
  spec.program = program;
  spec.synopsis = "[flags]";
  spec.description = description;
  spec.flags = FlagsDefinedIn(main_file);
  for (FlagUse& f : SecurityFlags()) spec.flags.push_back(std::move(f));
  std::sort(spec.flags.begin(), spec.flags.end(),
            [](const FlagUse& a, const FlagUse& b) { return a.name < b.name; });
  spec.version = VersionText(program);
  const ParsedArgs parsed =
      ParseArgs(spec, std::vector<std::string>(argv + 1, argv + argc));
  if (parsed.exit_code.has_value()) std::exit(*parsed.exit_code);
  if (!parsed.positional.empty()) {
    std::exit(
        UsageError(spec, "unexpected argument '" + parsed.positional[0] + "'"));
  }
}

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set = TerminationSignals();
  int signal = 0;
  while (sigwait(&set, &signal) != 0) {
  }
  return signal;
}

absl::Status MakeDirectories(const std::string& dir, mode_t mode) {
  std::string path = dir;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty()) return absl::InvalidArgumentError("empty directory name");
  if (IsDirectory(path)) return absl::OkStatus();
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    if (path[slash - 1] == '/') continue;
    if (absl::Status s = MakeOne(path.substr(0, slash), 0755, path); !s.ok()) {
      return s;
    }
  }
  return MakeOne(path, mode, path);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& content) {
  absl::Status s = WriteFileAtomically(DefaultFileSystem(), path, content);
  if (s.ok()) return s;
  std::remove((path + ".tmp").c_str());
  return absl::UnavailableError(
      absl::StrCat("cannot write ", path, ": ", s.message()));
}

}  // namespace aqueduct
