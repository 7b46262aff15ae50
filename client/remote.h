// aq's side of talking to a coordinator: the address (--coordinator, else
// $AQ_COORDINATOR, else 127.0.0.1:7070), a CoordinatorClient
// (common/coordinator_client.h) over it, the deadlines aq uses, and failed
// calls turned into aq's exit codes. The remote commands (submit, status,
// watch, jobs, workers, cancel, trace, plan JOB, weights, checkpoints) are
// built on this. Not thread-safe (used from main).
#ifndef AQUEDUCT_CLIENT_REMOTE_H_
#define AQUEDUCT_CLIENT_REMOTE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"
#include "google/protobuf/message.h"

namespace aqueduct {

// Deadlines of aq's calls.
inline constexpr absl::Duration kQueryTimeout = absl::Seconds(10);
inline constexpr absl::Duration kSubmitTimeout = absl::Seconds(30);
inline constexpr absl::Duration kTraceTimeout = absl::Seconds(60);
// Fetching a trained model (up to the coordinator's size limit).
inline constexpr absl::Duration kModelTimeout = absl::Hours(1);
// A watch lasts as long as the job; a day bounds it.
inline constexpr absl::Duration kWatchTimeout = absl::Hours(24);

// --coordinator, else $AQ_COORDINATOR, else 127.0.0.1:7070.
std::string CoordinatorAddress();

// What an UNAVAILABLE `status` says of a TLS mismatch, to append to it: a
// plaintext client (`tls` false) whose connection the coordinator closed
// at once, or a TLS client whose handshake failed; "" otherwise.
std::string TlsMismatchHint(const absl::Status& status, bool tls);

class Remote {
 public:
  // A client for CoordinatorAddress() (connects lazily).
  Remote();
  // A given client (tests).
  Remote(std::string address, std::unique_ptr<CoordinatorClient> client);

  CoordinatorClient& client() { return *client_; }
  const std::string& address() const { return address_; }

  // Prints why the call failed on stderr (the coordinator's message
  // Printable(), terminal_text.h); returns 3 when the coordinator could not
  // be reached (UNAVAILABLE, DEADLINE_EXCEEDED), else 1.
  int Failed(const absl::Status& status) const;

 private:
  std::string address_;
  std::unique_ptr<CoordinatorClient> client_;
  bool tls_ = false;     // The client speaks TLS (--tls_ca).
  std::string context_;  // The context applied, if any.
};

// `message` as one line of JSON with the proto field names;
// `print_defaults` also prints fields left at their defaults.
std::string ProtoJson(const google::protobuf::Message& message,
                      bool print_defaults = false);

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_REMOTE_H_
