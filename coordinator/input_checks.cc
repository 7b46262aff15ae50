#include "coordinator/input_checks.h"

#include <algorithm>
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

// The length of the valid UTF-8 sequence at text[i], with its code point
// in *cp; 0 when the bytes there are not one (a stray continuation byte, a
// truncated, overlong or surrogate sequence, beyond U+10FFFF).
size_t Utf8SequenceAt(absl::string_view text, size_t i, uint32_t* cp) {
  const auto lead = static_cast<unsigned char>(text[i]);
  if (lead < 0x80) {
    *cp = lead;
    return 1;
  }
  size_t n = 0;
  uint32_t min = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2, min = 0x80, *cp = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3, min = 0x800, *cp = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4, min = 0x10000, *cp = lead & 0x07;
  } else {
    return 0;
  }
  if (text.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(text[i + k]);
    if ((c & 0xc0) != 0x80) return 0;
    *cp = *cp << 6 | (c & 0x3f);
  }
  if (*cp < min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff)) {
    return 0;
  }
  return n;
}

bool IsControl(uint32_t cp, bool allow_tab) {
  if (cp == '\t') return !allow_tab;
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
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
  const size_t at = FindControl(value, /*allow_tab=*/false);
  if (at == absl::string_view::npos) return absl::OkStatus();
  uint32_t cp = 0;
  if (Utf8SequenceAt(value, at, &cp) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "=", Quoted(value), " is not valid UTF-8"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, "=", Quoted(value), " holds a control character"));
}

size_t FindControl(absl::string_view text, bool allow_tab) {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = Utf8SequenceAt(text, i, &cp);
    if (n == 0 || IsControl(cp, allow_tab)) return i;
    i += n;
  }
  return absl::string_view::npos;
}

std::string EscapeControls(absl::string_view text, size_t max_bytes) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    size_t n = Utf8SequenceAt(text, i, &cp);
    const bool escape = n == 0 || IsControl(cp, /*allow_tab=*/true);
    if (n == 0) n = 1;  // One bad byte at a time.
    if (out.size() + (escape ? 4 * n : n) > max_bytes) break;
    if (!escape) {
      out.append(text.data() + i, n);
    } else {
      for (size_t k = i; k < i + n; ++k) {
        const auto b = static_cast<unsigned char>(text[k]);
        out += {'\\', 'x', kHex[b >> 4], kHex[b & 0xf]};
      }
    }
    i += n;
  }
  return out;
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
