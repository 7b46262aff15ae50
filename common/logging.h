// Logging facade over spdlog. Libraries call the AQ_LOG_* macros (or
// aqueduct::logging::Get()); only binaries call ConfigureLogging() to choose
// the level and format. Thread-safe: spdlog loggers are thread-safe and
// ConfigureLogging() should run once at start-up, before other threads.
#ifndef AQUEDUCT_COMMON_LOGGING_H_
#define AQUEDUCT_COMMON_LOGGING_H_

#include <string>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace aqueduct {
namespace logging {

enum class Format { kText, kJson };

struct LoggingOptions {
  // One of trace, debug, info, warn, error, critical, off.
  std::string level = "info";
  Format format = Format::kText;
  // Component name put in every line (e.g. "coordinator", "worker", "aq").
  std::string component = "aqueduct";
};

// Sets up the process-wide logger (stderr). INVALID_ARGUMENT on an unknown
// level name.
absl::Status ConfigureLogging(const LoggingOptions& options);

// Parses "text" or "json".
absl::Status ParseFormat(const std::string& name, Format* format);

// The logger the macros write to. Never null.
spdlog::logger* Get();

}  // namespace logging
}  // namespace aqueduct

#define AQ_LOG_TRACE(...) ::aqueduct::logging::Get()->trace(__VA_ARGS__)
#define AQ_LOG_DEBUG(...) ::aqueduct::logging::Get()->debug(__VA_ARGS__)
#define AQ_LOG_INFO(...) ::aqueduct::logging::Get()->info(__VA_ARGS__)
#define AQ_LOG_WARN(...) ::aqueduct::logging::Get()->warn(__VA_ARGS__)
#define AQ_LOG_ERROR(...) ::aqueduct::logging::Get()->error(__VA_ARGS__)

#endif  // AQUEDUCT_COMMON_LOGGING_H_
