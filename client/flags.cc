#include "client/flags.h"

namespace aqueduct {

int UsageError(const std::string& error, const char* usage) {
  if (!error.empty()) std::cerr << "aq: " << error << "\n\n";
  std::cerr << usage;
  return 2;
}

bool TakeValue(const std::vector<std::string>& args, size_t* i,
               const std::string& flag, std::string* value) {
  const std::string& a = args[*i];
  if (a == flag) {
    if (*i + 1 >= args.size()) return false;
    *value = args[++*i];
    return true;
  }
  if (a.rfind(flag + "=", 0) == 0) {
    *value = a.substr(flag.size() + 1);
    return true;
  }
  return false;
}

bool TakeValues(const std::vector<std::string>& args, size_t* i,
                const std::string& flag, std::vector<std::string>* values) {
  if (args[*i] != flag) return false;
  values->clear();
  while (*i + 1 < args.size() && args[*i + 1].rfind("--", 0) != 0) {
    values->push_back(args[++*i]);
  }
  return !values->empty();
}

}  // namespace aqueduct
