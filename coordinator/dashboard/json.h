// A small JSON writer for the dashboard's API: strings escaped (quotes,
// backslashes, control characters, the HTML-significant <, > and &, and
// invalid UTF-8 replaced by U+FFFD so that a job name of arbitrary bytes
// still gives a document every parser accepts), non-finite numbers written
// as null, commas placed by the writer rather than by each caller.
//
// Thread-safety: not thread-safe; one writer per response.
#ifndef AQUEDUCT_COORDINATOR_DASHBOARD_JSON_H_
#define AQUEDUCT_COORDINATOR_DASHBOARD_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace aqueduct {

// `s` as a quoted JSON string.
std::string JsonQuote(absl::string_view s);

// `v` as a JSON number: up to 7 significant digits; NaN and infinities
// (which JSON cannot say) as null.
std::string JsonNumber(double v);

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The key of the next value inside an object.
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // The document so far (complete once every Begin has its End).
  const std::string& str() const { return out_; }

 private:
  // Writes the comma before a value or key when one is due.
  void BeforeValue();
  void Open(char c);
  void Close(char c);

  std::string out_;
  // Per open container: whether it has an element yet.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_DASHBOARD_JSON_H_
