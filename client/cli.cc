#include "client/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/terminal_text.h"
#include "common/security.h"

ABSL_FLAG(std::string, output, "text",
          "text, or json: exactly one JSON document on stdout");
ABSL_FLAG(std::string, coordinator, "",
          "the coordinator (default: $AQ_COORDINATOR, else 127.0.0.1:7070)");
ABSL_FLAG(std::string, context, "",
          "a named context of aq's configuration file (default $AQ_CONTEXT, "
          "else the file's current context; aq config --help)");
ABSL_FLAG(int32_t, threads, 0, "CPU threads for GEMM (default: all cores)");
ABSL_FLAG(std::string, format, "", "profile format");
ABSL_FLAG(std::string, profile, "", "a profile file");
ABSL_FLAG(std::string, output_file, "", "where to write the output");

namespace aqueduct {
namespace {

constexpr char kNotes[] =
    "Exit codes: 0 success, 1 failure (the job failed, or bad input: the "
    "message\nnames the field, file or job), 2 bad usage, 3 the coordinator "
    "is unreachable.\n";

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Whether the spec takes OutputFlag() (aq profile's --output differs).
bool TakesOutputFlag(const CommandLineSpec& spec) {
  const FlagUse output = OutputFlag();
  return std::any_of(
      spec.flags.begin(), spec.flags.end(), [&](const FlagUse& f) {
        return f.name == output.name && f.value_name == output.value_name;
      });
}

}  // namespace

FlagUse OutputFlag() {
  return {"output", "text|json",
          "result format: text, or json (exactly one JSON document on "
          "stdout; other text goes to stderr) (default: text)"};
}

FlagUse CoordinatorFlag() { return {"coordinator", "HOST:PORT", ""}; }

CommandLineSpec SubcommandSpec(const std::string& name,
                               const std::string& synopsis,
                               const std::string& description,
                               std::vector<FlagUse> flags) {
  CommandLineSpec spec;
  spec.program = "aq " + name;
  spec.synopsis = synopsis;
  spec.description = description;
  const bool remote =
      std::any_of(flags.begin(), flags.end(),
                  [](const FlagUse& f) { return f.name == "coordinator"; });
  const bool output =
      std::any_of(flags.begin(), flags.end(),
                  [](const FlagUse& f) { return f.name == "output"; });
  spec.flags = std::move(flags);
  if (remote) {
    spec.flags.push_back({"context", "NAME", ""});
    for (FlagUse& f : SecurityFlags()) spec.flags.push_back(std::move(f));
  }
  // -o json: --output's short form (commands that write files set -o to
  // their output file instead).
  if (output) spec.aliases = {{"o", "output"}};
  spec.notes = kNotes;
  return spec;
}

std::optional<int> ParseSubcommand(const CommandLineSpec& spec,
                                   const std::vector<std::string>& args,
                                   size_t min_args, size_t max_args,
                                   ParsedArgs* parsed) {
  *parsed = ParseArgs(spec, args);
  if (parsed->exit_code.has_value()) return parsed->exit_code;
  const std::string output = absl::GetFlag(FLAGS_output);
  if (TakesOutputFlag(spec) && output != "text" && output != "json") {
    return UsageError(spec,
                      "--output must be text or json, got '" + output + "'");
  }
  const size_t n = parsed->positional.size();
  if (n > max_args) {
    return UsageError(
        spec, "unexpected argument '" + parsed->positional[max_args] + "'");
  }
  if (n < min_args) {
    return UsageError(
        spec, "missing argument: usage: " + spec.program + " " + spec.synopsis);
  }
  return std::nullopt;
}

bool JsonOutput() { return absl::GetFlag(FLAGS_output) == "json"; }

int Fail(const std::string& message) {
  std::cerr << "aq: " << PrintableLines(message) << "\n";
  return kExitFailed;
}

absl::Status CheckWritable(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty output path");
  if (IsDirectory(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": it is a directory"));
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat(
        "cannot write ", path, ": directory ", dir, " does not exist"));
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path,
                                                    ": directory ", dir, ": ",
                                                    std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteTextFile(const std::string& path,
                           const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, ch));
    } else if (c < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace aqueduct
