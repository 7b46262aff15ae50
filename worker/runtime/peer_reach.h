// Which peer a stage's data-plane timeout is about, and whether that peer
// can be reached from here at all: what tells "this worker is cut off from
// its neighbour" (a network partition between the two) from "its
// neighbour is stalled waiting on someone else" (every stage of a pipeline
// whose link broke times out at about the same moment, since each waits on
// the next). The stage runtime (stage_job.cc) names the peer in the error
// it reports, and the coordinator names the pair in the job's restart.
//
// Thread-safe: stateless functions.
#ifndef AQUEDUCT_WORKER_RUNTIME_PEER_REACH_H_
#define AQUEDUCT_WORKER_RUNTIME_PEER_REACH_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace aqueduct {

// The rank a communicator's error names as the other end ("... from rank
// N", "... to rank N": common/comm/gloo_communicator.cc, in_memory.cc);
// nullopt when it names none.
std::optional<int> PeerRankOf(absl::string_view message);

struct PeerReach {
  // The host answered: a TCP connection was accepted or refused.
  bool answers = false;
  // What happened, for the error: "connected", "refused", "no answer
  // within 1s", or the socket error.
  std::string detail;
  // It was accepted: the process listening there (the peer's worker) is
  // alive. Refused: the host is up but the worker's port is closed.
  bool accepted = false;
};

// Opens (and closes) a TCP connection to `address` ("host:port", a
// numeric IPv4 or IPv6 host or a name) within `timeout`. Blocks up to
// `timeout` (plus name resolution for a name).
PeerReach ProbeTcp(const std::string& address, absl::Duration timeout);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_PEER_REACH_H_
