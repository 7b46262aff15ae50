// Aqueduct's software version. Workers and the coordinator must share the
// major version; the proto hash identifies the protocol definitions.
#ifndef AQUEDUCT_COMMON_VERSION_H_
#define AQUEDUCT_COMMON_VERSION_H_

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace aqueduct {

inline constexpr char kVersion[] = "0.1.0";
// Bumped with every incompatible change to proto/*.proto.
inline constexpr char kProtoHash[] = "aqueduct.v1/2026-11-22";

// The major component of "MAJOR.MINOR.PATCH", or -1 if unparsable.
inline int MajorVersion(absl::string_view version) {
  const size_t dot = version.find('.');
  int major = -1;
  if (!absl::SimpleAtoi(version.substr(0, dot), &major)) return -1;
  return major;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_VERSION_H_
