// The dashboard's JSON: escaping, numbers, the writer's commas, and each
// API document built from messages, parsed back with protobuf's JSON
// parser (a strict one: a stray comma or a raw control character fails).
#include "coordinator/dashboard/views.h"

#include <limits>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "coordinator/dashboard/json.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

using google::protobuf::Value;

Value Parse(const std::string& json) {
  Value v;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &v);
  EXPECT_TRUE(status.ok()) << status.ToString() << " in " << json;
  return v;
}

const Value& Field(const Value& v, const std::string& key) {
  static const Value* const kMissing = new Value;
  auto it = v.struct_value().fields().find(key);
  EXPECT_TRUE(it != v.struct_value().fields().end()) << "no field " << key;
  return it == v.struct_value().fields().end() ? *kMissing : it->second;
}

TEST(JsonQuoteTest, EscapesWhatJsonAndHtmlNeed) {
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\t\x7f", 3)),
            "\"\\u0001\\u0009\\u007f\"");
  EXPECT_EQ(JsonQuote("</script>&"), "\"\\u003c/script\\u003e\\u0026\"");
  EXPECT_EQ(JsonQuote(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
}

TEST(JsonQuoteTest, KeepsUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(JsonQuote("caf\xc3\xa9 \xf0\x9f\x98\x80"),
            "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
  EXPECT_EQ(JsonQuote("a\xff"
                      "b"),
            "\"a\\ufffdb\"");
  // Overlong '/', a lone continuation byte, a surrogate, a cut sequence.
  EXPECT_EQ(JsonQuote("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(JsonQuote("\x80"), "\"\\ufffd\"");
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
  EXPECT_EQ(JsonQuote("\xe2\x82"), "\"\\ufffd\\ufffd\"");
  // Whatever the bytes, the result parses.
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  Value v = Parse(JsonQuote(all));
  EXPECT_EQ(v.kind_case(), Value::kStringValue);
}

TEST(JsonNumberTest, NonFiniteIsNull) {
  EXPECT_EQ(JsonNumber(1.5), "1.5");
  EXPECT_EQ(JsonNumber(-2), "-2");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonNumber(1e300), "1e+300");
}

TEST(JsonWriterTest, PlacesCommas) {
  JsonWriter j;
  j.BeginObject();
  j.Key("a").Int(1);
  j.Key("b").BeginArray().Int(2).BeginArray().EndArray().String("x");
  j.BeginObject().EndObject().EndArray();
  j.Key("c").Null();
  j.Key("d").Bool(false);
  j.EndObject();
  EXPECT_EQ(j.str(), "{\"a\":1,\"b\":[2,[],\"x\",{}],\"c\":null,\"d\":false}");
  Parse(j.str());
}

TEST(ThinIndicesTest, KeepsFirstAndLast) {
  EXPECT_EQ(ThinIndices(0, 5), std::vector<size_t>{});
  EXPECT_EQ(ThinIndices(3, 5), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(ThinIndices(10, 3), (std::vector<size_t>{0, 4, 9}));
  EXPECT_EQ(ThinIndices(10, 1), std::vector<size_t>{9});
  EXPECT_EQ(ThinIndices(10000, 1000).size(), 1000u);
  EXPECT_EQ(ThinIndices(10000, 1000).back(), 9999u);
}

TEST(TraceKindTest, NamesOfTheWorkersEvents) {
  EXPECT_STREQ(TraceKind("F mb=3 v=1"), "forward");
  EXPECT_STREQ(TraceKind("B mb=3.1 v=1"), "backward");
  EXPECT_STREQ(TraceKind("recv act mb=3"), "recv");
  EXPECT_STREQ(TraceKind("recv grad mb=3"), "recv");
  EXPECT_STREQ(TraceKind("send act mb=3"), "send");
  EXPECT_STREQ(TraceKind("load mb=0"), "load");
  EXPECT_STREQ(TraceKind("step v=4"), "step");
  EXPECT_STREQ(TraceKind("all-reduce mb=2"), "allreduce");
  EXPECT_STREQ(TraceKind("Forward"), "other");
}

WorkerStatus MakeWorker(const std::string& id, WorkerState state,
                        int64_t heartbeat_ms) {
  WorkerStatus w;
  w.mutable_info()->set_worker_id(id);
  w.mutable_info()->set_host("10.0.0.7");
  w.mutable_info()->set_address("10.0.0.7:7071");
  w.mutable_info()->mutable_device()->set_kind("cpu");
  w.mutable_info()->mutable_device()->set_memory_bytes(int64_t{1} << 30);
  w.set_state(state);
  w.set_last_heartbeat_ms(heartbeat_ms);
  return w;
}

TEST(WorkersJsonTest, FieldsAndBound) {
  const absl::Time now = absl::FromUnixMillis(100000);
  std::vector<WorkerStatus> workers = {
      MakeWorker("w1", v1::WORKER_HEALTHY, 99750),
      MakeWorker("w\"2", v1::WORKER_DEAD, 90000),
      MakeWorker("w3", v1::WORKER_SUSPECT, 0)};
  workers[0].mutable_info()->mutable_device()->set_name(
      "cpu (OpenBLAS 1 threads)");
  workers[1].mutable_info()->mutable_device()->set_name("H100");
  workers[0].set_job_id("job-1");
  workers[0].set_stage(1);
  ViewLimits limits;
  limits.max_workers = 2;
  const Value v = Parse(WorkersJson(workers, now, limits));
  EXPECT_EQ(Field(v, "total").number_value(), 3);
  const auto& list = Field(v, "workers").list_value();
  ASSERT_EQ(list.values_size(), 2);
  const Value& w1 = list.values(0);
  EXPECT_EQ(Field(w1, "id").string_value(), "w1");
  EXPECT_EQ(Field(w1, "state").string_value(), "HEALTHY");
  EXPECT_EQ(Field(w1, "health").string_value(), "healthy");
  EXPECT_DOUBLE_EQ(Field(w1, "heartbeat_age_s").number_value(), 0.25);
  EXPECT_EQ(Field(w1, "memory_bytes").number_value(), 1 << 30);
  EXPECT_EQ(Field(w1, "job").string_value(), "job-1");
  EXPECT_EQ(Field(w1, "stage").number_value(), 1);
  EXPECT_EQ(Field(list.values(1), "id").string_value(), "w\"2");
  EXPECT_EQ(Field(list.values(1), "health").string_value(), "dead");
  EXPECT_EQ(Field(w1, "device").string_value(), "cpu (OpenBLAS 1 threads)");
  EXPECT_EQ(Field(list.values(1), "device").string_value(), "cpu H100");
}

JobStatus MakeJob(const std::string& id, JobState state, int losses) {
  JobStatus job;
  job.set_job_id(id);
  job.set_name("n");
  job.set_state(state);
  job.set_step(losses);
  job.set_total_steps(100);
  for (int i = 0; i < losses; ++i) {
    LossPoint* p = job.add_loss_curve();
    p->set_minibatch(i);
    p->set_loss(2.0 - i * 0.01);
  }
  if (losses > 0) job.set_loss(job.loss_curve(losses - 1).loss());
  return job;
}

TEST(JobsJsonTest, NewestFirstAndBounded) {
  std::vector<JobStatus> jobs;
  for (int i = 0; i < 5; ++i) {
    jobs.push_back(MakeJob(absl::StrCat("job-", i), v1::JOB_SUCCEEDED, 3));
  }
  jobs.push_back(MakeJob("job-5", v1::JOB_PENDING, 0));
  jobs.back().set_queue_position(2);
  jobs.back().set_waiting_for("needs 3 workers, 1 idle");
  ViewLimits limits;
  limits.max_jobs = 3;
  const Value v = Parse(JobsJson(jobs, absl::FromUnixMillis(1), limits));
  EXPECT_EQ(Field(v, "total").number_value(), 6);
  const auto& list = Field(v, "jobs").list_value();
  ASSERT_EQ(list.values_size(), 3);
  EXPECT_EQ(Field(list.values(0), "id").string_value(), "job-5");
  EXPECT_EQ(Field(list.values(0), "state").string_value(), "PENDING");
  // No loss yet: null, not 0.
  EXPECT_EQ(Field(list.values(0), "loss").kind_case(), Value::kNullValue);
  // Its place in the queue and what it waits for.
  EXPECT_EQ(Field(list.values(0), "queue_position").number_value(), 2);
  EXPECT_EQ(Field(list.values(0), "waiting_for").string_value(),
            "needs 3 workers, 1 idle");
  EXPECT_EQ(Field(list.values(1), "id").string_value(), "job-4");
  EXPECT_DOUBLE_EQ(Field(list.values(1), "loss").number_value(), 1.98);
}

TEST(JobJsonTest, CurvesThinnedPlanAndStages) {
  JobStatus job = MakeJob("job-1", v1::JOB_RUNNING, 50);
  v1::StageStatus* s = job.add_stages();
  s->set_stage(0);
  s->add_workers("w1");
  s->add_worker_states(v1::WORKER_HEALTHY);
  ViewLimits limits;
  limits.max_loss_points = 10;
  const absl::Time now = absl::FromUnixMillis(5000);
  Value v = Parse(JobJson(job, nullptr, now, limits));
  EXPECT_EQ(Field(v, "plan").kind_case(), Value::kNullValue);
  const auto& curve = Field(v, "loss_curve").list_value();
  ASSERT_EQ(curve.values_size(), 10);
  EXPECT_EQ(curve.values(9).list_value().values(0).number_value(), 49);
  EXPECT_EQ(Field(Field(v, "stages").list_value().values(0), "workers")
                .list_value()
                .values(0)
                .string_value(),
            "w1");

  PartitionPlan plan;
  plan.set_time_per_minibatch_s(0.05);
  for (int i = 0; i < 2; ++i) {
    v1::PlanStage* ps = plan.add_stages();
    ps->set_first_layer(i * 3);
    ps->set_end_layer(i * 3 + 3);
    ps->set_replicas(1);
    ps->add_worker_ranks(i);
  }
  for (const auto& [ms, step, rate] :
       {std::tuple{1000, 10, 320.5}, std::tuple{2000, 20, 330.0}}) {
    v1::ThroughputPoint* p = job.add_throughput();
    p->set_time_ms(ms);
    p->set_step(step);
    p->set_samples_per_second(rate);
  }
  v = Parse(JobJson(job, &plan, now, limits));
  const auto& stages = Field(Field(v, "plan"), "stages").list_value();
  ASSERT_EQ(stages.values_size(), 2);
  EXPECT_EQ(Field(stages.values(1), "first_layer").number_value(), 3);
  EXPECT_EQ(Field(stages.values(1), "end_layer").number_value(), 6);
  const auto& through = Field(v, "throughput").list_value();
  ASSERT_EQ(through.values_size(), 2);
  EXPECT_DOUBLE_EQ(through.values(0).list_value().values(1).number_value(),
                   320.5);
}

TEST(TimelineJsonTest, LastWindowRelativeToItsStart) {
  v1::GetTraceResponse trace;
  v1::StageTrace* st = trace.add_stages();
  st->set_worker_id("w1");
  st->set_stage(0);
  const int64_t t0 = 1'700'000'000'000'000;
  // Events every 100 ms for 10 s, 40 ms each: the window keeps the 5 s
  // before the last end (t0 + 9.94 s).
  for (int i = 0; i < 100; ++i) {
    TraceEvent* e = st->add_events();
    e->set_name(i % 2 ? "B mb=1 v=0" : "F mb=1 v=0");
    e->set_start_us(t0 + i * 100'000);
    e->set_duration_us(40'000);
  }
  ViewLimits limits;
  Value v = Parse(TimelineJson("job-1", trace, limits));
  EXPECT_EQ(Field(v, "end_us").number_value(), t0 + 9'940'000);
  EXPECT_EQ(Field(v, "window_ms").number_value(), 5000);
  const Value& row = Field(v, "rows").list_value().values(0);
  const auto& events = Field(row, "events").list_value();
  // Starts at 4.9 s (ends 4.94 >= 4.94) through 9.9 s: 51 events.
  ASSERT_EQ(events.values_size(), 51);
  const auto& first = events.values(0).list_value();
  EXPECT_EQ(first.values(0).string_value(), "backward");
  EXPECT_NEAR(first.values(1).number_value(), -40, 1e-9);
  EXPECT_NEAR(first.values(2).number_value(), 40, 1e-9);
  EXPECT_EQ(first.values(3).string_value(), "B mb=1 v=0");

  limits.max_events_per_row = 5;
  v = Parse(TimelineJson("job-1", trace, limits));
  const Value& cut = Field(v, "rows").list_value().values(0);
  EXPECT_EQ(Field(cut, "events").list_value().values_size(), 5);
  EXPECT_EQ(Field(cut, "truncated").number_value(), 46);

  // No events: an empty row, still a document.
  v1::GetTraceResponse empty;
  Parse(TimelineJson("job-2", empty, limits));
}

}  // namespace
}  // namespace aqueduct
