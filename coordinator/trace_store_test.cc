#include "coordinator/trace_store.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/traces_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

v1::StageTrace Part(int stage, const std::string& worker, int first, int n) {
  v1::StageTrace part;
  part.set_worker_id(worker);
  part.set_stage(stage);
  for (int i = first; i < first + n; ++i) {
    v1::TraceEvent* e = part.add_events();
    e->set_name("F mb=" + std::to_string(i));
    e->set_track("compute");
    e->set_start_us(1000 * i);
    e->set_duration_us(500);
    e->set_flow_id(100 + i);
    e->set_flow("out");
  }
  return part;
}

TEST(TraceStoreTest, ReloadsWhatWasAppendedByStage) {
  const std::string dir = FreshDir("reload");
  {
    TraceStore store;
    ASSERT_TRUE(store.Open(dir).ok());
    ASSERT_TRUE(store.Append("job-1", Part(1, "w1", 0, 3)).ok());
    ASSERT_TRUE(store.Append("job-1", Part(0, "w0", 0, 2)).ok());
    ASSERT_TRUE(store.Append("job-1", Part(1, "w1", 3, 2)).ok());
    ASSERT_TRUE(store.Append("job-1", v1::StageTrace()).ok());
    ASSERT_TRUE(store.Sync("job-1").ok());
  }
  TraceStore again;
  ASSERT_TRUE(again.Open(dir).ok());
  absl::StatusOr<v1::GetTraceResponse> trace = again.Read("job-1");
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->stages_size(), 2);
  EXPECT_EQ(trace->stages(0).stage(), 0);
  EXPECT_EQ(trace->stages(0).events_size(), 2);
  EXPECT_EQ(trace->stages(1).worker_id(), "w1");
  ASSERT_EQ(trace->stages(1).events_size(), 5);
  EXPECT_EQ(trace->stages(1).events(4).name(), "F mb=4");
  EXPECT_EQ(trace->stages(1).events(4).flow_id(), 104u);
  EXPECT_EQ(trace->stages(1).events(4).flow(), "out");
  EXPECT_EQ(trace->dropped(), 0);
  EXPECT_EQ(again.Read("job-2").status().code(), absl::StatusCode::kNotFound);
}

TEST(TraceStoreTest, ATornTailKeepsTheRecordsBeforeIt) {
  std::string bytes = TraceRecord(Part(0, "w0", 0, 4));
  const std::string second = TraceRecord(Part(0, "w0", 4, 4));
  bytes += second.substr(0, second.size() - 3);
  v1::GetTraceResponse trace = ParseTraceRecords(bytes, 100);
  ASSERT_EQ(trace.stages_size(), 1);
  EXPECT_EQ(trace.stages(0).events_size(), 4);
  // A flipped byte fails the checksum.
  std::string flipped = TraceRecord(Part(0, "w0", 0, 4));
  flipped[12] ^= 0x40;
  EXPECT_EQ(ParseTraceRecords(flipped, 100).stages_size(), 0);
}

TEST(TraceStoreTest, KeepsTheLastEventsPerStageAndCompacts) {
  const std::string dir = FreshDir("cap");
  TraceStore store({/*max_file_bytes=*/4096, /*max_events_per_stage=*/40});
  ASSERT_TRUE(store.Open(dir).ok());
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(store.Append("j", Part(0, "w0", i * 5, 5)).ok());
  }
  EXPECT_LE(std::filesystem::file_size(dir + "/j.trace"), 4096u + 1024u);
  absl::StatusOr<v1::GetTraceResponse> trace = store.Read("j");
  ASSERT_TRUE(trace.ok());
  ASSERT_EQ(trace->stages_size(), 1);
  const auto& events = trace->stages(0).events();
  ASSERT_FALSE(events.empty());
  EXPECT_LE(events.size(), 40);
  EXPECT_EQ(events[events.size() - 1].name(), "F mb=499");
  store.Remove("j");
  EXPECT_FALSE(std::filesystem::exists(dir + "/j.trace"));
}

}  // namespace
}  // namespace aqueduct
