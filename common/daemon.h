// Helpers for the daemons' main(): parsing their flags (with --help and
// --version), waiting for SIGTERM/SIGINT on a dedicated thread (signals are
// blocked in every other thread), creating the state directory and writing
// small state files atomically. Only binaries use this.
#ifndef AQUEDUCT_COMMON_DAEMON_H_
#define AQUEDUCT_COMMON_DAEMON_H_

#include <sys/types.h>

#include <csignal>
#include <string>

#include "absl/status/status.h"

namespace aqueduct {

// Parses a daemon's command line: the flags defined in the source file
// ending with `main_file` (e.g. "coordinator/main.cc"), --help (which
// lists them with `description`) and --version. Exits 0 after --help or
// --version, 2 on a usage error (an unknown flag, a missing or malformed
// value, a positional argument), naming it.
void ParseDaemonFlags(const std::string& program,
                      const std::string& description,
                      const std::string& main_file, int argc, char** argv);

// Blocks SIGTERM and SIGINT in the calling thread (call before starting any
// other thread, so that they inherit the mask).
void BlockTerminationSignals();

// Waits for SIGTERM or SIGINT; returns the signal number.
int WaitForTerminationSignal();

// Creates directory `dir` with `mode` and any missing parents (0755), as
// `mkdir -p` does; OK if it exists already. Errors name the path.
absl::Status MakeDirectories(const std::string& dir, mode_t mode);

// Writes `content` to path via a temporary file and rename.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& content);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DAEMON_H_
