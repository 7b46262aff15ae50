#include "common/command_line.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace aqueduct {
namespace {

using ListValue = std::vector<std::string>;

// Help lines wrap at this width.
constexpr size_t kHelpWidth = 79;

constexpr char kSpellingNote[] =
    "Flag names are spelt with underscores; the dashed spelling works too\n"
    "(--log-level for --log_level). \"--flag value\" and \"--flag=value\" are "
    "the\nsame; --noflag turns a boolean flag off.\n";

bool IsList(const absl::CommandLineFlag& f) { return f.IsOfType<ListValue>(); }

// An argument that starts a flag (a negative number does not).
bool LooksLikeFlag(const std::string& arg) {
  return arg.size() >= 2 && arg[0] == '-' &&
         !std::isdigit(static_cast<unsigned char>(arg[1])) && arg[1] != '.';
}

absl::CommandLineFlag& LinkedFlag(const std::string& name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) {
    std::fprintf(stderr, "internal error: flag --%s is not linked in\n",
                 name.c_str());
    std::abort();
  }
  return *flag;
}

bool Accepts(const CommandLineSpec& spec, const std::string& name) {
  return std::any_of(spec.flags.begin(), spec.flags.end(),
                     [&](const FlagUse& f) { return f.name == name; });
}

// The canonical name of a spelling (an alias, or the name with dashes or
// underscores); empty when the command has no such flag.
std::string Canonical(const CommandLineSpec& spec, absl::string_view spelled) {
  const std::string name = absl::StrReplaceAll(spelled, {{"-", "_"}});
  for (const auto& [alias, target] : spec.aliases) {
    if (alias == spelled || alias == name) return target;
  }
  return Accepts(spec, name) ? name : "";
}

std::string Wanted(const absl::CommandLineFlag& f) {
  if (f.IsOfType<bool>()) return "true or false";
  if (f.IsOfType<int32_t>() || f.IsOfType<int64_t>()) return "an integer";
  if (f.IsOfType<double>() || f.IsOfType<float>()) return "a number";
  if (IsList(f)) return "values separated by commas or spaces";
  return "a value";
}

std::string DefaultValueName(const absl::CommandLineFlag& f) {
  if (f.IsOfType<bool>()) return "";
  if (f.IsOfType<int32_t>() || f.IsOfType<int64_t>()) return "N";
  if (f.IsOfType<double>() || f.IsOfType<float>()) return "X";
  if (IsList(f)) return "V [V ...]";
  const std::string name(f.Name());
  if (absl::EndsWith(name, "_file")) return "FILE";
  if (absl::EndsWith(name, "_dir")) return "DIR";
  return "VALUE";
}

// One parse step: the flag args[*i] (and its value), recorded in *out.
class FlagParser {
 public:
  FlagParser(const CommandLineSpec& spec, const std::vector<std::string>& args,
             ParsedArgs* out)
      : spec_(spec), args_(args), out_(out) {}

  void Parse(size_t* i) {
    const std::string& arg = args_[*i];
    const absl::string_view body =
        absl::string_view(arg).substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const absl::string_view spelled = body.substr(0, eq);
    shown_ = arg.substr(0, arg.size() - body.size()) + std::string(spelled);
    std::optional<std::string> inline_value;
    if (eq != absl::string_view::npos) {
      inline_value = std::string(body.substr(eq + 1));
    }
    if (!inline_value && HandleHelpOrVersion(spelled)) return;
    bool negated = false;
    const std::string name = Resolve(spelled, &negated);
    if (name.empty()) return Fail("unknown flag '" + shown_ + "'");
    std::string value;
    if (!Value(LinkedFlag(name), negated, inline_value, i, &value)) return;
    // A list flag given again adds to its values (--data_root A
    // --data_root B) rather than replacing them.
    if (IsList(LinkedFlag(name)) && out_->given.count(name) != 0 &&
        !LinkedFlag(name).CurrentValue().empty()) {
      value = absl::StrCat(LinkedFlag(name).CurrentValue(), ",", value);
    }
    std::string error;
    if (!LinkedFlag(name).ParseFrom(value, &error)) {
      return Fail(absl::StrCat("bad value '", value, "' for ", shown_,
                               ": want ", Wanted(LinkedFlag(name))));
    }
    out_->given.insert(name);
  }

 private:
  bool HandleHelpOrVersion(absl::string_view spelled) {
    if (spelled == "help" || spelled == "h") {
      std::cout << HelpText(spec_);
      out_->exit_code = 0;
      return true;
    }
    if (spelled == "version" && !spec_.version.empty()) {
      std::cout << spec_.version;
      if (!absl::EndsWith(spec_.version, "\n")) std::cout << "\n";
      out_->exit_code = 0;
      return true;
    }
    return false;
  }

  // The canonical name; "--noX" names the boolean flag X, negated.
  std::string Resolve(absl::string_view spelled, bool* negated) {
    std::string name = Canonical(spec_, spelled);
    if (name.empty() && absl::StartsWith(spelled, "no")) {
      name = Canonical(spec_, spelled.substr(2));
      *negated = !name.empty();
      if (*negated && !LinkedFlag(name).IsOfType<bool>()) name.clear();
    }
    return name;
  }

  bool Value(const absl::CommandLineFlag& flag, bool negated,
             const std::optional<std::string>& inline_value, size_t* i,
             std::string* value) {
    if (flag.IsOfType<bool>()) {
      if (negated && inline_value) {
        Fail("flag '" + shown_ + "' takes no value");
        return false;
      }
      *value = inline_value.value_or(negated ? "false" : "true");
      return true;
    }
    if (inline_value) {
      *value = *inline_value;
      return true;
    }
    if (*i + 1 >= args_.size()) {
      Fail("flag '" + shown_ + "' needs a value");
      return false;
    }
    *value = args_[++*i];
    while (IsList(flag) && *i + 1 < args_.size() &&
           !LooksLikeFlag(args_[*i + 1])) {
      absl::StrAppend(value, ",", args_[++*i]);
    }
    return true;
  }

