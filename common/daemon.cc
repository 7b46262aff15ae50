#include "common/daemon.h"

#include <fcntl.h>
#include <malloc.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
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

// ---- The connection cap (LimitIncomingConnections).

// accept4(2) itself, past the interposed accept4 and accept below.
int RawAccept(int listener, sockaddr* addr, socklen_t* len, int flags) {
  return static_cast<int>(syscall(SYS_accept4, listener, addr, len, flags));
}

// The sockets the process accepted and keeps, and the spare descriptor.
// Process-wide, as accept is: the one exception to "no singletons", since
// the calls come from inside gRPC and the HTTP server's library.
// Thread-safe.
class ConnectionGuard {
 public:
  static ConnectionGuard& Get() {
    static ConnectionGuard* guard = new ConnectionGuard();
    return *guard;
  }

  // Caps the accepted sockets kept at `cap` (0: no cap) and opens the
  // spare descriptor.
  void SetCap(int cap) {
    absl::MutexLock lock(&mu_);
    cap_ = cap;
    if (spare_ < 0) spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }

  // `fd` was just accepted: true to keep it, false (counted as refused)
  // when the cap is reached.
  bool Admit(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return true;
    absl::MutexLock lock(&mu_);
    if (cap_ > 0 && static_cast<int>(open_.size()) >= cap_) PruneLocked();
    if (cap_ > 0 && static_cast<int>(open_.size()) >= cap_) {
      refused_.fetch_add(1);
      return false;
    }
    open_[fd] = st.st_ino;
    if (spare_ < 0) spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return true;
  }

  // The process is out of descriptors: frees the spare, accepts the
  // pending connection of `listener` on it and closes both, then takes
  // the spare again. False (errno set) when there is no spare or nothing
  // was pending.
  bool Shed(int listener) {
    int spare;
    {
      absl::MutexLock lock(&mu_);
      spare = spare_;
      spare_ = -1;
    }
    if (spare < 0) return false;
    close(spare);
    const int fd = RawAccept(listener, nullptr, nullptr, SOCK_CLOEXEC);
    const int err = errno;
    if (fd >= 0) {
      close(fd);
      refused_.fetch_add(1);
    }
    {
      absl::MutexLock lock(&mu_);
      if (spare_ < 0) spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    errno = err;
    return fd >= 0;
  }

  int64_t refused() const { return refused_.load(); }

 private:
  ConnectionGuard() = default;

  // Forgets the sockets closed since (their descriptor is gone or now
  // names another file). At most every 100 ms: a flood of connections
  // beyond the cap costs one fstat per kept socket per 100 ms, not per
  // refused connection.
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto now = std::chrono::steady_clock::now();
    if (pruned_ && now - last_prune_ < std::chrono::milliseconds(100)) return;
    pruned_ = true;
    last_prune_ = now;
    for (auto it = open_.begin(); it != open_.end();) {
      struct stat st;
      const bool same = fstat(it->first, &st) == 0 && S_ISSOCK(st.st_mode) &&
                        st.st_ino == it->second;
      it = same ? std::next(it) : open_.erase(it);
    }
  }

  absl::Mutex mu_;
  int cap_ ABSL_GUARDED_BY(mu_) = 0;
  // Accepted sockets kept: descriptor -> the socket's inode.
  std::unordered_map<int, ino_t> open_ ABSL_GUARDED_BY(mu_);
  // Monotonic: a step of the wall clock must not stop the pruning.
  bool pruned_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_prune_ ABSL_GUARDED_BY(mu_);
  int spare_ ABSL_GUARDED_BY(mu_) = -1;
  std::atomic<int64_t> refused_{0};
};

bool IsNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_NONBLOCK) != 0;
}

// accept4 and accept as the daemons' listeners see them: only connections
// within the cap, and never EMFILE or ENFILE from a non-blocking listener
// (gRPC's), which gets EAGAIN instead and keeps listening. A blocking
// listener gets the error (a blocking accept never says EAGAIN; callers
// such as cpp-httplib sleep and retry on EMFILE).
int GuardedAccept(int listener, sockaddr* addr, socklen_t* len, int flags) {
  ConnectionGuard& guard = ConnectionGuard::Get();
  while (true) {
    const int fd = RawAccept(listener, addr, len, flags);
    if (fd >= 0) {
      if (guard.Admit(fd)) return fd;
      close(fd);
      continue;  // The next pending connection, or EAGAIN.
    }
    if (errno != EMFILE && errno != ENFILE) return -1;
    if (guard.Shed(listener)) continue;
    if (IsNonBlocking(listener)) errno = EAGAIN;
    return -1;
  }
}

}  // namespace
}  // namespace aqueduct

