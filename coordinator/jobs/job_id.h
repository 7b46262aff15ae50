// Job ids clients cannot guess, and the randomness behind them.
//
// An id reads "job-<run>-<n>-<r>": <run> is the coordinator's start (hex
// Unix seconds), <n> the submission's number in that run and <r> 16 hex
// digits (64 bits) from the kernel's CSPRNG (getrandom(2)). The prefix
// keeps ids readable and in submission order by eye; the random part makes
// knowing one job's id (or the time it was submitted) useless for guessing
// another's, whose id names its rendezvous keys, checkpoints and model.
// Journals written before the random part hold ids "job-<run>-<n>"; those
// stay valid (ids are only compared whole).
//
// Thread-safety: stateless functions (getrandom is thread-safe).
#ifndef AQUEDUCT_COORDINATOR_JOBS_JOB_ID_H_
#define AQUEDUCT_COORDINATOR_JOBS_JOB_ID_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aqueduct {

// Hex digits of randomness in a job id (64 bits).
inline constexpr int kJobIdRandomHexDigits = 16;

// A new id "job-<run>-<number>-<16 hex digits>"; the errors of
// SecureRandomBytes.
absl::StatusOr<std::string> NewJobId(absl::string_view run, int64_t number);

// The <number> of an id of `run`, with or without the random part (ids of
// older journals); nullopt for an id of another run or another form.
std::optional<int64_t> JobIdNumber(absl::string_view id, absl::string_view run);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOBS_JOB_ID_H_
