// aq train-local: trains a job spec in this process on the CPU (the
// reference the pipeline is checked against).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/progress.h"
#include "common/checkpoint.h"
#include "common/device/cpu_device.h"
#include "common/logging.h"
#include "common/status.h"
#include "pipeline/spec.h"
#include "worker/nn/spec.h"
#include "worker/nn/training_state.h"
#include "worker/train/local_trainer.h"

// Shared with aq submit (remote_commands.cc).
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every);
ABSL_DECLARE_FLAG(std::string, resume);

ABSL_FLAG(int64_t, max_steps, 0,
          "stop after N steps (default: the spec's max_steps); 0 trains "
          "nothing and evaluates the initial (or --init_weights) model");
ABSL_FLAG(int64_t, epochs, 0,
          "passes over the data (default: the spec's epochs)");
ABSL_FLAG(std::string, init_weights, "",
          "start from these parameters (safetensors)");
ABSL_FLAG(std::string, save_weights, "",
          "write the trained parameters here (safetensors); the directory "
          "must exist");
ABSL_FLAG(std::string, log_level, "warn",
          "trace, debug, info, warn, error, critical or off");

namespace aqueduct {
namespace {

constexpr char kTrainLocalDescription[] =
    "Trains a job spec (text proto or JSON, proto/job.proto) in this\n"
    "process on the CPU, shows progress on stderr when it is a terminal,\n"
    "and prints the result: steps, throughput, final loss and test\n"
    "accuracy. --output json prints one object with steps, epochs,\n"
    "samples_per_second, loss (every step's), final_loss, test_accuracy,\n"
    "test_loss, test_samples, wall_seconds and parameters.\n";

CommandLineSpec TrainLocalSpec() {
  return SubcommandSpec("train-local", "JOB [flags]", kTrainLocalDescription,
                        {{"max_steps", "N", ""},
                         {"epochs", "E", ""},
                         {"threads", "T", ""},
                         {"init_weights", "FILE", ""},
                         {"save_weights", "FILE", ""},
                         {"checkpoint_dir", "DIR",
                          "checkpoint into DIR/train-local/v<version>/ (as "
                          "the daemons do; default: the spec's "
                          "checkpoint.dir)"},
                         {"checkpoint_every", "N", ""},
                         {"resume", "CHECKPOINT",
                          "continue from a checkpoint: its version "
                          "directory or manifest.json (of any job of this "
                          "model)"},
                         {"set", "PATH=VALUE", ""},
                         {"name", "NAME", ""},
                         OutputFlag(),
                         {"log_level", "LEVEL", ""}});
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

int ThreadsOrAllCores(int threads) {
  if (threads > 0) return threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The training options from the flags; an error message if one is bad.
std::optional<std::string> OptionsFromFlags(const ParsedArgs& parsed,
                                            LocalTrainOptions* options) {
  if (parsed.given.count("max_steps") > 0) {
    options->max_steps = absl::GetFlag(FLAGS_max_steps);
    if (*options->max_steps < 0) {
      return "--max_steps needs a non-negative integer";
    }
  }
  if (parsed.given.count("epochs") > 0) {
    options->epochs = absl::GetFlag(FLAGS_epochs);
    if (*options->epochs <= 0) return "--epochs needs a positive integer";
  }
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0 || threads > 1024) {
    return "--threads needs an integer in [1, 1024]";
  }
  options->init_weights = absl::GetFlag(FLAGS_init_weights);
  options->save_weights = absl::GetFlag(FLAGS_save_weights);
  return std::nullopt;
}

absl::StatusOr<JobSpec> LoadValidSpec(const std::string& path,
                                      const ParsedArgs& parsed) {
  auto spec = LoadJobSpecFile(path);
  if (!spec.ok()) return spec.status();
  RETURN_IF_ERROR(ApplyOverrideFlags(parsed, &*spec));
  if (auto valid = ValidateJobSpec(*spec); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", valid.status().message()));
  }
  return spec;
}

// A progress bar on stderr, redrawn in place every 10 steps.
void ShowProgress(const StepReport& r) {
  if (r.step % 10 != 0 && r.step != r.total_steps) return;
  std::string text =
      absl::StrFormat("epoch %d step %d/%d loss %.4f", r.epoch + 1, r.step,
                      r.total_steps, r.loss);
  if (r.samples_per_second > 0) {
    absl::StrAppend(&text,
                    absl::StrFormat(" %.0f samples/s", r.samples_per_second));
  }
  const double fraction =
      r.total_steps > 0 ? static_cast<double>(r.step) / r.total_steps : -1;
  DrawInPlace(stderr, FitLine(fraction, text, TerminalWidth(STDERR_FILENO)));
}

std::string ResultJson(const JobSpec& spec, const LocalTrainResult& r,
                       int threads) {
  std::string out = absl::StrCat(
      "{\"job\":", JsonString(spec.name()), ",\"steps\":", r.steps,
      ",\"epochs\":", r.epochs, ",\"batch_size\":", spec.batch_size(),
      ",\"threads\":", threads, ",\"parameters\":", r.parameters,
      ",\"samples_per_second\":", JsonNumber(r.samples_per_second),
      ",\"wall_seconds\":", JsonNumber(r.wall_seconds),
      ",\"final_loss\":", JsonNumber(r.losses.empty() ? 0.0 : r.losses.back()));
  if (r.test.has_value()) {
    absl::StrAppend(&out, ",\"test_accuracy\":", JsonNumber(r.test->accuracy),
                    ",\"test_loss\":", JsonNumber(r.test->loss),
                    ",\"test_samples\":", r.test->samples);
  }
  out += ",\"evals\":[";
  for (size_t i = 0; i < r.evals.size(); ++i) {
    const EvalAt& e = r.evals[i];
    absl::StrAppend(&out, i ? "," : "", "{\"step\":", e.step,
                    ",\"loss\":", JsonNumber(e.result.loss),
                    ",\"accuracy\":", JsonNumber(e.result.accuracy), "}");
  }
  out += "]";
  out += ",\"loss\":[";
  for (size_t i = 0; i < r.losses.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", JsonNumber(r.losses[i]));
  }
  return out + "]}";
}

void PrintResultText(const JobSpec& spec, const LocalTrainResult& r,
                     int threads) {
  std::cout << absl::StrFormat(
      "job %s: %d steps (%d epochs) of batch %d, %d parameters\n"
      "final training loss %.4f\n"
      "throughput %.1f samples/s (%d threads)\n",
      spec.name(), r.steps, r.epochs, spec.batch_size(), r.parameters,
      r.losses.empty() ? 0.0 : r.losses.back(), r.samples_per_second, threads);
  if (r.test.has_value() && spec.data().has_text()) {
    std::cout << absl::StrFormat(
        "validation loss %.4f perplexity %.2f (token accuracy %.4f, %d "
        "windows)\n",
        r.test->loss, std::exp(r.test->loss), r.test->accuracy,
        r.test->samples);
  } else if (r.test.has_value()) {
    std::cout << absl::StrFormat("test accuracy %.4f (loss %.4f, %d samples)\n",
                                 r.test->accuracy, r.test->loss,
                                 r.test->samples);
  }
  const std::string saved = absl::GetFlag(FLAGS_save_weights);
  if (!saved.empty()) std::cout << "weights saved to " << saved << "\n";
  std::cout << absl::StrFormat("wall time %.1f s\n", r.wall_seconds);
}

// Writes the state of `version` as a committed checkpoint (one file, then
// the manifest) under dir/train-local/, keeping the spec's keep_last.
absl::Status WriteLocalCheckpoint(const JobSpec& spec, const std::string& dir,
                                  Device& device, int64_t version,
                                  const ParameterSet& params,
                                  const Optimizer& optimizer) {
  constexpr char kJob[] = "train-local";
  ASSIGN_OR_RETURN(SafetensorsFile state,
                   ExportTrainingState(device, params, optimizer, {}));
  v1::CheckpointManifest m;
  m.set_job_id(kJob);
  m.set_version(version);
  m.set_schedule(kJob);
  m.set_num_layers(spec.model().layers_size());
  m.set_dir(CheckpointVersionDir(dir, kJob, version));
  ASSIGN_OR_RETURN(
      *m.add_files(),
      WriteCheckpointFile(PathRoots::Anywhere(), m.dir(), StageFileName(0, 0),
                          state, 0, 0, m.num_layers()));
  RETURN_IF_ERROR(CommitManifest(PathRoots::Anywhere(), m));
  std::set<int64_t> keep;
  std::vector<v1::CheckpointManifest> kept = ScanCheckpoints(
      PathRoots::Anywhere(), CheckpointJobDir(dir, kJob), nullptr);
  for (size_t i = kept.size() > static_cast<size_t>(CheckpointsKept(spec))
                      ? kept.size() - CheckpointsKept(spec)
                      : 0;
       i < kept.size(); ++i) {
    keep.insert(kept[i].version());
  }
  return PruneCheckpoints(PathRoots::Anywhere(), CheckpointJobDir(dir, kJob),
                          keep, version);
}

// Checkpointing and resuming as the flags (or the spec) ask; an error
// message if they are inconsistent or the checkpoint does not load.
std::optional<std::string> SetUpCheckpoints(const JobSpec& spec, Device* device,
                                            SafetensorsFile* restore,
                                            LocalTrainOptions* options) {
  std::string dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (dir.empty()) dir = spec.checkpoint().dir();
  int64_t every = absl::GetFlag(FLAGS_checkpoint_every);
  if (every == 0) every = spec.checkpoint().every_steps();
  if (!dir.empty() && every <= 0) {
    return "checkpoints need a positive --checkpoint_every (or the spec's "
           "checkpoint.every_steps)";
  }
  if (!dir.empty()) {
    options->checkpoint_every = every;
    options->on_checkpoint = [spec, dir, device](int64_t version,
                                                 const ParameterSet& params,
                                                 const Optimizer& optimizer) {
      return WriteLocalCheckpoint(spec, dir, *device, version, params,
                                  optimizer);
    };
  }
  const std::string resume = absl::GetFlag(FLAGS_resume);
  if (resume.empty()) return std::nullopt;
  auto m = ReadManifest(PathRoots::Anywhere(), resume);
  absl::Status s =
      m.ok() ? VerifyCheckpoint(PathRoots::Anywhere(), *m) : m.status();
  if (s.ok() && m->num_layers() != spec.model().layers_size()) {
    s = absl::InvalidArgumentError(
        absl::StrCat("it is of a model of ", m->num_layers(), " layers"));
  }
  if (s.ok()) {
    auto state =
        LoadCheckpointLayers(PathRoots::Anywhere(), *m, 0, m->num_layers());
    s = state.status();
    if (s.ok()) *restore = *std::move(state);
  }
  if (!s.ok()) return absl::StrCat("--resume ", resume, ": ", s.message());
  options->restore = restore;
  options->first_step = m->version();
  return std::nullopt;
}

}  // namespace

int TrainLocalMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = TrainLocalSpec();
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  LocalTrainOptions options;
  if (auto error = OptionsFromFlags(parsed, &options)) {
    return UsageError(spec, *error);
  }
  logging::LoggingOptions log;
  log.level = absl::GetFlag(FLAGS_log_level);
  log.component = "aq";
  if (absl::Status s = logging::ConfigureLogging(log); !s.ok()) {
    return UsageError(spec, std::string(s.message()));
  }
  const std::string& path = parsed.positional[0];
  const auto job = LoadValidSpec(path, parsed);
  if (!job.ok()) return Fail(std::string(job.status().message()));
  if (!options.save_weights.empty()) {
    if (absl::Status s = CheckWritable(options.save_weights); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  CpuDeviceOptions device_options;
  device_options.threads = ThreadsOrAllCores(absl::GetFlag(FLAGS_threads));
  CpuDevice device(device_options);
  device.SetBf16Gemm(job->precision().compute() == "bf16");
  SafetensorsFile restore;
  if (auto error = SetUpCheckpoints(*job, &device, &restore, &options)) {
    return Fail(*error);
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  if (tty) options.on_step = ShowProgress;
  if (!JsonOutput()) {
    options.on_eval = [tty](int64_t step, const EvalResult& e) {
      if (tty) DrawInPlace(stderr, "");
      std::cout << absl::StrFormat(
                       "step %d: held-out loss %.4f (perplexity "
                       "%.2f, accuracy %.4f)\n",
                       step, e.loss, std::exp(e.loss), e.accuracy)
                << std::flush;
    };
  }
  auto result = TrainLocal(*job, &device, options);
  if (tty) DrawInPlace(stderr, "");
  if (!result.ok()) {
    return Fail(
        absl::StrCat("train-local ", path, ": ", result.status().message()));
  }
  if (JsonOutput()) {
    std::cout << ResultJson(*job, *result, device_options.threads) << std::endl;
  } else {
    PrintResultText(*job, *result, device_options.threads);
  }
  return kExitOk;
}

}  // namespace aqueduct
