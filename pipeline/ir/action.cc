#include "pipeline/ir/action.h"

#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace aqueduct::ir {
namespace {

// Longest first, so that a prefix match never takes "B" for "SEND_B".
constexpr std::pair<Kind, const char*> kKinds[] = {
    {Kind::kReduceGrad, "REDUCE_GRAD"},
    {Kind::kSendF, "SEND_F"},
    {Kind::kRecvF, "RECV_F"},
    {Kind::kSendB, "SEND_B"},
    {Kind::kRecvB, "RECV_B"},
    {Kind::kStep, "STEP"},
    {Kind::kF, "F"},
    {Kind::kB, "B"},
    {Kind::kI, "I"},
    {Kind::kW, "W"},
};

bool HasMicrobatch(Kind kind) {
  return kind != Kind::kReduceGrad && kind != Kind::kStep;
}

// The most a program may hold (a bound for files from users).
constexpr int kMaxRanks = 4096;
constexpr int kMaxStagesPerRank = 64;
constexpr int kMaxMicrobatches = 1 << 16;

absl::Status LineError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("schedule file, line ", line, ": ", what));
}

// Reads "key=value" fields of the header into `layout` and `microbatches`.
absl::Status ParseHeader(absl::string_view line, Program* program) {
  constexpr absl::string_view kPrefix = "# aqueduct schedule:";
  if (!absl::StartsWith(line, kPrefix)) {
    return LineError(1, absl::StrCat("expected the header \"", kPrefix,
                                     " ranks=... stages_per_rank=... "
                                     "placement=... microbatches=...\""));
  }
  std::map<std::string, std::string> fields;
  for (absl::string_view field :
       absl::StrSplit(line.substr(kPrefix.size()), ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(field, '=');
    fields[kv.first] = kv.second;
  }
  Layout& layout = program->layout;
  const std::pair<const char*, int*> ints[] = {
      {"ranks", &layout.ranks},
      {"stages_per_rank", &layout.stages_per_rank},
      {"microbatches", &program->microbatches}};
  for (const auto& [key, value] : ints) {
    if (!absl::SimpleAtoi(fields[key], value)) {
      return LineError(
          1, absl::StrCat("the header's ", key, " is not a number: \"",
                          fields[key], "\""));
    }
  }
  const std::string& placement = fields["placement"];
  if (placement == "loop") {
    layout.placement = Placement::kLoop;
  } else if (placement == "v") {
    layout.placement = Placement::kV;
  } else {
    return LineError(1, absl::StrCat("the header's placement is \"", placement,
                                     "\", not loop or v"));
  }
  if (layout.ranks > kMaxRanks || layout.stages_per_rank > kMaxStagesPerRank ||
      program->microbatches < 1 || program->microbatches > kMaxMicrobatches) {
    return LineError(1, absl::StrCat("the header's sizes are out of range "
                                     "(ranks at most ",
                                     kMaxRanks, ", stages_per_rank at most ",
                                     kMaxStagesPerRank, ", microbatches 1 to ",
                                     kMaxMicrobatches, ")"));
  }
  absl::Status s = CheckLayout(layout);
  if (!s.ok()) return LineError(1, s.message());
  return absl::OkStatus();
}

// "r: a b c" into `program`.
absl::Status ParseRankLine(int number, absl::string_view line,
                           Program* program) {
  const size_t colon = line.find(':');
  int rank = -1;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(line.substr(0, colon), &rank) || rank < 0 ||
      rank >= program->layout.ranks) {
    return LineError(number, absl::StrCat("expected \"RANK: ACTION ...\" with "
                                          "RANK from 0 to ",
                                          program->layout.ranks - 1));
  }
  for (absl::string_view token :
       absl::StrSplit(line.substr(colon + 1), absl::ByAnyChar(" \t,"),
                      absl::SkipEmpty())) {
    absl::StatusOr<Action> action = ParseAction(token);
    if (!action.ok()) return LineError(number, action.status().message());
    program->ranks[rank].push_back(*action);
  }
  return absl::OkStatus();
}

}  // namespace

