#include "coordinator/topology.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

// Union-find over worker indices.
class Components {
 public:
  explicit Components(int n) : parent_(n) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int Find(int i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void Join(int a, int b) { parent_[Find(a)] = Find(b); }

 private:
  std::vector<int> parent_;
};

// The slower direction of each pair i < j; INVALID_ARGUMENT naming the
// first pair not measured.
absl::StatusOr<std::vector<std::vector<double>>> Strengths(
    const LinkMatrix& links, int n) {
  const auto& bw = links.bytes_per_second;
  if (static_cast<int>(bw.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the link matrix has ", bw.size(), " rows for ", n, " workers"));
  }
  std::vector<std::vector<double>> s(n, std::vector<double>(n, 0));
  for (int i = 0; i < n; ++i) {
    if (static_cast<int>(bw[i].size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", i, " of the link matrix has ", bw[i].size(), " entries"));
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      const double v = std::min(bw[i][j], bw[j][i]);
      if (!(v > 0) || !std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the link between workers ", i, " and ", j, " is not measured"));
      }
      s[i][j] = s[j][i] = v;
    }
  }
  return s;
}

// The least strength of a fast link: the upper side of the largest ratio
// between neighbouring strengths, when that ratio reaches `gap`; else 0
// (no tiers: every link is as fast as the others, one group).
double FastThreshold(const std::vector<std::vector<double>>& s, double gap) {
  std::vector<double> all;
  for (size_t i = 0; i < s.size(); ++i) {
    for (size_t j = i + 1; j < s.size(); ++j) all.push_back(s[i][j]);
  }
  std::sort(all.begin(), all.end(), std::greater<double>());
  double best_ratio = 0, threshold = 0;
  for (size_t k = 0; k + 1 < all.size(); ++k) {
    const double ratio = all[k] / all[k + 1];
    if (ratio > best_ratio) {
      best_ratio = ratio;
      threshold = all[k];
    }
  }
  return best_ratio >= gap ? threshold : 0;
}

// Groups in the order of their first worker.
std::vector<std::vector<int>> GroupsOf(Components& c, int n) {
  std::map<int, int> index;  // root -> group
  std::vector<std::vector<int>> groups;
  for (int i = 0; i < n; ++i) {
    auto [it, added] = index.emplace(c.Find(i), groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  return groups;
}

// Fills the bandwidths and levels of `t` from its groups.
void SetLevels(const std::vector<std::vector<double>>& s, WorkerTopology* t) {
  const int n = static_cast<int>(s.size());
  std::vector<int> group_of(n);
  for (size_t g = 0; g < t->groups.size(); ++g) {
    for (int w : t->groups[g]) group_of[w] = static_cast<int>(g);
  }
  t->group_min_bytes_per_second.assign(t->groups.size(), 0);
  double slowest = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      const double v = s[i][j];
      slowest = slowest == 0 ? v : std::min(slowest, v);
      double& bound = group_of[i] == group_of[j]
                          ? t->group_min_bytes_per_second[group_of[i]]
                          : t->inter_bytes_per_second;
      bound = bound == 0 ? v : std::min(bound, v);
    }
  }
  const size_t k = t->groups[0].size();
  const bool equal =
      std::all_of(t->groups.begin(), t->groups.end(),
                  [k](const std::vector<int>& g) { return g.size() == k; });
  if (t->groups.size() >= 2 && k >= 2 && equal) {
    double intra = HUGE_VAL;
    for (double v : t->group_min_bytes_per_second) intra = std::min(intra, v);
    t->levels = {
        {static_cast<int>(k), intra},
        {static_cast<int>(t->groups.size()), t->inter_bytes_per_second}};
  } else {
    t->levels = {{n, slowest}};
  }
}

}  // namespace

absl::StatusOr<WorkerTopology> GroupWorkers(
    const LinkMatrix& links, const std::vector<std::string>& hosts,
    const TopologyOptions& options) {
  const int n = static_cast<int>(hosts.size());
  if (n == 0) return absl::InvalidArgumentError("no workers to group");
  auto s = Strengths(links, n);
  if (!s.ok()) return s.status();
  WorkerTopology t;
  if (n == 1) {
    t.groups = {{0}};
    t.group_min_bytes_per_second = {0};
    t.order = {0};
    return t;  // No links: the caller's flat level applies.
  }
  Components c(n);
  const double fast = FastThreshold(*s, options.gap_factor);
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      if ((*s)[i][j] >= fast || (!hosts[i].empty() && hosts[i] == hosts[j])) {
        c.Join(i, j);
      }
    }
  }
  t.groups = GroupsOf(c, n);
  for (const auto& g : t.groups)
    t.order.insert(t.order.end(), g.begin(), g.end());
  SetLevels(*s, &t);
  return t;
}

