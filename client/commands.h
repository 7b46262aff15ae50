// The aq subcommands. Each takes the arguments after its name and returns
// the process exit code: 0 success, 1 the operation failed, 2 bad usage or
// bad input.
#ifndef AQUEDUCT_CLIENT_COMMANDS_H_
#define AQUEDUCT_CLIENT_COMMANDS_H_

#include <string>
#include <vector>

namespace aqueduct {

int TrainLocalMain(const std::vector<std::string>& args);
int PlanMain(const std::vector<std::string>& args);
int ProfileMain(const std::vector<std::string>& args);
// submit, status, watch, jobs, workers, cancel.
int RemoteMain(const std::string& command,
               const std::vector<std::string>& args);

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_COMMANDS_H_