  void Fail(const std::string& error) {
    out_->exit_code = UsageError(spec_, error);
  }

  const CommandLineSpec& spec_;
  const std::vector<std::string>& args_;
  ParsedArgs* out_;
  std::string shown_;
};

// "  -o, --output_file FILE" for the help's left column.
std::string FlagLabel(const CommandLineSpec& spec, const FlagUse& use) {
  std::string label = "  ";
  for (const auto& [alias, target] : spec.aliases) {
    if (target == use.name && alias.size() == 1) {
      absl::StrAppend(&label, "-", alias, ", ");
    }
  }
  absl::StrAppend(&label, "--", use.name);
  const std::string value_name = use.value_name.empty()
                                     ? DefaultValueName(LinkedFlag(use.name))
                                     : use.value_name;
  if (!value_name.empty()) absl::StrAppend(&label, " ", value_name);
  return label;
}

std::string FlagHelp(const FlagUse& use) {
  const absl::CommandLineFlag& flag = LinkedFlag(use.name);
  std::string help = use.help.empty() ? flag.Help() : use.help;
  const std::string def = flag.DefaultValue();
  const bool show_default =
      !def.empty() && def != "false" && !absl::StrContains(help, "(default");
  if (show_default) absl::StrAppend(&help, " (default: ", def, ")");
  return help;
}

// The label, then the help from `column` on, wrapped at kHelpWidth.
void AppendRow(const std::string& label, const std::string& help, size_t column,
               std::string* out) {
  std::string line = label;
  if (line.size() + 2 > column) {
    absl::StrAppend(out, line, "\n");
    line.clear();
  }
  line.resize(column, ' ');
  size_t words = 0;
  for (absl::string_view word : absl::StrSplit(help, ' ', absl::SkipEmpty())) {
    if (words > 0 && line.size() + 1 + word.size() > kHelpWidth) {
      absl::StrAppend(out, line, "\n");
      line.assign(column, ' ');
      words = 0;
    }
    absl::StrAppend(&line, words > 0 ? " " : "", word);
    ++words;
  }
  absl::StrAppend(out, line, "\n");
}

}  // namespace

ParsedArgs ParseArgs(const CommandLineSpec& spec,
                     const std::vector<std::string>& args) {
  ParsedArgs out;
  FlagParser parser(spec, args, &out);
  bool flags_done = false;
  for (size_t i = 0; i < args.size() && !out.exit_code.has_value(); ++i) {
    const std::string& arg = args[i];
    if (flags_done || !LooksLikeFlag(arg)) {
      out.positional.push_back(arg);
    } else if (arg == "--") {
      flags_done = true;
    } else {
      parser.Parse(&i);
    }
  }
  return out;
}

std::string HelpText(const CommandLineSpec& spec) {
  std::string out = absl::StrCat("usage: ", spec.program, " ", spec.synopsis,
                                 "\n\n", spec.description);
  if (!absl::EndsWith(out, "\n")) out += "\n";
  std::vector<std::pair<std::string, std::string>> rows;
  size_t column = 0;
  for (const FlagUse& use : spec.flags) {
    rows.emplace_back(FlagLabel(spec, use), FlagHelp(use));
    column = std::max(column, rows.back().first.size() + 2);
  }
  rows.emplace_back("  -h, --help", "print this help and exit");
  if (!spec.version.empty()) {
    rows.emplace_back("  --version", "print the version and build and exit");
  }
  column = std::min<size_t>(std::max<size_t>(column, 14), 34);
  out += "\nflags:\n";
  for (const auto& [label, help] : rows) AppendRow(label, help, column, &out);
  absl::StrAppend(&out, "\n", kSpellingNote);
  if (!spec.notes.empty()) absl::StrAppend(&out, "\n", spec.notes);
  if (!absl::EndsWith(out, "\n")) out += "\n";
  return out;
}

int UsageError(const CommandLineSpec& spec, const std::string& error) {
  std::cerr << spec.program << ": " << error << "\n"
            << "run '" << spec.program << " --help' for its usage and flags\n";
  return 2;
}

absl::Status CheckFlagRanges(const std::vector<FlagRange>& ranges) {
  for (const FlagRange& range : ranges) {
    const absl::CommandLineFlag& flag = LinkedFlag(range.name);
    const std::string text = flag.CurrentValue();
    int64_t value = 0;
    if (!(flag.IsOfType<int32_t>() || flag.IsOfType<int64_t>()) ||
        !absl::SimpleAtoi(text, &value)) {
      std::fprintf(stderr, "internal error: flag --%s is not an integer\n",
                   range.name.c_str());
      std::abort();
    }
    if (value < range.min || value > range.max) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", range.name, " must be between ", range.min,
                       " and ", range.max, ", got ", text));
    }
  }
  return absl::OkStatus();
}

std::vector<FlagUse> FlagsDefinedIn(const std::string& file_suffix) {
  std::vector<FlagUse> uses;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!flag->IsRetired() && absl::EndsWith(flag->Filename(), file_suffix)) {
      uses.push_back(FlagUse{std::string(name), "", ""});
    }
  }
  std::sort(uses.begin(), uses.end(),
            [](const FlagUse& a, const FlagUse& b) { return a.name < b.name; });
  return uses;
}

}  // namespace aqueduct