// The interposed accept calls (LimitIncomingConnections): the dynamic linker
// binds gRPC's and the HTTP server library's calls to these definitions in
// the executable.
extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return aqueduct::GuardedAccept(fd, addr, len, flags);
}

extern "C" int accept(int fd, sockaddr* addr, socklen_t* len) {
  return aqueduct::GuardedAccept(fd, addr, len, 0);
}

namespace aqueduct {

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
  PrepareDaemonProcess();
}

void PrepareDaemonProcess() {
  umask(077);
  // Gloo writes to its peers with writev, which cannot be told
  // MSG_NOSIGNAL: a write to a peer that just died would kill the daemon
  // with SIGPIPE, silently, instead of failing with EPIPE.
  signal(SIGPIPE, SIG_IGN);
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur < limit.rlim_max) {
    // An unlimited hard limit cannot be the soft one (the kernel's
    // fs.nr_open bounds it): ask for a million then.
    limit.rlim_cur =
        limit.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);  // Best effort: the old limit stays.
  }
  LimitIncomingConnections(kDefaultMaxConnections);
  // Fixed thresholds also turn off glibc's dynamic raising of them, which
  // is what kept the memory of freed large messages (issue 22, item 7).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
  mallopt(M_ARENA_MAX, 4);
}

bool ReturnFreeMemory() { return malloc_trim(0) != 0; }

int64_t DescriptorLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  return limit.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20
                                         : static_cast<int64_t>(limit.rlim_cur);
}

int LimitIncomingConnections(int max_connections) {
  const int cap = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(max_connections, DescriptorLimit() / 2)));
  ConnectionGuard::Get().SetCap(cap);
  return cap;
}

int64_t RefusedConnections() { return ConnectionGuard::Get().refused(); }

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

// ---- FileLock.

namespace {

// The pid in a lock file, or 0. A holder writes it just after it locks:
// give it a moment.
int64_t ReadLockHolder(int fd) {
  for (int attempt = 0; attempt < 10; ++attempt) {
    char text[32] = {};
    const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    int64_t pid = 0;
    if (n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid) &&
        pid > 0) {
      return pid;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return 0;
}

// Replaces the lock file's contents with this process's pid.
absl::Status WritePid(int fd, const std::string& path) {
  const std::string text = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) !=
                                   static_cast<ssize_t>(text.size())) {
    return absl::UnavailableError(absl::StrCat(
        "cannot write the pid into ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileLock>> FileLock::Acquire(
    const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const int64_t holder = err == EWOULDBLOCK ? ReadLockHolder(fd) : 0;
    close(fd);
    if (err != EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
    }
    return absl::FailedPreconditionError(
        holder > 0 ? absl::StrCat(path, " is held by pid ", holder)
                   : absl::StrCat(path, " is held by another process"));
  }
  std::unique_ptr<FileLock> lock(new FileLock(path, fd));
  if (absl::Status s = WritePid(fd, path); !s.ok()) {
    lock->pid_error_ = std::string(s.message());
  }
  return lock;
}

FileLock::~FileLock() { close(fd_); }

// ---- CheckKeyPair.

namespace {

// OpenSSL's latest error as text (and its queue cleared).
std::string OpenSslError() {
  const unsigned long code = ERR_peek_last_error();
  char text[256] = "no details";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return text;
}

// Never asks for a passphrase (OpenSSL's default prompts on the terminal).
int NoPassphrase(char*, int, int, void*) { return 0; }

}  // namespace

absl::Status CheckKeyPair(const std::string& cert_pem,
                          const std::string& key_pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> cert_bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())),
      &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, &NoPassphrase, nullptr),
      &X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert: no PEM certificate could be read (", OpenSslError(), ")"));
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())),
      &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, &NoPassphrase, nullptr),
      &EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key: no unencrypted PEM private key could be read (",
        OpenSslError(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key does not match --tls_cert: the key is not the private key "
        "of the certificate's public key (",
        OpenSslError(), ")"));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    return absl::InvalidArgumentError(
        "--tls_cert has expired (its notAfter date is past): renew it");
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
