// aq train-local: trains a job spec in this process on the CPU (the
// reference the pipeline is checked against).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/flags.h"
#include "common/device/cpu_device.h"
#include "common/logging.h"
#include "worker/nn/spec.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {
namespace {

constexpr char kTrainLocalUsage[] =
    "usage: aq train-local JOB [flags]\n"
    "  train a job spec (text proto or JSON) in this process on the CPU\n"
    "      --max-steps N        stop after N steps (overrides the spec)\n"
    "      --epochs E           passes over the data (overrides the spec)\n"
    "      --threads T          CPU threads for GEMM (default: all cores)\n"
    "      --init-weights FILE  start from these parameters (safetensors)\n"
    "      --save-weights FILE  write the trained parameters (safetensors)\n"
    "      --output text|json   result format (default text)\n"
    "      --log-level LEVEL    trace|debug|info|warn|error (default warn)\n";

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

struct TrainLocalArgs {
  std::string job;
  LocalTrainOptions options;
  int threads = 0;
  bool json = false;
  std::string log_level = "warn";
};

}  // namespace

int TrainLocalMain(const std::vector<std::string>& args) {
  TrainLocalArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    const std::string& a = args[i];
    if (TakeValue(args, &i, "--max-steps", &v)) {
      int64_t n;
      if (!absl::SimpleAtoi(v, &n) || n <= 0) {
        return UsageError(
            "--max-steps needs a positive integer, got '" + v + "'",
            kTrainLocalUsage);
      }
      parsed.options.max_steps = n;
    } else if (TakeValue(args, &i, "--epochs", &v)) {
      int64_t n;
      if (!absl::SimpleAtoi(v, &n) || n <= 0) {
        return UsageError("--epochs needs a positive integer, got '" + v + "'",
                          kTrainLocalUsage);
      }
      parsed.options.epochs = n;
    } else if (TakeValue(args, &i, "--threads", &v)) {
      if (!absl::SimpleAtoi(v, &parsed.threads) || parsed.threads <= 0 ||
          parsed.threads > 1024) {
        return UsageError(
            "--threads needs an integer in [1, 1024], got '" + v + "'",
            kTrainLocalUsage);
      }
    } else if (TakeValue(args, &i, "--init-weights", &v)) {
      parsed.options.init_weights = v;
    } else if (TakeValue(args, &i, "--save-weights", &v)) {
      parsed.options.save_weights = v;
    } else if (TakeValue(args, &i, "--output", &v)) {
      if (v != "text" && v != "json") {
        return UsageError("--output must be text or json, got '" + v + "'",
                          kTrainLocalUsage);
      }
      parsed.json = v == "json";
    } else if (TakeValue(args, &i, "--log-level", &v)) {
      parsed.log_level = v;
    } else if (!a.empty() && a[0] == '-') {
      return UsageError("unknown or incomplete flag '" + a + "'",
                        kTrainLocalUsage);
    } else if (parsed.job.empty()) {
      parsed.job = a;
    } else {
      return UsageError("unexpected argument '" + a + "'", kTrainLocalUsage);
    }
  }
  if (parsed.job.empty())
    return UsageError("train-local needs a job spec file", kTrainLocalUsage);

  logging::LoggingOptions log;
  log.level = parsed.log_level;
  log.component = "aq";
  if (absl::Status s = logging::ConfigureLogging(log); !s.ok()) {
    return UsageError(std::string(s.message()), kTrainLocalUsage);
  }

  auto spec = LoadJobSpecFile(parsed.job);
  if (!spec.ok()) {
    std::cerr << "aq: " << spec.status().message() << "\n";
    return 1;
  }
  if (auto valid = ValidateJobSpec(*spec); !valid.ok()) {
    std::cerr << "aq: " << parsed.job << ": " << valid.status().message()
              << "\n";
    return 1;
  }

  CpuDeviceOptions device_options;
  device_options.threads =
      parsed.threads > 0
          ? parsed.threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CpuDevice device(device_options);

  const bool tty = !parsed.json && isatty(STDERR_FILENO);
  if (tty) {
    parsed.options.on_step = [](const StepReport& r) {
      if (r.step % 10 != 0 && r.step != r.total_steps) return;
      const int width = 30;
      const int filled = static_cast<int>(width * r.step / r.total_steps);
      std::fprintf(
          stderr,
          "\r[%s%s] epoch %lld step %lld/%lld loss %.4f %.0f "
          "samples/s ",
          std::string(filled, '#').c_str(),
          std::string(width - filled, '.').c_str(),
          static_cast<long long>(r.epoch + 1), static_cast<long long>(r.step),
          static_cast<long long>(r.total_steps), r.loss, r.samples_per_second);
      std::fflush(stderr);
    };
  }
  auto result = TrainLocal(*spec, &device, parsed.options);
  if (tty) std::fprintf(stderr, "\n");
  if (!result.ok()) {
    std::cerr << "aq: train-local " << parsed.job << ": "
              << result.status().message() << "\n";
    return 1;
  }
  const LocalTrainResult& r = *result;
  if (parsed.json) {
    std::string out = absl::StrCat(
        "{\"job\":\"", spec->name(), "\",\"steps\":", r.steps,
        ",\"epochs\":", r.epochs, ",\"batch_size\":", spec->batch_size(),
        ",\"threads\":", device_options.threads,
        ",\"parameters\":", r.parameters,
        ",\"samples_per_second\":", JsonNumber(r.samples_per_second),
        ",\"wall_seconds\":", JsonNumber(r.wall_seconds), ",\"final_loss\":",
        JsonNumber(r.losses.empty() ? 0.0 : r.losses.back()));
    if (r.test.has_value()) {
      absl::StrAppend(&out, ",\"test_accuracy\":", JsonNumber(r.test->accuracy),
                      ",\"test_loss\":", JsonNumber(r.test->loss),
                      ",\"test_samples\":", r.test->samples);
    }
    out += ",\"loss\":[";
    for (size_t i = 0; i < r.losses.size(); ++i) {
      absl::StrAppend(&out, i ? "," : "", JsonNumber(r.losses[i]));
    }
    out += "]}";
    std::cout << out << std::endl;
  } else {
    std::cout << absl::StrFormat(
        "job %s: %d steps (%d epochs) of batch %d, %d parameters\n"
        "final training loss %.4f\n"
        "throughput %.1f samples/s (%d threads)\n",
        spec->name(), r.steps, r.epochs, spec->batch_size(), r.parameters,
        r.losses.empty() ? 0.0 : r.losses.back(), r.samples_per_second,
        device_options.threads);
    if (r.test.has_value()) {
      std::cout << absl::StrFormat(
          "test accuracy %.4f (loss %.4f, %d samples)\n", r.test->accuracy,
          r.test->loss, r.test->samples);
    }
    if (!parsed.options.save_weights.empty()) {
      std::cout << "weights saved to " << parsed.options.save_weights << "\n";
    }
    std::cout << absl::StrFormat("wall time %.1f s\n", r.wall_seconds);
  }
  return 0;
}

}  // namespace aqueduct
