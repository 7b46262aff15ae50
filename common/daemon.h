// Helpers for the daemons' main(): parsing their flags (with --help and
// --version), preparing the process (a private umask, the descriptor
// limit, a cap on accepted connections), waiting for SIGTERM/SIGINT on a
// dedicated thread (signals are blocked in every other thread), creating
// the state directory, locking it, writing small state files atomically and
// checking a TLS key against its certificate. Only binaries use this: no
// logging here (callers log what these return).
//
// Thread-safety: call ParseDaemonFlags, PrepareDaemonProcess and
// LimitIncomingConnections from main before other threads start; the
// rest is thread-safe.
#ifndef AQUEDUCT_COMMON_DAEMON_H_
#define AQUEDUCT_COMMON_DAEMON_H_

#include <sys/types.h>

#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace aqueduct {

// Parses a daemon's command line: the flags defined in the source file
// ending with `main_file` (e.g. "coordinator/main.cc"), --help (which
// lists them with `description`) and --version. Exits 0 after --help or
// --version, 2 on a usage error (an unknown flag, a missing or malformed
// value, a positional argument), naming it. Then PrepareDaemonProcess().
void ParseDaemonFlags(const std::string& program,
                      const std::string& description,
                      const std::string& main_file, int argc, char** argv);

// What every daemon does before it opens anything: umask 077 (every file
// and directory it creates is its user's alone: journals, logs, traces,
// models, checkpoints), SIGPIPE ignored (a write to a peer that died fails
// with EPIPE instead of killing the process: Gloo writes with writev),
// the soft RLIMIT_NOFILE raised to the hard limit,
// LimitIncomingConnections(kDefaultMaxConnections), and glibc's malloc told
// to give large freed blocks back (blocks of 1 MiB and more mapped on their
// own, a fixed trim threshold of 8 MiB, at most 4 arenas): a burst of large
// messages must not leave the process at its peak for good.
void PrepareDaemonProcess();

// Gives the memory malloc holds free back to the system (malloc_trim); the
// daemons call it every few seconds. Returns whether any was given back.
bool ReturnFreeMemory();

// The soft RLIMIT_NOFILE: the most descriptors the process may hold.
int64_t DescriptorLimit();

inline constexpr int kDefaultMaxConnections = 8192;

// Caps the TCP connections the process keeps accepted at once, all its
// listening ports together (gRPC, health, HTTP): at most
// min(max_connections, DescriptorLimit() / 2), leaving the other half of
// the descriptors for the daemon's files and its own outgoing
// connections. A connection beyond the cap is accepted and closed at once
// (the client sees the connection close). Also keeps one spare descriptor
// so that a listener that meets EMFILE takes and drops the pending
// connection instead of failing: gRPC 1.51 stops listening for good after
// one failed accept4 ("Failed accept4: Too many open files"). Returns the
// cap in force.
//
// How: the daemons define accept4(2) and accept(2) (daemon.cc), which
// gRPC's and the HTTP server's shared libraries call (the dynamic linker
// binds their calls to the executable's definitions); gRPC 1.51 offers no
// connection limit of its own (no GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS).
int LimitIncomingConnections(int max_connections);

// Connections refused by the cap (or dropped at EMFILE) since start.
int64_t RefusedConnections();

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

// An exclusive flock(2) on a lock file, held while this object lives (and
// by nobody else: the descriptor is close-on-exec), with the holder's pid
// written in the file.
class FileLock {
 public:
  // Locks `path` (created mode 0600 if missing) without waiting.
  // FAILED_PRECONDITION "<path> is held by pid N" when another process (or
  // another FileLock) holds it ("by another process" when its pid cannot
  // be read); UNAVAILABLE naming the path when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<FileLock>> Acquire(
      const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  const std::string& path() const { return path_; }
  // Why the pid could not be written (a full disk), or empty. The lock is
  // held all the same; a second process then cannot name the holder.
  const std::string& pid_error() const { return pid_error_; }

 private:
  FileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  const int fd_;
  std::string pid_error_;
};

// Checks that `key_pem` is the private key of the first certificate in
// `cert_pem` (OpenSSL's X509_check_private_key) and that the certificate
// has not expired. INVALID_ARGUMENT naming --tls_cert or --tls_key and the
// problem otherwise (a key that does not match, text that is not PEM, an
// encrypted key).
absl::Status CheckKeyPair(const std::string& cert_pem,
                          const std::string& key_pem);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DAEMON_H_