const char* KindName(Kind kind) {
  for (const auto& [k, name] : kKinds) {
    if (k == kind) return name;
  }
  return "?";
}

bool IsCompute(Kind kind) {
  return kind == Kind::kF || kind == Kind::kB || kind == Kind::kI ||
         kind == Kind::kW;
}

bool IsCommunication(Kind kind) {
  return kind == Kind::kSendF || kind == Kind::kRecvF || kind == Kind::kSendB ||
         kind == Kind::kRecvB;
}

std::string ActionText(const Action& a) {
  if (!HasMicrobatch(a.kind)) return absl::StrCat(a.stage, KindName(a.kind));
  return absl::StrCat(a.stage, KindName(a.kind), a.microbatch);
}

absl::StatusOr<Action> ParseAction(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text.substr(0, 32), "\" is not an action (", why,
                     "; e.g. 2F0, 1SEND_B3, 0STEP)"));
  };
  size_t digits = 0;
  while (digits < text.size() && absl::ascii_isdigit(text[digits])) ++digits;
  Action a;
  if (digits == 0 || digits > 6 ||
      !absl::SimpleAtoi(text.substr(0, digits), &a.stage)) {
    return bad("no stage number first");
  }
  absl::string_view rest = text.substr(digits);
  for (const auto& [kind, name] : kKinds) {
    if (!absl::StartsWith(rest, name)) continue;
    a.kind = kind;
    absl::string_view number = rest.substr(strlen(name));
    if (!HasMicrobatch(kind)) {
      if (!number.empty()) return bad("nothing may follow REDUCE_GRAD or STEP");
      return a;
    }
    if (number.empty() || number.size() > 6 ||
        !absl::SimpleAtoi(number, &a.microbatch) || a.microbatch < 0) {
      return bad("no microbatch number last");
    }
    return a;
  }
  return bad("unknown kind");
}

const char* PlacementName(Placement placement) {
  return placement == Placement::kV ? "v" : "loop";
}

int Layout::RankOf(int stage) const {
  if (placement == Placement::kV && stage >= ranks) {
    return 2 * ranks - 1 - stage;
  }
  return stage % ranks;
}

std::vector<int> Layout::StagesOf(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < stages(); ++s) {
    if (RankOf(s) == rank) out.push_back(s);
  }
  return out;
}

absl::Status CheckLayout(const Layout& layout) {
  if (layout.ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks is ", layout.ranks, ", must be at least 1"));
  }
  if (layout.stages_per_rank < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stages_per_rank is ", layout.stages_per_rank, ", must be at least 1"));
  }
  if (layout.placement == Placement::kV && layout.stages_per_rank != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a V placement holds exactly 2 stages per rank (rank r: "
                     "stages r and 2p-1-r), not ",
                     layout.stages_per_rank));
  }
  return absl::OkStatus();
}

std::string ProgramText(const Program& program) {
  const Layout& l = program.layout;
  std::string out = absl::StrCat("# aqueduct schedule: ranks=", l.ranks,
                                 " stages_per_rank=", l.stages_per_rank,
                                 " placement=", PlacementName(l.placement),
                                 " microbatches=", program.microbatches, "\n");
  for (size_t r = 0; r < program.ranks.size(); ++r) {
    absl::StrAppend(&out, r, ":");
    for (const Action& a : program.ranks[r]) {
      absl::StrAppend(&out, " ", ActionText(a));
    }
    out += "\n";
  }
  return out;
}

absl::StatusOr<Program> ParseProgram(absl::string_view text) {
  Program program;
  int number = 0;
  bool header = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (!header) {
      absl::Status s = ParseHeader(line, &program);
      if (!s.ok()) return s;
      program.ranks.assign(program.layout.ranks, {});
      header = true;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    absl::Status s = ParseRankLine(number, line, &program);
    if (!s.ok()) return s;
  }
  if (!header) return LineError(1, "the file is empty");
  return program;
}

}  // namespace aqueduct::ir
