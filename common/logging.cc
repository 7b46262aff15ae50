#include "common/logging.h"

#include <memory>

#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace aqueduct {
namespace logging {

namespace {

// %j: the message, escaped for a JSON string.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (char c : msg.payload) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            const char esc[] = {
                '\\', 'u', '0', '0', kHex[(c >> 4) & 0xf], kHex[c & 0xf]};
            dest.append(esc, esc + sizeof(esc));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

spdlog::logger* Get() {
  // spdlog's default logger exists from process start (stdout colour sink);
  // ConfigureLogging() replaces it with a stderr one.
  return spdlog::default_logger_raw();
}

absl::Status ParseFormat(const std::string& name, Format* format) {
  if (name == "text") {
    *format = Format::kText;
  } else if (name == "json") {
    *format = Format::kJson;
  } else {
    return absl::InvalidArgumentError("log format '" + name +
                                      "' is not one of: text, json");
  }
  return absl::OkStatus();
}

absl::Status ConfigureLogging(const LoggingOptions& options) {
  spdlog::level::level_enum level = spdlog::level::from_str(options.level);
  if (level == spdlog::level::off && options.level != "off") {
    return absl::InvalidArgumentError(
        "log level '" + options.level +
        "' is not one of: trace, debug, info, warn, error, critical, off");
  }
  auto logger = spdlog::stderr_color_mt(options.component + "-log");
  logger->set_level(level);
  if (options.format == Format::kJson) {
    // One JSON object per line; %j is the escaped message.
    auto formatter = std::make_unique<spdlog::pattern_formatter>(
        spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(
        "{\"time\":\"%Y-%m-%dT%H:%M:%S.%fZ\",\"level\":\"%l\",\"component\":"
        "\"" +
        options.component + "\",\"thread\":%t,\"msg\":\"%j\"}");
    logger->set_formatter(std::move(formatter));
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ " + options.component +
                        " %t] %v");
  }
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace logging
}  // namespace aqueduct
