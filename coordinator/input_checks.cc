#include "coordinator/input_checks.h"

#include <cmath>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

bool NameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '_' || c == ':' || c == '@' || c == '-';
}

bool HostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '_' || c == '-';
}

// Inside brackets: hex digits, colons, an IPv4 tail and a zone ("%eth0").
bool Ipv6Char(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == ':' ||
         c == '.' || c == '%';
}

absl::Status BadAddress(absl::string_view field, absl::string_view value,
                        absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, "=", Quoted(value), " is not host:port: ", why));
}

}  // namespace

std::string Quoted(absl::string_view value) {
  if (value.size() <= kMaxQuotedBytes) {
    return absl::StrCat("'", absl::CHexEscape(value), "'");
  }
  return absl::StrCat("'", absl::CHexEscape(value.substr(0, kMaxQuotedBytes)),
                      "...' (", value.size(), " bytes)");
}

absl::Status JobNotFound(absl::string_view job_id) {
  return absl::NotFoundError(
      absl::StrCat("job ", Quoted(job_id), " does not exist"));
}

std::string Shown(absl::string_view name) {
  constexpr size_t kMaxShownNameBytes = 128;
  if (CheckName("", name, kMaxShownNameBytes).ok()) return std::string(name);
  return Quoted(name);
}

absl::Status CheckName(absl::string_view field, absl::string_view value,
                       size_t max_bytes) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  }
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", value.size(), " bytes; the limit is ",
                     max_bytes, " (", Quoted(value), ")"));
  }
  for (char c : value) {
    if (!NameChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "=", Quoted(value),
                       " may hold only letters, digits and . _ : @ -"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckText(absl::string_view field, absl::string_view value,
                       size_t max_bytes) {
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", value.size(), " bytes; the limit is ",
                     max_bytes, " (", Quoted(value), ")"));
  }
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "=", Quoted(value), " holds a control character"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAddress(absl::string_view field, absl::string_view value) {
  constexpr size_t kMaxAddressBytes = 255;
  if (value.size() > kMaxAddressBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", value.size(), " bytes; the limit is ",
                     kMaxAddressBytes, " (", Quoted(value), ")"));
  }
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos) {
    return BadAddress(field, value, "no port");
  }
  const absl::string_view host = value.substr(0, colon);
  const absl::string_view port_text = value.substr(colon + 1);
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 ||
      !absl::c_all_of(port_text,
                      [](char c) {
                        return absl::ascii_isdigit(
                            static_cast<unsigned char>(c));
                      }) ||
      !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return BadAddress(field, value, "the port must be in 1-65535");
  }
  if (host.empty()) return BadAddress(field, value, "no host");
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']' ||
        !absl::c_all_of(host.substr(1, host.size() - 2), Ipv6Char)) {
      return BadAddress(field, value, "a bad IPv6 address");
    }
    return absl::OkStatus();
  }
  if (!absl::c_all_of(host, HostChar)) {
    return BadAddress(field, value,
                      "the host may hold only letters, digits and . _ -");
  }
  return absl::OkStatus();
}

absl::Status CheckInt(absl::string_view field, int64_t value, int64_t lo,
                      int64_t hi, absl::string_view what_hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, "=", value, " is outside [", lo, ", ", hi, "]",
                   what_hi.empty() ? "" : absl::StrCat(" (", what_hi, ")")));
}

absl::Status CheckFinite(absl::string_view field, double value, double lo,
                         double hi) {
  // Written so that NaN fails too.
  if (std::isfinite(value) && value >= lo && value <= hi) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, "=", value, " is not a finite number in [", lo, ", ", hi, "]"));
}

}  // namespace aqueduct
