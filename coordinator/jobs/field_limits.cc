#include "coordinator/jobs/field_limits.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/common.h"
#include "pipeline/policy.h"

namespace aqueduct {

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string FieldPath(const std::string& parent, const FieldDescriptor* f,
                      int index) {
  std::string path =
      parent.empty() ? f->name() : absl::StrCat(parent, ".", f->name());
  if (index >= 0) absl::StrAppend(&path, "[", index, "]");
  return path;
}

// At most this many bytes of a refused value are quoted, escaped.
constexpr size_t kQuotedBytes = 64;

std::string Quote(const std::string& value) {
  return absl::StrCat("'", absl::CHexEscape(value.substr(0, kQuotedBytes)),
                      value.size() > kQuotedBytes ? "...'" : "'");
}

// Whether `value` holds a control character: C0 (tab too; a newline only
// where `lines`), DEL, or C1 (U+0080-U+009F, "\xc2\x80" to "\xc2\x9f" in
// UTF-8).
bool HoldsControl(const std::string& value, bool lines) {
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (lines && c == '\n') continue;
    if (c < 0x20 || c == 0x7f) return true;
    if (c == 0xc2 && i + 1 < value.size() &&
        static_cast<unsigned char>(value[i + 1]) <= 0x9f) {
      return true;
    }
  }
  return false;
}

absl::Status CheckString(const std::string& path, const std::string& value,
                         size_t limit, bool text, bool lines = false) {
  if (value.size() > limit) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is ", value.size(),
                                                   " bytes, more than the ",
                                                   limit, " allowed"));
  }
  if (!text) return absl::OkStatus();
  // The UTF-8 check protobuf applies to string fields when it parses them
  // (a message built in memory is not parsed).
  if (!google::protobuf::internal::IsStructurallyValidUTF8(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, "=", Quote(value), " is not valid UTF-8"));
  }
  if (HoldsControl(value, lines)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, "=", Quote(value),
        " holds a control character (it would act on the terminals that "
        "show it)"));
  }
  return absl::OkStatus();
}

absl::Status CheckMessage(const Message& message, const std::string& path,
                          const FieldLimits& limits);

absl::Status CheckField(const Message& message, const FieldDescriptor* f,
                        const std::string& path, const FieldLimits& limits) {
  const Reflection* r = message.GetReflection();
  // A schedule program is a file's text: lines, and longer.
  const bool program = f->name() == "schedule_program";
  const size_t limit = program               ? kMaxScheduleProgramBytes
                       : f->name() == "name" ? limits.max_name_bytes
                                             : limits.max_string_bytes;
  // `bytes` fields hold data, not text.
  const bool text = f->type() == FieldDescriptor::TYPE_STRING;
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    if (!f->is_repeated()) {
      return CheckString(FieldPath(path, f, -1), r->GetString(message, f),
                         limit, text, program);
    }
    const int n = r->FieldSize(message, f);
    if (n > limits.max_repeated_strings) {
      return absl::InvalidArgumentError(absl::StrCat(
          FieldPath(path, f, -1), " has ", n, " entries, more than the ",
          limits.max_repeated_strings, " allowed"));
    }
    for (int i = 0; i < n; ++i) {
      absl::Status s =
          CheckString(FieldPath(path, f, i),
                      r->GetRepeatedString(message, f, i), limit, text);
      if (!s.ok()) return s;
    }
  } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (!f->is_repeated()) {
      return CheckMessage(r->GetMessage(message, f), FieldPath(path, f, -1),
                          limits);
    }
    for (int i = 0; i < r->FieldSize(message, f); ++i) {
      absl::Status s = CheckMessage(r->GetRepeatedMessage(message, f, i),
                                    FieldPath(path, f, i), limits);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMessage(const Message& message, const std::string& path,
                          const FieldLimits& limits) {
  std::vector<const FieldDescriptor*> fields;
  message.GetReflection()->ListFields(message, &fields);
  for (const FieldDescriptor* f : fields) {
    absl::Status s = CheckField(message, f, path, limits);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

FieldLimits SpecFieldLimits() { return FieldLimits(); }

FieldLimits ProfileFieldLimits() {
  FieldLimits limits;
  limits.max_message_bytes = size_t{16} << 20;
  return limits;
}

absl::Status CheckFieldSizes(const Message& message, const FieldLimits& limits,
                             absl::string_view what) {
  // The total first: it bounds the walk below.
  const size_t bytes = message.ByteSizeLong();
  if (bytes > limits.max_message_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", bytes, " bytes, more than the ",
                     limits.max_message_bytes, " allowed"));
  }
  return CheckMessage(message, "", limits);
}

}  // namespace aqueduct
