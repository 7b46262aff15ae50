// aq config: the named contexts of aq's configuration file (contexts.h).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/contexts.h"
#include "client/terminal_text.h"
#include "common/security.h"
#include "google/protobuf/text_format.h"

namespace aqueduct {

namespace {

constexpr char kConfigDescription[] =
    "Named contexts: a coordinator and the credentials to reach it, kept in\n"
    "aq's configuration file ($AQ_CONFIG, else $XDG_CONFIG_HOME/aq/config,\n"
    "else ~/.config/aq/config; protobuf text format, mode 0600).\n"
    "\n"
    "  aq config set-context NAME [--coordinator HOST:PORT] [--tls_ca FILE]\n"
    "      [--tls_cert FILE --tls_key FILE] [--token_file FILE]\n"
    "                              add a context, or change the fields given\n"
    "                              (paths are stored absolute; the first\n"
    "                              context becomes the current one)\n"
    "  aq config use-context NAME  make NAME the current context\n"
    "  aq config get-contexts      list the contexts (* the current one)\n"
    "  aq config current-context   print the current context's name\n"
    "  aq config delete-context NAME\n"
    "  aq config view              print the file\n"
    "\n"
    "A remote command takes each setting from, first that has it: its flag;\n"
    "the context --context NAME or $AQ_CONTEXT names; the environment\n"
    "(AQ_COORDINATOR, AQ_TLS_CA, AQ_TOKEN_FILE, ... as <state-dir>/aq.env\n"
    "sets them); the current context; the defaults.\n";

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

// `path` absolute (a context is used from any directory); "" stays "".
std::string Absolute(const std::string& path) {
  if (path.empty()) return path;
  std::error_code error;
  const std::filesystem::path abs = std::filesystem::absolute(path, error);
  return error ? path : abs.lexically_normal().string();
}

int Save(const std::string& path, const v1::AqConfig& config) {
  const absl::Status saved = SaveAqConfig(path, config);
  return saved.ok() ? kExitOk : Fail(std::string(saved.message()));
}

// The fields the command line gave, onto `c`; every file must exist.
absl::Status SetFields(v1::AqContext* c) {
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (!coordinator.empty()) c->set_coordinator(coordinator);
  const struct {
    absl::Flag<std::string>* flag;
    const char* name;
    void (v1::AqContext::*set)(const std::string&);
  } files[] = {
      {&FLAGS_tls_ca, "tls_ca", &v1::AqContext::set_tls_ca},
      {&FLAGS_tls_cert, "tls_cert", &v1::AqContext::set_tls_cert},
      {&FLAGS_tls_key, "tls_key", &v1::AqContext::set_tls_key},
      {&FLAGS_token_file, "token_file", &v1::AqContext::set_token_file},
  };
  for (const auto& f : files) {
    const std::string value = absl::GetFlag(*f.flag);
    if (value.empty()) continue;
    std::error_code error;
    if (!std::filesystem::is_regular_file(value, error)) {
      return absl::NotFoundError(
          absl::StrCat("--", f.name, " ", value, ": no such file"));
    }
    (c->*f.set)(Absolute(value));
  }
  if (c->coordinator().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a new context needs --coordinator HOST:PORT"));
  }
  if (c->tls_cert().empty() != c->tls_key().empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both or neither");
  }
  return absl::OkStatus();
}

int SetContext(const std::string& path, v1::AqConfig config,
               const std::string& name) {
  if (!ValidName(name)) {
    return Fail(absl::StrCat("context name '", name,
                             "' must be 1 to 64 of A-Z a-z 0-9 . _ -"));
  }
  v1::AqContext* c = const_cast<v1::AqContext*>(FindContext(config, name));
  const bool added = c == nullptr;
  if (added) {
    c = config.add_contexts();
    c->set_name(name);
  }
  if (absl::Status s = SetFields(c); !s.ok())
    return Fail(std::string(s.message()));
  if (config.current_context().empty()) config.set_current_context(name);
  if (int code = Save(path, config); code != kExitOk) return code;
  std::cerr << (added ? "added" : "changed") << " context " << name << " in "
            << path << "\n";
  return kExitOk;
}

int UseContext(const std::string& path, v1::AqConfig config,
               const std::string& name) {
  if (FindContext(config, name) == nullptr) {
    return Fail(absl::StrCat("no context '", name, "' in ", path));
  }
  config.set_current_context(name);
  return Save(path, config);
}

int DeleteContext(const std::string& path, v1::AqConfig config,
                  const std::string& name) {
  auto* list = config.mutable_contexts();
  for (int i = 0; i < list->size(); ++i) {
    if (list->Get(i).name() != name) continue;
    list->DeleteSubrange(i, 1);
    if (config.current_context() == name) config.clear_current_context();
    return Save(path, config);
  }
  return Fail(absl::StrCat("no context '", name, "' in ", path));
}

void PrintContexts(const v1::AqConfig& config) {
  if (JsonOutput()) {
    std::cout << "{\"current_context\":" << JsonString(config.current_context())
              << ",\"contexts\":[";
    for (int i = 0; i < config.contexts_size(); ++i) {
      const v1::AqContext& c = config.contexts(i);
      std::cout << (i ? "," : "") << "{\"name\":" << JsonString(c.name())
                << ",\"coordinator\":" << JsonString(c.coordinator())
                << ",\"tls\":" << (c.tls_ca().empty() ? "false" : "true")
                << ",\"token\":" << (c.token_file().empty() ? "false" : "true")
                << "}";
    }
    std::cout << "]}" << std::endl;
    return;
  }
  std::cout << "CURRENT  NAME                 COORDINATOR               TLS  "
               "TOKEN\n";
  for (const v1::AqContext& c : config.contexts()) {
    std::string row =
        c.name() == config.current_context() ? "*        " : "         ";
    std::string name = Printable(c.name()), at = Printable(c.coordinator());
    name.resize(std::max<size_t>(name.size() + 1, 21), ' ');
    at.resize(std::max<size_t>(at.size() + 1, 26), ' ');
    std::cout << row << name << at << (c.tls_ca().empty() ? "no   " : "yes  ")
              << (c.token_file().empty() ? "no" : "yes") << "\n";
  }
}

int Run(const std::string& verb, const std::vector<std::string>& rest,
        const CommandLineSpec& spec) {
  const std::string path = AqConfigPath();
  absl::StatusOr<v1::AqConfig> config = LoadAqConfig(path);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  const bool named = verb == "set-context" || verb == "use-context" ||
                     verb == "delete-context";
  if (rest.size() != (named ? 1u : 0u)) {
    return UsageError(spec, named ? "aq config " + verb + " takes a NAME"
                                  : "aq config " + verb + " takes no NAME");
  }
  if (verb == "set-context") return SetContext(path, *config, rest[0]);
  if (verb == "use-context") return UseContext(path, *config, rest[0]);
  if (verb == "delete-context") return DeleteContext(path, *config, rest[0]);
  if (verb == "get-contexts") {
    PrintContexts(*config);
  } else if (verb == "current-context") {
    if (config->current_context().empty()) return Fail("no current context");
    std::cout << config->current_context() << std::endl;
  } else if (verb == "view") {
    std::string text;
    google::protobuf::TextFormat::PrintToString(*config, &text);
    std::cout << "# " << path << "\n" << text;
  } else {
    return UsageError(spec, "unknown aq config command '" + verb + "'");
  }
  return kExitOk;
}

}  // namespace

int ConfigMain(const std::vector<std::string>& args) {
  std::vector<FlagUse> flags = {CoordinatorFlag(), OutputFlag()};
  for (FlagUse& f : SecurityFlags()) flags.push_back(std::move(f));
  CommandLineSpec spec = SubcommandSpec("config", "COMMAND [NAME] [flags]",
                                        kConfigDescription, {OutputFlag()});
  spec.flags = flags;
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 2, &parsed)) return *code;
  const std::vector<std::string> rest(parsed.positional.begin() + 1,
                                      parsed.positional.end());
  return Run(parsed.positional[0], rest, spec);
}

}  // namespace aqueduct
