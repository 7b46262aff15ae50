// aq: the Aqueduct command-line client. `aq --help` lists the subcommands,
// `aq COMMAND --help` (or `aq help COMMAND`) shows one's usage and flags,
// `aq --version` the version and build.
//
// Exit codes: 0 success, 1 the operation failed or the input was bad, 2 bad
// usage, 3 the coordinator is unreachable.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/commands.h"
#include "common/version.h"

namespace aqueduct {
namespace {

struct Subcommand {
  const char* name;
  const char* args;
  const char* summary;
  int (*main)(const std::vector<std::string>& args);
};

const Subcommand kSubcommands[] = {
    {"train-local", "JOB", "train a job spec in this process on the CPU",
     TrainLocalMain},
    {"profile", "JOB", "measure each layer of a job's model on this machine",
     ProfileMain},
    {"plan", "PROFILE|JOB", "plan stages from a profile, or show a job's plan",
     PlanMain},
    {"schedule", "NAME|FILE", "a pipeline schedule's actions, bubble, memory",
     ScheduleMain},
    {"submit", "JOB_SPEC", "submit a job to the coordinator (--wait: follow)",
     SubmitMain},
    {"status", "[JOB]", "a job's status (every job's without JOB)", StatusMain},
    {"watch", "JOB", "follow a job's progress until it ends", WatchMain},
    {"jobs", "", "list jobs", JobsMain},
    {"queue", "", "the jobs waiting for workers, in the order they start",
     QueueMain},
    {"workers", "", "list workers", WorkersMain},
    {"cancel", "JOB", "cancel a job", CancelMain},
    {"trace", "JOB -o FILE", "a job's executed schedule as Chrome trace JSON",
     TraceMain},
    {"logs", "JOB", "a job's log lines (--follow: until it ends)", LogsMain},
    {"weights", "JOB -o FILE", "fetch a job's trained model (safetensors)",
     WeightsMain},
    {"checkpoints", "JOB", "list a job's committed checkpoints",
     CheckpointsMain},
    {"generate", "--spec SPEC --weights FILE|--job JOB",
     "sample text from a trained language model", GenerateMain},
    {"hf", "import|export IN -o OUT",
     "Hugging Face GPT-2 and LLaMA weights, in and out", HfMain},
    {"tokenize", "FILE... --out_dir DIR",
     "tokenize text once into token files (SentencePiece)", TokenizeMain},
    {"config", "COMMAND [NAME]",
     "named contexts: coordinators and credentials (set-context, "
     "use-context, get-contexts, ...)",
     ConfigMain},
    {"verify-checkpoint", "PATH",
     "check a checkpoint on disk, offline (no coordinator)",
     VerifyCheckpointMain},
};

constexpr char kUsageTail[] =
    "  help [COMMAND]            this text, or a command's usage and flags\n"
    "\n"
    "Every command answers --help (-h) with its usage and flags; aq --version\n"
    "prints the version and build. Flag names use underscores (--max_steps);\n"
    "the dashed spelling (--max-steps) works too.\n"
    "Remote commands take --coordinator HOST:PORT (default $AQ_COORDINATOR,\n"
    "else 127.0.0.1:7070) or --context NAME (aq config), before or after\n"
    "the command, and --output text|json (json: exactly one JSON document\n"
    "on stdout).\n"
    "Exit codes: 0 success, 1 the job failed or bad input, 2 usage error,\n"
    "3 coordinator unreachable.\n";

std::string Usage() {
  std::string out =
      "usage: aq [--coordinator HOST:PORT] <command> [args] [flags]\n\n"
      "commands:\n";
  for (const Subcommand& c : kSubcommands) {
    std::string left = std::string("  ") + c.name + " " + c.args;
    left.resize(std::max<size_t>(left.size() + 1, 28), ' ');
    out += left + c.summary + "\n";
  }
  return out + kUsageTail;
}

const Subcommand* Find(const std::string& name) {
  for (const Subcommand& c : kSubcommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// Moves --coordinator, --context and --output given before the command to just
// after it, where the command parses them.
std::vector<std::string> GlobalFlagsFirst(std::vector<std::string>* args) {
  std::vector<std::string> global;
  while (!args->empty()) {
    const std::string& a = (*args)[0];
    const bool separate =
        a == "--coordinator" || a == "--output" || a == "--context";
    if (!separate && a.rfind("--coordinator=", 0) != 0 &&
        a.rfind("--output=", 0) != 0 && a.rfind("--context=", 0) != 0) {
      break;
    }
    const size_t n = separate && args->size() > 1 ? 2 : 1;
    global.insert(global.end(), args->begin(), args->begin() + n);
    args->erase(args->begin(), args->begin() + n);
  }
  return global;
}

int Help(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cout << Usage();
    return kExitOk;
  }
  const Subcommand* c = Find(args[0]);
  if (c == nullptr) {
    std::cerr << "aq: unknown command '" << args[0] << "'\n\n" << Usage();
    return kExitUsage;
  }
  return c->main({"--help"});
}

int Main(std::vector<std::string> args) {
  const std::vector<std::string> global = GlobalFlagsFirst(&args);
  if (args.empty()) {
    std::cerr << Usage();
    return kExitUsage;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "help" || command == "--help" || command == "-h") {
    return Help(args);
  }
  if (command == "--version" || command == "version") {
    std::cout << VersionText("aq");
    return kExitOk;
  }
  const Subcommand* c = Find(command);
  if (c == nullptr) {
    std::cerr << "aq: unknown " << (command[0] == '-' ? "flag" : "command")
              << " '" << command << "'\n\n"
              << Usage();
    return kExitUsage;
  }
  args.insert(args.begin(), global.begin(), global.end());
  return c->main(args);
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) {
  return aqueduct::Main(std::vector<std::string>(argv + 1, argv + argc));
}
