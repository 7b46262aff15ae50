#include "client/contexts.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli.h"
#include "common/file_system.h"
#include "common/security.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace aqueduct {

namespace {

bool Exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// Collects the parser's first error with its line.
class Errors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) {
      first_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ",
                            message);
    }
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

std::string ContextNames(const v1::AqConfig& config) {
  std::vector<std::string> names;
  for (const v1::AqContext& c : config.contexts()) names.push_back(c.name());
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

// Sets `flag` from the context's `value` when the command line left it
// empty, and the context was named or `env` is unset.
void Fill(absl::Flag<std::string>& flag, const std::string& value,
          const char* env, bool named) {
  if (value.empty() || !absl::GetFlag(flag).empty()) return;
  if (!named && !Env(env).empty()) return;
  absl::SetFlag(&flag, value);
}

}  // namespace

std::string AqConfigPath() {
  if (std::string path = Env("AQ_CONFIG"); !path.empty()) return path;
  if (std::string xdg = Env("XDG_CONFIG_HOME"); !xdg.empty()) {
    return xdg + "/aq/config";
  }
  return Env("HOME") + "/.config/aq/config";
}

absl::StatusOr<v1::AqConfig> LoadAqConfig(const std::string& path) {
  v1::AqConfig config;
  if (!Exists(path)) return config;
  absl::StatusOr<std::string> text = DefaultFileSystem()->ReadFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("aq's configuration ", path, ": ",
                                     text.status().message()));
  }
  google::protobuf::TextFormat::Parser parser;
  Errors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(*text, &config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("aq's configuration ", path, ": ", errors.first(),
                     " (protobuf text format, proto/client_config.proto)"));
  }
  return config;
}

absl::Status SaveAqConfig(const std::string& path, const v1::AqConfig& config) {
  if (std::error_code e = MakePrivateDirectory(DirName(path)); e) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", DirName(path), ": ", e.message()));
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  return WriteFileAtomically(
      PrivateFileSystem(), path,
      absl::StrCat("# aq's contexts (aq config --help)\n", text));
}

const v1::AqContext* FindContext(const v1::AqConfig& config,
                                 const std::string& name) {
  for (const v1::AqContext& c : config.contexts()) {
    if (c.name() == name) return &c;
  }
  return nullptr;
}

absl::StatusOr<std::string> ApplyContext() {
  std::string name = absl::GetFlag(FLAGS_context);
  if (name.empty()) name = Env("AQ_CONTEXT");
  const bool named = !name.empty();
  const std::string path = AqConfigPath();
  if (!named && !Exists(path)) return "";
  absl::StatusOr<v1::AqConfig> config = LoadAqConfig(path);
  if (!config.ok()) return config.status();
  if (!named) name = config->current_context();
  if (name.empty()) return "";
  const v1::AqContext* c = FindContext(*config, name);
  if (c == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "no context '", name, "' in ", path,
        " (its contexts: ", ContextNames(*config),
        "; aq config set-context NAME --coordinator HOST:PORT adds one)"));
  }
  Fill(FLAGS_coordinator, c->coordinator(), "AQ_COORDINATOR", named);
  Fill(FLAGS_tls_ca, c->tls_ca(), "AQ_TLS_CA", named);
  Fill(FLAGS_tls_cert, c->tls_cert(), "AQ_TLS_CERT", named);
  Fill(FLAGS_tls_key, c->tls_key(), "AQ_TLS_KEY", named);
  // $AQ_TOKEN (the token itself) counts as the environment's too.
  if (named || Env("AQ_TOKEN").empty()) {
    Fill(FLAGS_token_file, c->token_file(), "AQ_TOKEN_FILE", named);
  }
  return name;
}

}  // namespace aqueduct
