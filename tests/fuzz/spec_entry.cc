// The spec target: a submission as the coordinator checks it
// (CoordinatorCore::SubmitJob: the spec, then the steps it runs; the driver
// then asks for the microbatches of every plan size it may try), and as a
// worker checks it against its memory before building the model.
#include <algorithm>
#include <string>

#include "common/check.h"
#include "common/status.h"
#include "google/protobuf/text_format.h"
#include "pipeline/policy.h"
#include "pipeline/spec.h"
#include "tests/fuzz/entries.h"

namespace aqueduct {
namespace fuzz {

namespace {

// A worker's memory for the memory checks: a 16 GiB device.
constexpr int64_t kWorkerMemoryBytes = int64_t{16} << 30;

// Every check the coordinator makes of a spec before it queues the job,
// against the default memory limit and a worker's (`memory_bytes`), and
// the check a worker makes before it builds the whole model as one stage.
absl::Status CheckAsCoordinator(const JobSpec& spec, int64_t memory_bytes) {
  ASSIGN_OR_RETURN(const SpecSummary summary, CheckJobSpec(spec));
  if (summary.train_samples >= 0) {
    RETURN_IF_ERROR(TotalSteps(spec, summary.train_samples).status());
  }
  // The driver plans for every worker count from the job's down to 1
  // (PlanAhead); a bounded sample of them keeps one input fast.
  const int most = std::min(summary.pipeline.workers, 64);
  for (int workers = 1; workers <= most; ++workers) {
    (void)MicrobatchesFor(summary.pipeline, spec.batch_size(), workers);
  }
  const MemoryLimit worker{memory_bytes, "the fuzz worker's memory"};
  RETURN_IF_ERROR(CheckJobSpec(spec, worker).status());
  StageNeeds whole;
  whole.what = "the whole model";
  whole.layer_end = spec.model().layers_size();
  whole.samples = spec.batch_size();
  return CheckStageMemory(spec, summary.input, whole, worker,
                          absl::StatusCode::kFailedPrecondition);
}

std::string Print(const JobSpec& spec) {
  std::string text;
  AQ_CHECK(google::protobuf::TextFormat::PrintToString(spec, &text));
  return text;
}

}  // namespace

absl::Status SpecEntry(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ASSIGN_OR_RETURN(const JobSpec spec, ParseJobSpec(text, "fuzz"));
  RETURN_IF_ERROR(CheckAsCoordinator(spec, kWorkerMemoryBytes));
  // What `aq` sends is what the coordinator journals and a restarted one
  // reads back: an accepted spec, printed and parsed again, is accepted
  // again and prints the same.
  const std::string printed = Print(spec);
  absl::StatusOr<JobSpec> again = ParseJobSpec(printed, "fuzz (printed)");
  AQ_CHECK(again.ok());
  AQ_CHECK(CheckAsCoordinator(*again, kWorkerMemoryBytes).ok());
  AQ_CHECK(Print(*again) == printed);
  return absl::OkStatus();
}

}  // namespace fuzz
}  // namespace aqueduct
