// A pipeline schedule as data (the action IR): for each rank, the ordered
// list of actions it carries out for one minibatch, communication
// included. A minibatch's list is the same for every minibatch of a
// flushing schedule; the executor stamps the minibatch on it, so no list
// ever spans a whole run.
//
// Stages are the model's pieces in order, 0 .. stages-1 (with several
// chunks per rank, "virtual stages"); a rank holds `stages_per_rank` of
// them, placed in a loop (interleaved 1F1B: rank r holds r, r+p, r+2p, ...)
// or in a V (ZB-V: rank r holds r and 2p-1-r).
//
// Kinds, as torch.distributed.pipelining spells them:
//   F        forward of a microbatch through a stage
//   B        the whole backward (input and weight gradients together)
//   I        the input gradient only (the first half of a split backward)
//   W        the weight gradients only (after the stage's I)
//   SEND_F   the activation of F to the next stage's rank
//   RECV_F   the activation the stage's F needs from the previous rank
//   SEND_B   the input gradient of B or I to the previous stage's rank
//   RECV_B   the gradient the stage's B or I needs from the next rank
//   REDUCE_GRAD  the all-reduce of the stage's gradients over its replicas
//   STEP     the stage's optimizer step
// Text form: "<stage><KIND><microbatch>", e.g. "2F0", "3SEND_F1"; REDUCE_GRAD
// and STEP have no microbatch ("1STEP").
//
// Thread-safety: plain values and stateless functions.
#ifndef AQUEDUCT_PIPELINE_IR_ACTION_H_
#define AQUEDUCT_PIPELINE_IR_ACTION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aqueduct::ir {

enum class Kind {
  kF,
  kB,
  kI,
  kW,
  kSendF,
  kRecvF,
  kSendB,
  kRecvB,
  kReduceGrad,
  kStep,
};

const char* KindName(Kind kind);
bool IsCompute(Kind kind);        // F, B, I, W.
bool IsCommunication(Kind kind);  // SEND_*, RECV_*.

struct Action {
  int stage = 0;
  Kind kind = Kind::kF;
  int microbatch = 0;  // Unused (0) for REDUCE_GRAD and STEP.
  bool operator==(const Action& o) const {
    return stage == o.stage && kind == o.kind && microbatch == o.microbatch;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

// "2F0", "1STEP".
std::string ActionText(const Action& action);
// INVALID_ARGUMENT naming the token when it is not an action's text.
absl::StatusOr<Action> ParseAction(absl::string_view text);

enum class Placement { kLoop, kV };
const char* PlacementName(Placement placement);

// Where the stages live.
struct Layout {
  int ranks = 1;
  int stages_per_rank = 1;
  Placement placement = Placement::kLoop;

  int stages() const { return ranks * stages_per_rank; }
  // The rank that holds `stage` (0 <= stage < stages()).
  int RankOf(int stage) const;
  // The stages of `rank`, in increasing order.
  std::vector<int> StagesOf(int rank) const;
};

// INVALID_ARGUMENT naming the field: ranks < 1, stages_per_rank < 1, a V
// with other than 2 stages per rank.
absl::Status CheckLayout(const Layout& layout);

// One minibatch's actions of every rank.
struct Program {
  Layout layout;
  int microbatches = 1;
  std::vector<std::vector<Action>> ranks;  // [rank] -> actions in order.
};

// The text file of a program (a user's schedule file; `aq schedule`):
//   # aqueduct schedule: ranks=2 stages_per_rank=1 placement=loop
//   microbatches=2 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 ... 1: 1RECV_F0
//   1F0 1B0 1SEND_B0 ...
// Blank lines and other lines starting with '#' are ignored; each rank's
// line once, in any order; a rank's actions may be split over several
// lines with the same "r:" prefix (appended in order).
std::string ProgramText(const Program& program);
// INVALID_ARGUMENT naming the line (1-based) and what is wrong. The header
// line is required and comes first.
absl::StatusOr<Program> ParseProgram(absl::string_view text);

}  // namespace aqueduct::ir

#endif  // AQUEDUCT_PIPELINE_IR_ACTION_H_
