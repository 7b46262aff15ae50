#include "coordinator/submission.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/jobs/field_limits.h"
#include "coordinator/planner/memory_fit.h"
#include "coordinator/planner/profile_graph.h"
#include "coordinator/planner/tensor_groups.h"
#include "pipeline/policy.h"
#include "pipeline/spec.h"

namespace aqueduct {

namespace {

// The longest `resume` a submission may name (PATH_MAX), and the longest
// owner (a credential's name, as field_limits.h bounds names).
constexpr size_t kMaxResumeBytes = 4096;
constexpr size_t kMaxOwnerBytes = 256;

}  // namespace

absl::Status CheckSubmissionSizes(const JobSpec& spec,
                                  const ModelProfile* profile,
                                  const std::string& resume,
                                  const std::string& owner) {
  if (absl::Status s = CheckFieldSizes(spec, SpecFieldLimits(), "the spec");
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", s.message()));
  }
  if (profile != nullptr) {
    if (absl::Status s =
            CheckFieldSizes(*profile, ProfileFieldLimits(), "the profile");
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid profile: ", s.message()));
    }
  }
  if (resume.size() > kMaxResumeBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume is ", resume.size(), " bytes, more than the ",
                     kMaxResumeBytes, " allowed"));
  }
  if (owner.size() > kMaxOwnerBytes) {
    return absl::InvalidArgumentError(absl::StrCat("owner is ", owner.size(),
                                                   " bytes, more than the ",
                                                   kMaxOwnerBytes, " allowed"));
  }
  return absl::OkStatus();
}

// A supplied profile's nodes against the largest worker, as members of
// the largest tensor group the spec allows, recomputing fully unless it
// fixes the mode (the best the planner can do); the error of the largest
// group.
absl::Status CheckSuppliedProfileFits(const ModelProfile& profile,
                                      const JobSpec& spec,
                                      const MemoryLimit& memory) {
  ASSIGN_OR_RETURN(const PipelinePolicy policy, ResolvePipeline(spec));
  MemberCosts costs;
  costs.recompute =
      policy.recompute_fixed || !HasTransformerLayers(spec.model())
          ? policy.recompute
          : Recompute::kFull;
  costs.batch_size = spec.batch_size();
  costs.sequence = policy.sequence_parallel;
  absl::Status first;
  for (int degree : TensorDegreesFor(spec.model(), policy)) {
    costs.degree = degree;
    auto member = MemberProfile(spec.model(), profile, costs);
    auto graph = member.ok() ? ProfileGraph::FromProto(*member)
                             : absl::StatusOr<ProfileGraph>(member.status());
    absl::Status fits =
        graph.ok() ? CheckProfileFits(*graph, spec, memory) : graph.status();
    if (fits.ok()) return fits;
    if (first.ok()) {
      first =
          degree > 1 || costs.recompute != Recompute::kNone
              ? absl::Status(fits.code(),
                             absl::StrCat("as one of ", degree,
                                          " members of a tensor group, ",
                                          RecomputeName(costs.recompute),
                                          " recomputation: ", fits.message()))
              : fits;
    }
  }
  return first;
}

absl::Status CheckPriority(const JobSpec& spec, const std::string& role,
                           int max_user_priority) {
  if (role != "user" || spec.priority() <= max_user_priority) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "priority=", spec.priority(), " is above ", max_user_priority,
      ", the most a user credential may set (the coordinator's "
      "--max_user_priority); an admin credential may set up to ",
      kMaxJobPriority));
}

absl::Status CheckWorkersExist(const JobSpec& spec, int needed,
                               int registered) {
  if (needed <= registered || spec.pipeline().wait_for_workers_ms() > 0) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the job needs ", needed, needed == 1 ? " worker and " : " workers and ",
      registered, registered == 1 ? " is" : " are",
      " registered: no set of registered workers could run it; start more "
      "workers, ask for fewer (pipeline.workers), or set "
      "pipeline.wait_for_workers_ms to wait that long for more to register"));
}

absl::StatusOr<SpecSummary> CheckSpecAndProfile(const JobSpec& spec,
                                                const ModelProfile* profile,
                                                int64_t memory_bytes) {
  const MemoryLimit memory{memory_bytes,
                           "the largest registered worker's memory"};
  auto valid = CheckJobSpec(spec, memory);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", valid.status().message()));
  }
  if (profile != nullptr) {
    const absl::Status fits = CheckSuppliedProfileFits(*profile, spec, memory);
    if (!fits.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid profile: ", fits.message()));
    }
  }
  return valid;
}

absl::StatusOr<int64_t> KnownTotalSteps(const JobSpec& spec,
                                        const SpecSummary& summary) {
  if (summary.train_samples >= 0) {
    return TotalSteps(spec, summary.train_samples);
  }
  return spec.epochs() == 0 ? spec.max_steps() : 0;
}

Job NewJob(const std::string& id, const std::string& owner, const JobSpec& spec,
           const ModelProfile* profile, const SpecSummary& summary,
           int64_t total_steps, const v1::CheckpointManifest& resume,
           absl::Time wall_now, absl::Time now) {
  Job job;
  job.id = id;
  job.owner = owner;
  job.spec = spec;
  if (profile != nullptr) {
    job.has_profile = true;
    job.profile = *profile;
  }
  job.submitted = wall_now;
  job.pending_since = now;
  job.workers_needed = summary.pipeline.workers;
  job.total_steps = total_steps;
  job.ledger = JobLedger(spec.batch_size());
  job.resume = resume;
  job.max_restarts = MaxRestarts(spec);
  return job;
}

}  // namespace aqueduct
