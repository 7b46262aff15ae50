// Overrides of a job spec at submit (`aq submit`, `aq train-local`):
// `--set path=value` for any scalar field, by its dotted path from JobSpec
// (proto/job.proto): `--set max_steps=100 --set pipeline.workers=2 --set
// optimizer.adam.lr=3e-4 --set pipeline.schedule=zb_h1`.
//
// Thread-safety: pure functions.
#ifndef AQUEDUCT_CLIENT_SPEC_OVERRIDES_H_
#define AQUEDUCT_CLIENT_SPEC_OVERRIDES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/types.h"

namespace aqueduct {

// Applies each "path=value" in order. A path names fields by their
// proto names, each a message but the last, which is a number, a bool
// (true, false, 1, 0), a string or an enum (by value name, or its name
// without the type's prefix: SCHEDULE_ZB_H1 or zb_h1). Setting a field of
// a oneof's member selects that member. INVALID_ARGUMENT naming the
// override and what is wrong: no '=', an unknown field (with the fields
// there are), a message or list where a scalar is wanted, a value that is
// not of the field's type.
absl::Status ApplySpecOverrides(const std::vector<std::string>& sets,
                                JobSpec* spec);

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_SPEC_OVERRIDES_H_
