#include "coordinator/jobs/job_id.h"

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"

namespace aqueduct {

absl::StatusOr<std::string> NewJobId(absl::string_view run, int64_t number) {
  absl::StatusOr<std::string> random =
      SecureRandomBytes(kJobIdRandomHexDigits / 2);
  if (!random.ok()) {
    return absl::Status(
        random.status().code(),
        absl::StrCat("cannot draw a job id: ", random.status().message()));
  }
  return absl::StrCat("job-", run, "-", number, "-",
                      absl::BytesToHexString(*random));
}

std::optional<int64_t> JobIdNumber(absl::string_view id,
                                   absl::string_view run) {
  const std::string prefix = absl::StrCat("job-", run, "-");
  if (id.substr(0, prefix.size()) != prefix) return std::nullopt;
  absl::string_view rest = id.substr(prefix.size());
  const size_t dash = rest.find('-');
  if (dash != absl::string_view::npos) {
    const absl::string_view random = rest.substr(dash + 1);
    if (random.size() != kJobIdRandomHexDigits) return std::nullopt;
    rest = rest.substr(0, dash);
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(rest, &n)) return std::nullopt;
  return n;
}

}  // namespace aqueduct
