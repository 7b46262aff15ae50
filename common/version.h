// Aqueduct's software version. Workers and the coordinator must share the
// major version; the proto hash identifies the protocol definitions. Also
// what each binary's --version prints: the version, the protocol and how
// the binary was built.
#ifndef AQUEDUCT_COMMON_VERSION_H_
#define AQUEDUCT_COMMON_VERSION_H_

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

// How the including binary was compiled: compiler, optimisation,
// assertions and vector extensions, e.g. "GCC 12.2.0, optimised, NDEBUG,
// AVX2".
inline constexpr char kBuild[] =
#if defined(__clang__)
    "clang " __clang_version__
#elif defined(__GNUC__)
    "GCC " __VERSION__
#else
    "unknown compiler"
#endif
#ifdef __OPTIMIZE__
    ", optimised"
#else
    ", not optimised"
#endif
#ifdef NDEBUG
    ", NDEBUG"
#else
    ", assertions on"
#endif
#if defined(__AVX512F__)
    ", AVX-512"
#elif defined(__AVX2__)
    ", AVX2"
#endif
    ;

// What `<program> --version` prints (three lines).
inline std::string VersionText(absl::string_view program) {
  return absl::StrCat(program, " ", kVersion, "\nprotocol ", kProtoHash,
                      "\nbuild: ", kBuild, "\n");
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_VERSION_H_
