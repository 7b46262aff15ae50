// What aq prints of the coordinator's strings in text mode: job names and
// ids, reasons, owners, worker ids and addresses, paths, log lines, error
// messages. A string another user or a worker chose could carry ESC[2J,
// CR/LF or an OSC title sequence, and the terminal showing `aq jobs` or
// `aq logs` would act on it (issue 22, item 11). Printable() shows those
// bytes as visible "\xNN" escapes instead, the rules the coordinator
// applies to log lines (EscapeControls, coordinator/input_checks.h). JSON
// output needs none of this: JSON escapes control characters itself.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_CLIENT_TERMINAL_TEXT_H_
#define AQUEDUCT_CLIENT_TERMINAL_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace aqueduct {

// `text` with every control character but tab (C0, DEL, C1) and every byte
// that is not UTF-8 as "\xNN": "\x1b[2J" prints as the 7 characters
// \x1b[2J. Printable UTF-8 and tab are kept.
std::string Printable(absl::string_view text);

// Printable() of each line of `text`, keeping its "\n"s: for a block aq
// formats itself (a plan) that holds strings from the coordinator.
std::string PrintableLines(absl::string_view text);

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_TERMINAL_TEXT_H_
