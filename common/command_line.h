// Command-line parsing for Aqueduct's binaries (the `aq` client and the
// daemons) over Abseil flags. Flags are defined with ABSL_FLAG and parsed,
// typed and stored by Abseil; this adds what absl::ParseCommandLine does not
// do the way Aqueduct's binaries need:
//   - per-command flag sets (aq's subcommands), each with its own --help;
//   - one spelling convention: names use underscores (--max_steps) and the
//     dashed spelling is accepted too (--max-steps);
//   - short aliases (-o), "--flag value" and "--flag=value", --noflag for
//     booleans, and list flags taking several values (--workers 8 16, or
//     --workers=8,16, or the flag repeated: --workers 8 --workers 16);
//   - the exit-code contract: --help and --version exit 0, a usage error
//     (unknown flag, missing or malformed value) prints a message naming
//     the flag and exits 2.
// Not thread-safe (it sets flags; call it from main before other threads).
#ifndef AQUEDUCT_COMMON_COMMAND_LINE_H_
#define AQUEDUCT_COMMON_COMMAND_LINE_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace aqueduct {

// One flag a command accepts: the name of an ABSL_FLAG linked into the
// binary.
struct FlagUse {
  std::string name;
  // Shown after the flag in the help ("N", "FILE"); empty: from the type.
  std::string value_name;
  // Replaces the flag's own help text when not empty.
  std::string help;
};

struct CommandLineSpec {
  // "aq train-local", "coordinator".
  std::string program;
  // What follows the program in the usage line: "JOB [flags]".
  std::string synopsis;
  // What the command does; may span lines.
  std::string description;
  std::vector<FlagUse> flags;
  // Other spellings: {"o", "output_file"} makes -o a synonym.
  std::vector<std::pair<std::string, std::string>> aliases;
  // Printed by --version (which is accepted only when this is set).
  std::string version;
  // Closing paragraph of the help (environment, exit codes).
  std::string notes;
};

struct ParsedArgs {
  // The arguments that are not flags, in order.
  std::vector<std::string> positional;
  // Canonical names of the flags given.
  std::set<std::string> given;
  // Set when the caller should exit with it now: 0 after --help or
  // --version (printed on stdout), 2 after a usage error (printed on
  // stderr).
  std::optional<int> exit_code;
};

// Parses `args` (without the program name) against `spec`, setting the
// flags it names.
ParsedArgs ParseArgs(const CommandLineSpec& spec,
                     const std::vector<std::string>& args);

// The --help text: usage line, description, flags with their defaults.
std::string HelpText(const CommandLineSpec& spec);

// Prints "<program>: <error>" and where to find the flags on stderr;
// returns 2 (the usage-error exit code).
int UsageError(const CommandLineSpec& spec, const std::string& error);

// Every flag defined in a source file whose path ends with `file_suffix`
// (e.g. "coordinator/main.cc"), sorted by name.
std::vector<FlagUse> FlagsDefinedIn(const std::string& file_suffix);

// The values an integer flag (int32_t or int64_t) may take: [min, max].
struct FlagRange {
  std::string name;  // Of an ABSL_FLAG linked into the binary.
  int64_t min = 0;
  int64_t max = 0;
};

// Checks each flag's current value against its range, in order: OK, or
// INVALID_ARGUMENT for the first out of range, naming it and the range:
// "--max_message_bytes must be between 1048576 and 2147483647, got -1".
absl::Status CheckFlagRanges(const std::vector<FlagRange>& ranges);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMMAND_LINE_H_
