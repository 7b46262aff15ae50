#include "coordinator/topology.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// A matrix where link(i, j) gives both directions.
LinkMatrix Matrix(int n, const std::function<double(int, int)>& link) {
  LinkMatrix m;
  m.bytes_per_second.assign(n, std::vector<double>(n, 0));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j)
        m.bytes_per_second[i][j] = link(std::min(i, j), std::max(i, j));
    }
  }
  return m;
}

std::vector<std::string> Hosts(int n) {
  std::vector<std::string> hosts;
  for (int i = 0; i < n; ++i) hosts.push_back("10.0.0." + std::to_string(i));
  return hosts;
}

TEST(GroupWorkersTest, TwoRacksMakeTwoLevelsWithTheSlowestLinks) {
  // Fast links measured unevenly (a busy CPU): 0.9-2.5 GB/s; the links
  // between the racks 11-13 MB/s.
  const std::map<std::pair<int, int>, double> fast = {{{0, 1}, 0.9e9},
                                                      {{2, 3}, 2.5e9}};
  auto t = GroupWorkers(Matrix(4,
                               [&](int i, int j) {
                                 auto it = fast.find({i, j});
                                 return it != fast.end() ? it->second
                                                         : 11e6 + i * 1e6;
                               }),
                        Hosts(4));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(t->order, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(t->levels.size(), 2u);
  EXPECT_EQ(t->levels[0].workers, 2);
  EXPECT_DOUBLE_EQ(t->levels[0].bandwidth_bytes_per_s, 0.9e9);
  EXPECT_EQ(t->levels[1].workers, 2);
  EXPECT_DOUBLE_EQ(t->levels[1].bandwidth_bytes_per_s, 11e6);
  EXPECT_DOUBLE_EQ(t->inter_bytes_per_second, 11e6);
  EXPECT_EQ(t->group_min_bytes_per_second, (std::vector<double>{0.9e9, 2.5e9}));
}

TEST(GroupWorkersTest, InterleavedWorkersAreOrderedGroupByGroup) {
  // Workers 0 and 2 share a rack, 1 and 3 another.
  auto t = GroupWorkers(
      Matrix(4, [](int i, int j) { return (i % 2) == (j % 2) ? 1e9 : 1e7; }),
      Hosts(4));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->order, (std::vector<int>{0, 2, 1, 3}));
  ASSERT_EQ(t->levels.size(), 2u);
  EXPECT_EQ(t->levels[1].workers, 2);
}

TEST(GroupWorkersTest, EvenLinksMakeOneLevelAtTheSlowest) {
  // Within a factor of 2: noise, not tiers.
  auto t = GroupWorkers(
      Matrix(4, [](int i, int j) { return 1e9 + (i + j) * 1e8; }), Hosts(4));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->groups.size(), 1u);
  ASSERT_EQ(t->levels.size(), 1u);
  EXPECT_EQ(t->levels[0].workers, 4);
  EXPECT_DOUBLE_EQ(t->levels[0].bandwidth_bytes_per_s, 1.1e9);
}

TEST(GroupWorkersTest, UnequalGroupsMakeOneLevelAtTheSlowest) {
  // 0, 1, 2 fast together; 3 alone behind a slow link.
  auto t = GroupWorkers(
      Matrix(4, [](int, int j) { return j == 3 ? 5e6 : 1e9; }), Hosts(4));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->groups, (std::vector<std::vector<int>>{{0, 1, 2}, {3}}));
  ASSERT_EQ(t->levels.size(), 1u);
  EXPECT_EQ(t->levels[0].workers, 4);
  EXPECT_DOUBLE_EQ(t->levels[0].bandwidth_bytes_per_s, 5e6);
}

TEST(GroupWorkersTest, WorkersOnOneHostAreOneGroup) {
  // Hosts a (0, 2) and b (1, 3); the link inside b measured as slow as
  // those between the hosts (noise): b is one group all the same.
  auto t = GroupWorkers(
      Matrix(4, [](int i, int j) { return i == 0 && j == 2 ? 1e9 : 1e7; }),
      {"a", "b", "a", "b"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(t->order, (std::vector<int>{0, 2, 1, 3}));
  ASSERT_EQ(t->levels.size(), 2u);
  EXPECT_DOUBLE_EQ(t->levels[0].bandwidth_bytes_per_s, 1e7);
}

TEST(GroupWorkersTest, TheDirectionThatIsSlowerCounts) {
  // 0 -> 1 fast, 1 -> 0 slow: not a fast link.
  LinkMatrix m = Matrix(4, [](int i, int j) {
    return (i == 0 && j == 1) || (i == 2 && j == 3) ? 1e9 : 1e7;
  });
  m.bytes_per_second[1][0] = 1e7;
  auto t = GroupWorkers(m, Hosts(4));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->groups, (std::vector<std::vector<int>>{{0}, {1}, {2, 3}}));
  EXPECT_EQ(t->levels.size(), 1u);
}

TEST(GroupWorkersTest, RefusesAMissingLinkOrAWrongShape) {
  LinkMatrix m = Matrix(3, [](int, int) { return 1e9; });
  m.bytes_per_second[2][1] = 0;
  auto t = GroupWorkers(m, Hosts(3));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "the link between workers 1 and 2 is not measured");
  EXPECT_FALSE(GroupWorkers(m, Hosts(4)).ok());
  EXPECT_FALSE(GroupWorkers(LinkMatrix(), {}).ok());
}

