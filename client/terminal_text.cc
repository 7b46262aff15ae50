#include "client/terminal_text.h"

#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "coordinator/input_checks.h"

namespace aqueduct {

std::string Printable(absl::string_view text) { return EscapeControls(text); }

std::string PrintableLines(absl::string_view text) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    lines.push_back(Printable(line));
  }
  return absl::StrJoin(lines, "\n");
}

}  // namespace aqueduct
