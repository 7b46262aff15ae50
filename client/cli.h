// What the aq subcommands share: the flags several of them take (defined
// here with ABSL_FLAG), parsing a subcommand's command line with its
// --help, the --output text|json switch, and checked writes of output
// files. Not thread-safe (used from main).
#ifndef AQUEDUCT_CLIENT_CLI_H_
#define AQUEDUCT_CLIENT_CLI_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "common/command_line.h"

ABSL_DECLARE_FLAG(std::string, output);
ABSL_DECLARE_FLAG(std::string, coordinator);
ABSL_DECLARE_FLAG(std::string, context);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(std::string, format);
ABSL_DECLARE_FLAG(std::string, profile);
ABSL_DECLARE_FLAG(std::string, output_file);

namespace aqueduct {

// Exit codes of aq.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;

// --output text|json, as the commands that print results take it.
FlagUse OutputFlag();
// --coordinator HOST:PORT.
FlagUse CoordinatorFlag();

// A subcommand's spec with the common parts filled in: program "aq <name>"
// and the closing notes (exit codes).
CommandLineSpec SubcommandSpec(const std::string& name,
                               const std::string& synopsis,
                               const std::string& description,
                               std::vector<FlagUse> flags);

// Parses `args` for `spec`, checks --output (when the spec takes
// OutputFlag()) is text or json, and that there are between `min_args` and
// `max_args` positional arguments. Returns the exit code to stop with (help
// printed: 0; usage error printed: 2), or nullopt to go on.
std::optional<int> ParseSubcommand(const CommandLineSpec& spec,
                                   const std::vector<std::string>& args,
                                   size_t min_args, size_t max_args,
                                   ParsedArgs* parsed);

// True when --output is json.
bool JsonOutput();

// Prints "aq: <message>" on stderr, its control characters but line breaks
// as visible escapes (PrintableLines, terminal_text.h), and returns
// kExitFailed.
int Fail(const std::string& message);

// Fails fast, before any work, if `path` cannot be written: its directory
// must exist and be writable. Errors name the path.
absl::Status CheckWritable(const std::string& path);

// Writes `content` to `path`, checking every step; errors name the path.
absl::Status WriteTextFile(const std::string& path, const std::string& content);

// `s` as a JSON string literal.
std::string JsonString(const std::string& s);

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_CLI_H_
