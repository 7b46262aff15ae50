// The planner's topology from measured links (pipeline.topology
// "measured"): which of a job's workers are joined by fast links, the
// levels the planner gets (innermost first, as PipeDream's hierarchical
// optimizer takes them) and the order of the workers that makes every fast
// group a contiguous range of plan ranks.
//
// Grouping: a link's strength is the slower of its two directions. The
// strengths are sorted, and the largest ratio between neighbours splits
// them into fast and slow when it is at least options.gap_factor (a
// relative threshold such as "within 4x of the fastest" would split a fast
// group whose links a busy CPU measured unevenly; a gap between tiers does
// not move). Workers joined by fast links, or on the same host address,
// form a group (connected components). Levels: >= 2 groups of equal size k
// (k >= 2) give {k, slowest link inside a group}, {groups, slowest link
// between groups}; anything else one level of all workers at the slowest
// link measured.
//
// The survey (SurveyLinks) asks each worker to measure its links to the
// others through the WorkerClient interface, in N - 1 rounds: in round r
// worker i measures worker (i + r) mod N, all sources at once. Each probe
// server then serves one probe per round (it serves one at a time, and a
// probe that waited for another would count the wait as transfer time).
//
// Pure functions are thread-safe; SurveyLinks blocks its caller for the
// rounds (each bounded by its deadline) and starts a thread per source per
// round.
#ifndef AQUEDUCT_COORDINATOR_TOPOLOGY_H_
#define AQUEDUCT_COORDINATOR_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/planner/pipedream.h"
#include "coordinator/worker_client.h"
#include "proto/plan.pb.h"

namespace aqueduct {

// bytes_per_second[i][j]: what worker i measured sending to worker j (0:
// not measured; the diagonal is unused).
struct LinkMatrix {
  std::vector<std::vector<double>> bytes_per_second;
  std::vector<std::vector<double>> round_trip_ms;
};

struct TopologyOptions {
  // The least ratio between a fast and a slow link that splits groups.
  double gap_factor = 3;
};

struct WorkerTopology {
  // Worker indices per group: groups in the order of their first worker,
  // each group's workers in input order.
  std::vector<std::vector<int>> groups;
  // The slowest link inside each group (0 for a group of one), and between
  // groups (0 for one group).
  std::vector<double> group_min_bytes_per_second;
  double inter_bytes_per_second = 0;
  // The planner's levels, innermost first.
  std::vector<PlannerLevel> levels;
  // Worker indices group by group: plan rank r runs on worker order[r].
  std::vector<int> order;
};

// Groups `hosts.size()` workers from their measured links. INVALID_ARGUMENT
// when the matrix's shape does not match or a link between two workers is
// not measured (0, negative or not finite).
absl::StatusOr<WorkerTopology> GroupWorkers(
    const LinkMatrix& links, const std::vector<std::string>& hosts,
    const TopologyOptions& options = {});

// The host of a "host:port" or "[v6]:port" address ("" if it has none).
std::string HostOfAddress(const std::string& address);

// What a plan shows of `topology` (ids: the workers, in input order); the
// links are kept for up to kMaxWorkersWithLinks workers (n^2 of them go
// with every stage assignment and the journal).
inline constexpr int kMaxWorkersWithLinks = 16;
v1::PlanTopology DescribeTopology(const WorkerTopology& topology,
                                  const std::vector<std::string>& ids,
                                  const LinkMatrix& links, double seconds);

// A worker the survey measures: its id, Worker service address and link
// probe port (0: none).
struct SurveyWorker {
  std::string id;
  std::string address;
  int link_probe_port = 0;
};

struct SurveyOptions {
  // Bytes of each bulk probe: a few MiB measure a 100 Mbit/s link in a
  // fraction of a second and a fast one past TCP's slow start.
  int64_t bytes = int64_t{4} << 20;
  // Per probe (the round trip and the bulk transfer together).
  absl::Duration probe_deadline = absl::Seconds(10);
  // Added to the probe's deadline for the RPC carrying it.
  absl::Duration rpc_slack = absl::Seconds(5);
};

// Measures every ordered pair of `workers` (see above). FAILED_PRECONDITION
// naming a worker with no link probe port or no host; the worker's RPC
// error naming it when a call fails; UNAVAILABLE naming both workers when a
// probe fails.
absl::StatusOr<LinkMatrix> SurveyLinks(const std::vector<SurveyWorker>& workers,
                                       const WorkerClientFactory& clients,
                                       const SurveyOptions& options = {});

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_TOPOLOGY_H_
