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
    "  help                 this text\n"
    "\n"
    "aq <command> --help shows a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return aqueduct::UsageError("", kUsage);
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "train-local") return aqueduct::TrainLocalMain(args);
  if (command == "plan") return aqueduct::PlanMain(args);
  if (command == "profile") return aqueduct::ProfileMain(args);
  if (command == "help" || command == "--help" || command == "-h") {
    std::cout << kUsage;
    return 0;
  }
  return aqueduct::UsageError("unknown command '" + command + "'", kUsage);
}
