// The libFuzzer entry of one fuzz target: AQ_FUZZ_ENTRY names the function
// of entries.h it calls (set per binary in BUILD.bazel). Built by
// tools/fuzz.sh under --config=fuzz; libFuzzer supplies main().
#include <cstddef>
#include <cstdint>

#include "common/check.h"
#include "common/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "tests/fuzz/entries.h"

#ifndef AQ_FUZZ_ENTRY
#error "AQ_FUZZ_ENTRY must name an entry of tests/fuzz/entries.h"
#endif

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // Refusals are the common case; their log lines would drown libFuzzer's.
  // So would protobuf's complaints about strings that are not UTF-8 (which
  // the parsers under test accept in text and the round trips serialise).
  google::protobuf::SetLogHandler(nullptr);
  aqueduct::logging::LoggingOptions options;
  options.level = "off";
  AQ_CHECK(aqueduct::logging::ConfigureLogging(options).ok());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The verdict is not the point: a crash, a sanitizer report or a broken
  // invariant (AQ_CHECK) is.
  (void)aqueduct::fuzz::AQ_FUZZ_ENTRY(data, size);
  return 0;
}
