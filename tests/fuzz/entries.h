// Fuzz entry points: each takes an input's bytes and runs them through the
// real parsing code the way a daemon does (the coordinator reading a spec or
// its journal, a worker decoding a frame or reading weights, the planner
// reading a profile). What the parser accepts is then checked against what
// must hold of it (a round trip gives the same thing back, a replayed
// journal rewrites cleanly); a broken invariant aborts (AQ_CHECK), as a
// memory error aborts under ASan, so libFuzzer reports either as a crash.
//
// The same functions serve the libFuzzer binaries (fuzzer_main.cc, built
// with tools/fuzz.sh) and tests/fuzz:corpus_test, which runs every corpus
// file through them in the normal build.
//
// Thread-safety: each entry may be called from one thread at a time (the
// journal entry uses a per-process temporary file).
#ifndef AQUEDUCT_TESTS_FUZZ_ENTRIES_H_
#define AQUEDUCT_TESTS_FUZZ_ENTRIES_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace aqueduct {
namespace fuzz {

// Each returns the parser's verdict on the input: OK when it was accepted
// (and its invariants held), else the error the daemon would report.

// Text-format or JSON JobSpec: ParseJobSpec, then CheckJobSpec and the step
// count, as CoordinatorCore::SubmitJob checks a submission.
absl::Status SpecEntry(const uint8_t* data, size_t size);

// A data-plane frame arriving at a receiver that expects a frame described
// by the input's first kFrameExpectationBytes bytes (frame_entry.cc); the
// rest is what arrives on the wire.
absl::Status FrameEntry(const uint8_t* data, size_t size);
constexpr size_t kFrameExpectationBytes = 10;

// The coordinator's journal file: JobJournal::Read, then a coordinator
// replaying it (CoordinatorCore::OpenJournal) and ticking past the
// adoption grace.
absl::Status JournalEntry(const uint8_t* data, size_t size);

// A safetensors file: ParseSafetensors, then a round trip through
// SerializeSafetensors.
absl::Status SafetensorsEntry(const uint8_t* data, size_t size);

// A profile, PipeDream's text or a JSON ModelProfile (ParseProfile picks by
// content), then text and proto round trips and, for small graphs, the
// planner under both cost models.
absl::Status ProfileEntry(const uint8_t* data, size_t size);

}  // namespace fuzz
}  // namespace aqueduct

#endif  // AQUEDUCT_TESTS_FUZZ_ENTRIES_H_
