// Link bandwidth between two workers, measured over a real TCP connection:
// one side runs a LinkProbeServer, the other calls MeasureLink. The probe
// sends a 16-byte header (magic, byte count), streams the bytes, and waits
// for the server's 8-byte acknowledgement that it received them all; a
// separate small ping measures the round trip. Used by the planner's
// topology (bandwidth per level).
//
// LinkProbeServer is thread-safe; it serves one probe at a time on its own
// thread. MeasureLink is thread-safe (no shared state).
#ifndef AQUEDUCT_WORKER_LINK_PROBE_H_
#define AQUEDUCT_WORKER_LINK_PROBE_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace aqueduct {

class LinkProbeServer {
 public:
  // Listens on host:port (port 0: an ephemeral port, see port()).
  static absl::StatusOr<std::unique_ptr<LinkProbeServer>> Start(
      const std::string& host, int port);
  ~LinkProbeServer();  // Stops serving and joins the thread.

  int port() const { return port_; }

 private:
  LinkProbeServer(int fd, int port);
  void Serve();

  int listen_fd_;
  int port_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

struct LinkMeasurement {
  double bytes_per_second = 0;
  double round_trip_ms = 0;
  int64_t bytes = 0;
};

// Sends `bytes` bytes to a LinkProbeServer at host:port. Every step has a
// deadline: DEADLINE_EXCEEDED if the whole probe takes longer than
// `deadline`, UNAVAILABLE if the peer cannot be reached, INVALID_ARGUMENT
// for a bad host or byte count, DATA_LOSS for a wrong acknowledgement.
absl::StatusOr<LinkMeasurement> MeasureLink(const std::string& host, int port,
                                            int64_t bytes,
                                            absl::Duration deadline);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_LINK_PROBE_H_
