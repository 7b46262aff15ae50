// The aq subcommands. Each takes the arguments after its name, answers
// --help and -h with its usage and flags, and returns the process exit code:
// 0 success, 1 the operation failed or the input was bad, 2 bad usage, 3 the
// coordinator is unreachable.
#ifndef AQUEDUCT_CLIENT_COMMANDS_H_
#define AQUEDUCT_CLIENT_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/command_line.h"
#include "proto/types.h"

namespace aqueduct {

// In this process (train_local.cc, profile_command.cc, plan_command.cc).
int TrainLocalMain(const std::vector<std::string>& args);
int ProfileMain(const std::vector<std::string>& args);
// Offline from a profile, or a job's plan from the coordinator.
int PlanMain(const std::vector<std::string>& args);
// A pipeline schedule's actions, checked and timed (schedule_command.cc).
int ScheduleMain(const std::vector<std::string>& args);

// Through the coordinator (remote_commands.cc, trace_command.cc).
int SubmitMain(const std::vector<std::string>& args);
int StatusMain(const std::vector<std::string>& args);
int WatchMain(const std::vector<std::string>& args);
int JobsMain(const std::vector<std::string>& args);
// --name and --set (aq submit, aq train-local) applied to `spec`, --set
// last; INVALID_ARGUMENT naming the override.
absl::Status ApplyOverrideFlags(const ParsedArgs& parsed, JobSpec* spec);
int QueueMain(const std::vector<std::string>& args);
int WorkersMain(const std::vector<std::string>& args);
int CancelMain(const std::vector<std::string>& args);
int TraceMain(const std::vector<std::string>& args);
// A job's log lines (logs_command.cc).
int LogsMain(const std::vector<std::string>& args);
// A job's trained model and checkpoints (model_commands.cc); a checkpoint
// on disk, offline.
int WeightsMain(const std::vector<std::string>& args);
int CheckpointsMain(const std::vector<std::string>& args);
int VerifyCheckpointMain(const std::vector<std::string>& args);
// Fetches a finished job's model from the coordinator into `path`
// (checked as aq weights does); returns the exit code, errors printed.
int FetchModel(const std::string& job, const std::string& path, bool quiet);
// Samples text from a trained language model (generate_command.cc).
int GenerateMain(const std::vector<std::string>& args);
// Tokenizes text into token files (tokenize_command.cc).
int TokenizeMain(const std::vector<std::string>& args);
// Hugging Face GPT-2 and LLaMA checkpoints to and from Aqueduct's weights
// files (hf_command.cc).
int HfMain(const std::vector<std::string>& args);
// aq's named contexts (config_command.cc, contexts.h).
int ConfigMain(const std::vector<std::string>& args);

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_COMMANDS_H_
