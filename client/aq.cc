// aq: the Aqueduct command-line client.
//
//   aq train-local JOB [flags]   train in this process (the reference)
//   aq profile JOB [flags]       profile a job's layers on this machine
//   aq plan --profile FILE ...   partition a profiled model over workers
//
// Exit codes: 0 success, 1 the operation failed, 2 bad usage or bad input.
#include <iostream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/flags.h"

namespace {

constexpr char kUsage[] =
    "usage: aq <command> [args]\n"
    "\n"
    "commands:\n"
    "  train-local JOB      train a job spec in this process on the CPU\n"
    "  profile JOB          measure each layer of a job's model on this\n"
    "                       machine and write a profile\n"
    "  plan --profile FILE  partition a profiled model into pipeline stages\n"
    "  submit JOB [--wait]  submit a job to the coordinator\n"
    "  status [JOB]         a job's status (all jobs without JOB)\n"
    "  watch JOB            follow a job's progress until it ends\n"
    "  jobs                 list jobs\n"
    "  workers              list workers\n"
    "  cancel JOB           cancel a job\n"
    "  trace JOB -o FILE    the executed schedule as Chrome trace JSON\n"
    "                       (Perfetto, chrome://tracing); --svg FILE too\n"
    "  help                 this text\n"
    "\n"
    "\n"
    "Remote commands take --coordinator HOST:PORT (default $AQ_COORDINATOR,\n"
    "else 127.0.0.1:7070) and --output text|json.\n"
    "Exit codes: 0 success, 1 the job failed or bad input, 2 usage error,\n"
    "3 coordinator unreachable.\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // Global flags may come before the command; they are passed on after it.
  std::vector<std::string> global;
  while (!args.empty() && args[0].rfind("--coordinator", 0) == 0) {
    global.push_back(args[0]);
    args.erase(args.begin());
    if (global.back() == "--coordinator" && !args.empty()) {
      global.push_back(args[0]);
      args.erase(args.begin());
    }
  }
  if (args.empty()) return aqueduct::UsageError("", kUsage);
  const std::string command = args[0];
  args.erase(args.begin());
  args.insert(args.end(), global.begin(), global.end());
  if (command == "train-local") return aqueduct::TrainLocalMain(args);
  if (command == "plan") return aqueduct::PlanMain(args);
  if (command == "profile") return aqueduct::ProfileMain(args);
  if (command == "submit" || command == "status" || command == "watch" ||
      command == "jobs" || command == "workers" || command == "cancel" ||
      command == "trace") {
    return aqueduct::RemoteMain(command, args);
  }
  if (command == "help" || command == "--help" || command == "-h") {
    std::cout << kUsage;
    return 0;
  }
  return aqueduct::UsageError("unknown command '" + command + "'", kUsage);
}
