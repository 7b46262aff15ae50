#include "client/spec_overrides.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace aqueduct {

namespace {

using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// "its fields: a, b, c" of `message`'s type.
std::string FieldsOf(const Message& message) {
  std::vector<std::string> names;
  const auto* type = message.GetDescriptor();
  for (int i = 0; i < type->field_count(); ++i) {
    names.push_back(std::string(type->field(i)->name()));
  }
  return absl::StrCat("its fields: ", absl::StrJoin(names, ", "));
}

// The enum value `text` names: the value's name, the name without the
// type's prefix (any case), or its number.
const EnumValueDescriptor* EnumValue(const FieldDescriptor& field,
                                     const std::string& text) {
  const auto* type = field.enum_type();
  if (const auto* v = type->FindValueByName(text)) return v;
  const std::string upper = absl::AsciiStrToUpper(text);
  for (int i = 0; i < type->value_count(); ++i) {
    const std::string name(type->value(i)->name());
    const size_t cut = name.find('_');
    if (name == upper ||
        (cut != std::string::npos && name.substr(cut + 1) == upper)) {
      return type->value(i);
    }
  }
  int number = 0;
  if (absl::SimpleAtoi(text, &number)) return type->FindValueByNumber(number);
  return nullptr;
}

// Sets scalar `field` of `message` from `text`; false if it does not parse.
bool SetScalar(const FieldDescriptor& field, const std::string& text,
               Message* message) {
  const auto* r = message->GetReflection();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v = 0;
      if (!absl::SimpleAtoi(text, &v)) return false;
      r->SetInt32(message, &field, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v = 0;
      if (!absl::SimpleAtoi(text, &v)) return false;
      r->SetInt64(message, &field, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v = 0;
      if (!absl::SimpleAtoi(text, &v)) return false;
      r->SetUInt32(message, &field, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v = 0;
      if (!absl::SimpleAtoi(text, &v)) return false;
      r->SetUInt64(message, &field, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      double v = 0;
      if (!absl::SimpleAtod(text, &v)) return false;
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
        r->SetFloat(message, &field, static_cast<float>(v));
      } else {
        r->SetDouble(message, &field, v);
      }
      return true;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v = false;
      if (!absl::SimpleAtob(text, &v)) return false;
      r->SetBool(message, &field, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(message, &field, text);
      return true;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumValueDescriptor* v = EnumValue(field, text);
      if (v == nullptr) return false;
      r->SetEnum(message, &field, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return false;
}

// What a value of `field` looks like, for errors.
std::string Wanted(const FieldDescriptor& field) {
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
    std::vector<std::string> names;
    for (int i = 0; i < field.enum_type()->value_count(); ++i) {
      names.push_back(std::string(field.enum_type()->value(i)->name()));
    }
    return absl::StrCat("one of ", absl::StrJoin(names, ", "));
  }
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
    return "true or false";
  }
  return absl::StrCat("a ", field.cpp_type_name());
}

absl::Status ApplyOne(const std::string& set, JobSpec* spec) {
  const size_t eq = set.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--set ", set, ": want path=value, e.g. max_steps=100"));
  }
  const std::string path = set.substr(0, eq), value = set.substr(eq + 1);
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", path, ": ", why));
  };
  const std::vector<std::string> names = absl::StrSplit(path, '.');
  Message* message = spec;
  for (size_t i = 0; i < names.size(); ++i) {
    const FieldDescriptor* field =
        message->GetDescriptor()->FindFieldByName(names[i]);
    if (field == nullptr) {
      return bad(absl::StrCat(message->GetDescriptor()->name(),
                              " has no field '", names[i], "' (",
                              FieldsOf(*message), ")"));
    }
    if (field->is_repeated()) {
      return bad(absl::StrCat(names[i], " is a list: set it in the spec file"));
    }
    const bool last = i + 1 == names.size();
    const bool is_message =
        field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (last && is_message) {
      return bad(absl::StrCat(
          names[i], " is a message: name one of its ", "fields (",
          FieldsOf(message->GetReflection()->GetMessage(*message, field)),
          ")"));
    }
    if (!last && !is_message) {
      return bad(absl::StrCat(names[i], " is not a message"));
    }
    if (last) {
      if (!SetScalar(*field, value, message)) {
        return bad(absl::StrCat("'", value, "' is not ", Wanted(*field)));
      }
      return absl::OkStatus();
    }
    message = message->GetReflection()->MutableMessage(message, field);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplySpecOverrides(const std::vector<std::string>& sets,
                                JobSpec* spec) {
  for (const std::string& set : sets) {
    if (absl::Status s = ApplyOne(set, spec); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
