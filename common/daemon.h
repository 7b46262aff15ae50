// Helpers for the daemons' main(): waiting for SIGTERM/SIGINT on a
// dedicated thread (signals are blocked in every other thread), and writing
// small state files atomically. Only binaries use this.
#ifndef AQUEDUCT_COMMON_DAEMON_H_
#define AQUEDUCT_COMMON_DAEMON_H_

#include <csignal>
#include <string>

#include "absl/status/status.h"

namespace aqueduct {

// Blocks SIGTERM and SIGINT in the calling thread (call before starting any
// other thread, so that they inherit the mask).
void BlockTerminationSignals();

// Waits for SIGTERM or SIGINT; returns the signal number.
int WaitForTerminationSignal();

// Writes `content` to path via a temporary file and rename.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& content);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DAEMON_H_
