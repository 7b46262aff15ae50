// Pagination of the coordinator's list calls (ListJobs; ListWorkers may use
// the same), as pure code.
//
// A page token is opaque to clients. It encodes the position of the last
// item returned, a sequence number in the order the list is kept (jobs: in
// submission order), and the run of the coordinator that issued it. The
// next page holds the items after that position, so items added while a
// client pages through appear once, on a later page, and items removed
// meanwhile shift nothing. Sequence numbers are per run: a token from
// before a restart is refused rather than silently skipping or repeating
// items (the client lists again from the first page).
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_COORDINATOR_JOBS_PAGES_H_
#define AQUEDUCT_COORDINATOR_JOBS_PAGES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aqueduct {

// The page size of a request: `requested`, `default_size` for 0, at most
// `max_size`. INVALID_ARGUMENT naming `field` when negative.
absl::StatusOr<int> PageSize(int64_t requested, int default_size, int max_size,
                             absl::string_view field);

// The token for the page after the item at `position` of run `run`.
std::string EncodePageToken(uint64_t run, int64_t position);

// The position a token encodes; -1 for "" (the first page).
// INVALID_ARGUMENT naming `field` for a token that is malformed or was
// issued by another run of the coordinator.
absl::StatusOr<int64_t> DecodePageToken(absl::string_view token, uint64_t run,
                                        absl::string_view field);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOBS_PAGES_H_
