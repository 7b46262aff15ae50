#include "pipeline/recompute.h"

#include "absl/strings/str_cat.h"

namespace aqueduct {

const char* RecomputeName(Recompute mode) {
  switch (mode) {
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
    case Recompute::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<Recompute> ParseRecompute(const std::string& text,
                                         const std::string& field) {
  if (text.empty() || text == "none") return Recompute::kNone;
  if (text == "selective") return Recompute::kSelective;
  if (text == "full") return Recompute::kFull;
  return absl::InvalidArgumentError(
      absl::StrCat(field, "=\"", text,
                   "\" is not a recomputation mode: none, selective or full"));
}

}  // namespace aqueduct