TEST(GroupWorkersTest, OneWorkerHasNoLevels) {
  auto t = GroupWorkers(Matrix(1, [](int, int) { return 0.0; }), Hosts(1));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->order, std::vector<int>{0});
  EXPECT_TRUE(t->levels.empty());
}

TEST(TopologyTest, HostOfAddress) {
  EXPECT_EQ(HostOfAddress("10.77.0.11:4000"), "10.77.0.11");
  EXPECT_EQ(HostOfAddress("[::1]:4000"), "::1");
  EXPECT_EQ(HostOfAddress("host"), "host");
  EXPECT_EQ(HostOfAddress(":4000"), "");
}

TEST(TopologyTest, DescribeShowsGroupsInRankOrderAndTheLinks) {
  LinkMatrix m =
      Matrix(4, [](int i, int j) { return (i % 2) == (j % 2) ? 1e9 : 1e7; });
  auto t = GroupWorkers(m, Hosts(4));
  ASSERT_TRUE(t.ok());
  const v1::PlanTopology d =
      DescribeTopology(*t, {"w0", "w1", "w2", "w3"}, m, 0.5);
  EXPECT_EQ(d.kind(), "measured");
  ASSERT_EQ(d.groups_size(), 2);
  EXPECT_EQ(d.groups(1).first_rank(), 2);
  EXPECT_EQ(d.groups(1).worker_ids(0), "w1");
  EXPECT_EQ(d.groups(1).worker_ids(1), "w3");
  EXPECT_DOUBLE_EQ(d.inter_bytes_per_second(), 1e7);
  EXPECT_EQ(d.links_size(), 12);
  EXPECT_DOUBLE_EQ(d.probe_seconds(), 0.5);
}

// A worker that measures from a table of links, and checks that no probe
// server is probed by two workers at once.
struct FakeNetwork {
  std::map<std::pair<std::string, std::string>, double> bandwidth;
  std::set<std::pair<std::string, std::string>> fail;
  std::mutex mu;
  std::map<std::string, int> probing;  // target address -> probes now
  std::atomic<int> overlaps{0}, calls{0};
  std::atomic<int> at_once{0}, max_at_once{0};
  // When above 0, probes meet in groups of this many: each waits, its
  // target held, until the group is complete. Probes that can run at once
  // then do, whatever the scheduling, so overlaps and the concurrency are
  // seen for certain rather than by chance. A group that does not form
  // within 10 s (the survey runs fewer probes at once) ends the meetings.
  int meet = 0;
  std::condition_variable met;
  int arrived = 0, group = 0;
  bool gave_up = false;
};

