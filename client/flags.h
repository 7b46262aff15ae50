// Small command-line helpers shared by the aq commands: "--flag value",
// "--flag=value", and multi-valued "--flag v1 v2 ...". Not thread-safe
// (used from main).
#ifndef AQUEDUCT_CLIENT_FLAGS_H_
#define AQUEDUCT_CLIENT_FLAGS_H_

#include <iostream>
#include <string>
#include <vector>

namespace aqueduct {

// Prints "aq: <error>" and the usage text; returns exit code 2.
int UsageError(const std::string& error, const char* usage);

// If args[*i] is `flag` (followed by a value) or "flag=value", stores the
// value, advances *i past it and returns true.
bool TakeValue(const std::vector<std::string>& args, size_t* i,
               const std::string& flag, std::string* value);

// If args[*i] is `flag`, collects every following argument up to the next
// one starting with "--" (at least one), advances *i and returns true.
bool TakeValues(const std::vector<std::string>& args, size_t* i,
                const std::string& flag, std::vector<std::string>* values);

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_FLAGS_H_
