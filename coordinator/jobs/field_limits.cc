#include "coordinator/jobs/field_limits.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

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

absl::Status CheckString(const std::string& path, const std::string& value,
                         size_t limit) {
  if (value.size() <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      path, " is ", value.size(), " bytes, more than the ", limit, " allowed"));
}

absl::Status CheckMessage(const Message& message, const std::string& path,
                          const FieldLimits& limits);

absl::Status CheckField(const Message& message, const FieldDescriptor* f,
                        const std::string& path, const FieldLimits& limits) {
  const Reflection* r = message.GetReflection();
  const size_t limit =
      f->name() == "name" ? limits.max_name_bytes : limits.max_string_bytes;
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    if (!f->is_repeated()) {
      return CheckString(FieldPath(path, f, -1), r->GetString(message, f),
                         limit);
    }
    const int n = r->FieldSize(message, f);
    if (n > limits.max_repeated_strings) {
      return absl::InvalidArgumentError(absl::StrCat(
          FieldPath(path, f, -1), " has ", n, " entries, more than the ",
          limits.max_repeated_strings, " allowed"));
    }
    for (int i = 0; i < n; ++i) {
      absl::Status s = CheckString(FieldPath(path, f, i),
                                   r->GetRepeatedString(message, f, i), limit);
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
