// Checks of what a worker sends the coordinator (ids, addresses, free
// text, numbers), each an INVALID_ARGUMENT naming the field and the limit
// when it fails. A value is quoted in an error only through Quoted(): at
// most 64 bytes of it, escaped, so that a huge or binary field is never
// echoed back to its sender or into the coordinator's log.
//
// Why here and not in each caller: the registry, the progress checks and
// the rendezvous store all take names from the wire and must agree on what
// a name is.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_COORDINATOR_INPUT_CHECKS_H_
#define AQUEDUCT_COORDINATOR_INPUT_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace aqueduct {

// Bytes of a value an error message quotes.
inline constexpr size_t kMaxQuotedBytes = 64;

// 'value', C-escaped, cut to kMaxQuotedBytes with "..." and the full size
// when longer.
std::string Quoted(absl::string_view value);

// `name` as it is when it is a well-formed name of at most 128 bytes (see
// CheckName), else Quoted(name): for names from the wire in messages and
// logs.
std::string Shown(absl::string_view name);

// NOT_FOUND: "job 'ID' does not exist", the id quoted (at most
// kMaxQuotedBytes of it): a 15 KB id must not come back whole in the
// status (gRPC's clients refuse such trailers as RESOURCE_EXHAUSTED).
absl::Status JobNotFound(absl::string_view job_id);

// A name (worker id, incarnation, job id): 1 to `max_bytes` bytes of
// [A-Za-z0-9._:@-]. INVALID_ARGUMENT naming `field` otherwise.
absl::Status CheckName(absl::string_view field, absl::string_view value,
                       size_t max_bytes);

// Free text (a device's name, a version): at most `max_bytes` bytes of
// UTF-8 without control characters (FindControl with tab refused: they
// would forge lines in the log or drive a terminal). May be empty.
absl::Status CheckText(absl::string_view field, absl::string_view value,
                       size_t max_bytes);

// Where `text` first holds what a terminal acts on or cannot show: a C0
// control (U+0000-U+001F; tab only when `allow_tab` is false), DEL, a C1
// control (U+0080-U+009F) or a byte that is not part of valid UTF-8
// (truncated, overlong or surrogate sequences, beyond U+10FFFF).
// absl::string_view::npos when it holds none.
size_t FindControl(absl::string_view text, bool allow_tab);

// `text` safe to print on a terminal or in a log line: every byte of what
// FindControl finds (tab allowed) as a visible "\xNN" escape ("\x1b[2J",
// "\x0d\x0a"); tab, printable ASCII and valid multi-byte UTF-8 as they
// are. Backslashes are kept as they are, so this is for showing, not a
// reversible encoding. At most `max_bytes` bytes: it stops before the
// character or escape that would exceed them (never inside one).
std::string EscapeControls(
    absl::string_view text,
    size_t max_bytes = std::numeric_limits<size_t>::max());

// "host:port" of at most 255 bytes: a host name or IPv4 address of
// [A-Za-z0-9._-], or an IPv6 address in brackets, and a port in 1-65535.
absl::Status CheckAddress(absl::string_view field, absl::string_view value);

// `value` in [lo, hi]; `what_hi` (may be empty) says what the upper bound
// is, e.g. "the job's total steps".
absl::Status CheckInt(absl::string_view field, int64_t value, int64_t lo,
                      int64_t hi, absl::string_view what_hi = "");

// `value` finite and in [lo, hi].
absl::Status CheckFinite(absl::string_view field, double value, double lo,
                         double hi);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_INPUT_CHECKS_H_