std::string HostOfAddress(const std::string& address) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    return close == std::string::npos ? "" : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

v1::PlanTopology DescribeTopology(const WorkerTopology& topology,
                                  const std::vector<std::string>& ids,
                                  const LinkMatrix& links, double seconds) {
  v1::PlanTopology out;
  out.set_kind("measured");
  int rank = 0;
  for (size_t g = 0; g < topology.groups.size(); ++g) {
    v1::WorkerGroup* group = out.add_groups();
    group->set_first_rank(rank);
    for (int w : topology.groups[g]) group->add_worker_ids(ids[w]);
    group->set_min_bytes_per_second(topology.group_min_bytes_per_second[g]);
    rank += static_cast<int>(topology.groups[g].size());
  }
  out.set_inter_bytes_per_second(topology.inter_bytes_per_second);
  out.set_probe_seconds(seconds);
  const int n = static_cast<int>(ids.size());
  if (n > kMaxWorkersWithLinks ||
      static_cast<int>(links.bytes_per_second.size()) != n) {
    return out;
  }
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      v1::MeasuredLink* link = out.add_links();
      link->set_from_worker(ids[i]);
      link->set_to_worker(ids[j]);
      link->set_bytes_per_second(links.bytes_per_second[i][j]);
      if (static_cast<int>(links.round_trip_ms.size()) == n) {
        link->set_round_trip_ms(links.round_trip_ms[i][j]);
      }
    }
  }
  return out;
}

namespace {

// Round `round`: worker i measures worker (i + round) mod n, all at once.
// Fills row i of `links`; the first error by source index.
absl::Status SurveyRound(const std::vector<SurveyWorker>& workers, int round,
                         const WorkerClientFactory& clients,
                         const SurveyOptions& options, LinkMatrix* links) {
  const int n = static_cast<int>(workers.size());
  std::vector<absl::Status> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      const SurveyWorker& to = workers[(i + round) % n];
      v1::MeasureLinksRequest request;
      v1::LinkTarget* target = request.add_targets();
      target->set_worker_id(to.id);
      target->set_host(HostOfAddress(to.address));
      target->set_port(to.link_probe_port);
      request.set_bytes(options.bytes);
      request.set_deadline_ms(
          absl::ToInt64Milliseconds(options.probe_deadline));
      auto response = clients(workers[i].address)
                          ->MeasureLinks(request, options.probe_deadline +
                                                      options.rpc_slack);
      if (!response.ok()) {
        errors[i] = absl::Status(response.status().code(),
                                 absl::StrCat("worker ", workers[i].id,
                                              " could not measure its links: ",
                                              response.status().message()));
      } else if (response->results_size() != 1 ||
                 !response->results(0).error().empty()) {
        errors[i] = absl::UnavailableError(absl::StrCat(
            "the link from worker ", workers[i].id, " to worker ", to.id,
            " could not be measured: ",
            response->results_size() == 1 ? response->results(0).error()
                                          : "no result"));
      } else {
        const int j = (i + round) % n;
        links->bytes_per_second[i][j] = response->results(0).bytes_per_second();
        links->round_trip_ms[i][j] = response->results(0).round_trip_ms();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : errors) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LinkMatrix> SurveyLinks(const std::vector<SurveyWorker>& workers,
                                       const WorkerClientFactory& clients,
                                       const SurveyOptions& options) {
  const int n = static_cast<int>(workers.size());
  for (const SurveyWorker& w : workers) {
    if (w.link_probe_port <= 0 || w.link_probe_port > 65535) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", w.id, " has no link probe (link_probe_port ",
                       w.link_probe_port, "; a worker older than the probe?)"));
    }
    if (HostOfAddress(w.address).empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", w.id, " has no host in its address '", w.address, "'"));
    }
  }
  LinkMatrix links;
  links.bytes_per_second.assign(n, std::vector<double>(n, 0));
  links.round_trip_ms.assign(n, std::vector<double>(n, 0));
  for (int round = 1; round < n; ++round) {
    if (absl::Status s = SurveyRound(workers, round, clients, options, &links);
        !s.ok()) {
      return s;
    }
  }
  return links;
}

}  // namespace aqueduct
