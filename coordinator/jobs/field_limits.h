// Bounds on the sizes of what a client submits (a job spec, a profile),
// checked before anything is kept, journaled or shown: every string field
// (its size, and that it is UTF-8 without control characters), the number
// of strings in a repeated field, and the message as a whole.
// Generic over the message (protobuf reflection), so a string field added
// to the spec later is bounded too. The spec's numbers (counts, shapes,
// rates) are checked by the spec's own validation (pipeline/spec.h).
//
// Why: the coordinator keeps every job's spec and returns its name in each
// status; 750 jobs named with 100 KB each made ListJobs exceed the gRPC
// message limit, and the journal grows with what it is given. A name with
// ESC[2J or CR/LF in it was printed raw by `aq jobs` (issue 22, item 11):
// it cleared or forged lines on every terminal that listed the jobs.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_COORDINATOR_JOBS_FIELD_LIMITS_H_
#define AQUEDUCT_COORDINATOR_JOBS_FIELD_LIMITS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace aqueduct {

struct FieldLimits {
  // Fields called `name` (the job's, a layer's): shown in every listing.
  size_t max_name_bytes = 256;
  // Every other string: paths (PATH_MAX is 4096), policy names, ids.
  size_t max_string_bytes = 4096;
  // Elements of one repeated string field (text data files).
  int max_repeated_strings = 1024;
  // The whole message, serialized.
  size_t max_message_bytes = size_t{1} << 20;
};

// The limits of a job spec, and of a profile (thousands of layers, each
// with an id and a description).
FieldLimits SpecFieldLimits();
FieldLimits ProfileFieldLimits();

// OK when `message` is within `limits`; INVALID_ARGUMENT naming the first
// field over its limit (its path, e.g. "model.layers[2].name") with its
// size and the limit, or `what` ("the spec") when the whole is too big.
// Every `string` field (not `bytes`) must also be valid UTF-8 without a
// control character: C0 (tab included), DEL or C1; INVALID_ARGUMENT
// "<path>='<at most 64 bytes, escaped>' holds a control character ..."
// (or "... is not valid UTF-8") otherwise.
absl::Status CheckFieldSizes(const google::protobuf::Message& message,
                             const FieldLimits& limits, absl::string_view what);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOBS_FIELD_LIMITS_H_
