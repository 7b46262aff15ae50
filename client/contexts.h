// aq's named contexts (proto/client_config.proto): a coordinator and the
// credentials to reach it under a name, kept in a configuration file, as
// kubectl's contexts.
//
// Where each setting of a remote command comes from, first that has it:
//   1. its flag (--coordinator, --tls_ca, --tls_cert, --tls_key,
//      --token_file);
//   2. the context named by --context or $AQ_CONTEXT;
//   3. the environment (AQ_COORDINATOR, AQ_TLS_CA, ..., as
//      <state-dir>/aq.env sets them);
//   4. the file's current context;
//   5. the defaults (127.0.0.1:7070, plaintext, no token).
//
// Not thread-safe (used from main).
#ifndef AQUEDUCT_CLIENT_CONTEXTS_H_
#define AQUEDUCT_CLIENT_CONTEXTS_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/client_config.pb.h"

namespace aqueduct {

// $AQ_CONFIG, else $XDG_CONFIG_HOME/aq/config, else ~/.config/aq/config.
std::string AqConfigPath();

// The file at `path`; an empty config when there is none. Errors name the
// file (and the line of a syntax error) and what is wrong.
absl::StatusOr<v1::AqConfig> LoadAqConfig(const std::string& path);

// Writes `config` to `path` atomically, mode 0600 (it names credentials),
// creating its directory.
absl::Status SaveAqConfig(const std::string& path, const v1::AqConfig& config);

// The context named `name`, or nullptr.
const v1::AqContext* FindContext(const v1::AqConfig& config,
                                 const std::string& name);

// Sets the flags of remote commands that their command line left empty
// from the context that applies (rules above). Returns the context's name
// ("" if none applies). NOT_FOUND naming the file and its contexts when
// --context or $AQ_CONTEXT names one it does not have.
absl::StatusOr<std::string> ApplyContext();

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_CONTEXTS_H_