class FakeProbingWorker : public WorkerClient {
 public:
  FakeProbingWorker(FakeNetwork* net, std::string from)
      : net_(net), from_(std::move(from)) {}
  absl::Status AssignStage(const StageAssignment&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status StartJob(const std::string&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string&, const std::string&, absl::Duration,
                       std::optional<int>) override {
    return absl::OkStatus();
  }
  absl::StatusOr<WorkerRuntimeStatus> GetStatus(absl::Duration) override {
    return WorkerRuntimeStatus();
  }
  absl::StatusOr<ModelProfile> Profile(const JobSpec&,
                                       absl::Duration) override {
    return ModelProfile();
  }
  absl::StatusOr<v1::MeasureLinksResponse> MeasureLinks(
      const v1::MeasureLinksRequest& request, absl::Duration) override {
    ++net_->calls;
    const int now = ++net_->at_once;
    int seen = net_->max_at_once.load();
    while (now > seen && !net_->max_at_once.compare_exchange_weak(seen, now)) {
    }
    v1::MeasureLinksResponse response;
    for (const v1::LinkTarget& t : request.targets()) {
      const std::string to = t.host() + ":" + std::to_string(t.port());
      {
        std::unique_lock<std::mutex> lock(net_->mu);
        if (++net_->probing[to] > 1) ++net_->overlaps;
        Meet(lock);
      }
      v1::LinkResult* r = response.add_results();
      r->set_worker_id(t.worker_id());
      if (net_->fail.count({from_, t.worker_id()}) > 0) {
        r->set_error("link probe: deadline exceeded while sending");
      } else {
        r->set_bytes_per_second(net_->bandwidth.at({from_, t.worker_id()}));
        r->set_round_trip_ms(0.1);
      }
      std::lock_guard<std::mutex> lock(net_->mu);
      --net_->probing[to];
    }
    --net_->at_once;
    return response;
  }

 private:
  // Waits for the rest of this probe's group (FakeNetwork::meet).
  void Meet(std::unique_lock<std::mutex>& lock) {
    if (net_->meet <= 0 || net_->gave_up) return;
    const int group = net_->group;
    if (++net_->arrived == net_->meet) {
      net_->arrived = 0;
      ++net_->group;
      net_->met.notify_all();
      return;
    }
    if (!net_->met.wait_for(lock, std::chrono::seconds(10), [&] {
          return net_->group != group || net_->gave_up;
        })) {
      net_->gave_up = true;
      net_->met.notify_all();
    }
  }

  FakeNetwork* net_;
  std::string from_;
};

std::vector<SurveyWorker> FourWorkers() {
  std::vector<SurveyWorker> workers;
  for (int i = 0; i < 4; ++i) {
    workers.push_back({"w" + std::to_string(i),
                       "10.0.0." + std::to_string(i) + ":5000", 6000 + i});
  }
  return workers;
}

WorkerClientFactory Clients(FakeNetwork* net,
                            const std::vector<SurveyWorker>& workers) {
  std::map<std::string, std::string> id_of;
  for (const SurveyWorker& w : workers) id_of[w.address] = w.id;
  return [net, id_of](const std::string& address) {
    return std::make_unique<FakeProbingWorker>(net, id_of.at(address));
  };
}

TEST(SurveyLinksTest, MeasuresEveryOrderedPairOneProbePerServerAtATime) {
  FakeNetwork net;
  net.meet = 4;  // A round: every worker probes one other at once.
  const auto workers = FourWorkers();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      net.bandwidth[{workers[i].id, workers[j].id}] = 1e6 * (10 * i + j + 1);
    }
  }
  auto links = SurveyLinks(workers, Clients(&net, workers));
  ASSERT_TRUE(links.ok()) << links.status();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_DOUBLE_EQ(links->bytes_per_second[i][j],
                       i == j ? 0 : 1e6 * (10 * i + j + 1))
          << i << " -> " << j;
    }
  }
  EXPECT_EQ(net.calls.load(), 12);
  EXPECT_EQ(net.overlaps.load(), 0);
  // The sources of a round measure at once: every group of 4 formed.
  EXPECT_EQ(net.max_at_once.load(), 4);
  EXPECT_FALSE(net.gave_up);
  EXPECT_EQ(net.group, 3);
}

TEST(SurveyLinksTest, AFailedProbeNamesBothWorkers) {
  FakeNetwork net;
  const auto workers = FourWorkers();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j)
      net.bandwidth[{workers[i].id, workers[j].id}] = 1e9;
  }
  net.fail.insert({"w2", "w0"});
  auto links = SurveyLinks(workers, Clients(&net, workers));
  ASSERT_FALSE(links.ok());
  EXPECT_EQ(links.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(links.status().message(),
            "the link from worker w2 to worker w0 could not be measured: link "
            "probe: deadline exceeded while sending");
}

TEST(SurveyLinksTest, AWorkerWithoutAProbeOrAnRpcFailsNamingIt) {
  FakeNetwork net;
  auto workers = FourWorkers();
  workers[3].link_probe_port = 0;
  auto links = SurveyLinks(workers, Clients(&net, workers));
  ASSERT_FALSE(links.ok());
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(links.status().message().find("worker w3 has no link probe"),
            absl::string_view::npos)
      << links.status();

  // A worker whose client does not implement MeasureLinks (an older one).
  struct Old : FakeProbingWorker {
    using FakeProbingWorker::FakeProbingWorker;
    absl::StatusOr<v1::MeasureLinksResponse> MeasureLinks(
        const v1::MeasureLinksRequest& r, absl::Duration d) override {
      return WorkerClient::MeasureLinks(r, d);
    }
  };
  workers = FourWorkers();
  auto old = SurveyLinks(workers, [&net](const std::string&) {
    return std::make_unique<Old>(&net, "w");
  });
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(old.status().message().find("worker w0 could not measure"),
            absl::string_view::npos)
      << old.status();
}

}  // namespace
}  // namespace aqueduct
