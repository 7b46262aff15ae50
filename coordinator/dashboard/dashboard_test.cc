// The dashboard's routes on a real HttpServer (loopback, port 0) over a
// real CoordinatorCore whose workers are fakes that refuse every call: the
// page and each API as a client sees them, and the errors that name what
// was wrong. The documents' contents are views_test's.
#include "coordinator/dashboard/dashboard.h"

#include <httplib.h>

#include <memory>
#include <string>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

using google::protobuf::Value;

// Refuses everything: jobs here never get further than PENDING.
class RefusingWorkerClient : public WorkerClient {
 public:
  absl::Status AssignStage(const StageAssignment&, absl::Duration) override {
    return absl::UnavailableError("fake");
  }
  absl::Status StartJob(const std::string&, absl::Duration) override {
    return absl::UnavailableError("fake");
  }
  absl::Status StopJob(const std::string&, const std::string&, absl::Duration,
                       std::optional<int>) override {
    return absl::OkStatus();
  }
  absl::StatusOr<WorkerRuntimeStatus> GetStatus(absl::Duration) override {
    return absl::UnavailableError("fake");
  }
  absl::StatusOr<ModelProfile> Profile(const JobSpec&,
                                       absl::Duration) override {
    return absl::UnavailableError("fake");
  }
};

// Needs 5 workers; the test registers 2, so it stays PENDING.
constexpr char kSpec[] = R"pb(
  name: "dash<b>"
  model {
    layers { flatten {} }
    layers { linear { in_features: 8 out_features: 2 } }
  }
  data {
    synthetic {
      sample_shape: [ 8 ]
      num_classes: 2
      train_samples: 64
    }
  }
  optimizer { sgd { lr: 0.1 } }
  batch_size: 16
  max_steps: 4
  pipeline { workers: 5 wait_for_workers_ms: 60000 }
)pb";

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.registry.version = "0.1.0";
    core_ = std::make_unique<CoordinatorCore>(
        o, RealClock::Get(), [](const std::string&) {
          return std::make_unique<RefusingWorkerClient>();
        });
    HttpServerOptions http;
    http.listen = "127.0.0.1:0";
    auto server = HttpServer::Create(http);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    AddDashboardRoutes(core_.get(), server_.get(), "127.0.0.1:7070");
    ASSERT_TRUE(server_->Start().ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }

  void TearDown() override {
    client_.reset();
    server_.reset();  // before the core its handlers use
    core_.reset();
  }

  void AddWorker(const std::string& id) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_incarnation("inc-" + id);
    info.set_version("0.1.0");
    info.set_address(id + ":1");
    info.mutable_device()->set_memory_bytes(int64_t{2} << 30);
    ASSERT_TRUE(core_->RegisterWorker(info).ok());
  }

  // GETs `path`; its status, and its body parsed as JSON into `v`.
  int GetJson(const std::string& path, Value* v) {
    httplib::Result r = client_->Get(path);
    EXPECT_TRUE(r) << path;
    if (!r) return -1;
    EXPECT_EQ(r->get_header_value("Content-Type"),
              "application/json; charset=utf-8")
        << path;
    const auto s = google::protobuf::util::JsonStringToMessage(r->body, v);
    EXPECT_TRUE(s.ok()) << path << ": " << s.ToString() << " in " << r->body;
    return r->status;
  }

  static const Value& Field(const Value& v, const std::string& key) {
    static const Value* const kMissing = new Value;
    auto it = v.struct_value().fields().find(key);
    EXPECT_TRUE(it != v.struct_value().fields().end()) << "no field " << key;
    return it == v.struct_value().fields().end() ? *kMissing : it->second;
  }

  std::unique_ptr<CoordinatorCore> core_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(DashboardTest, ServesThePage) {
  httplib::Result r = client_->Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(r->body, kDashboardPage);
  EXPECT_NE(r->body.find("<svg id=\"timeline\""), std::string::npos);
  // Self-contained: nothing loaded from elsewhere.
  EXPECT_EQ(r->body.find("src=\"http"), std::string::npos);
  EXPECT_EQ(r->body.find("href=\"http"), std::string::npos);
}

TEST_F(DashboardTest, InfoAndWorkers) {
  Value v;
  ASSERT_EQ(GetJson("/api/info", &v), 200);
  EXPECT_EQ(Field(v, "grpc_address").string_value(), "127.0.0.1:7070");
  EXPECT_FALSE(Field(v, "version").string_value().empty());
  AddWorker("w1");
  AddWorker("w2");
  ASSERT_EQ(GetJson("/api/workers", &v), 200);
  const auto& workers = Field(v, "workers").list_value();
  ASSERT_EQ(workers.values_size(), 2);
  EXPECT_EQ(Field(workers.values(0), "id").string_value(), "w1");
  EXPECT_EQ(Field(workers.values(0), "health").string_value(), "healthy");
  EXPECT_EQ(Field(workers.values(1), "memory_bytes").number_value(),
            2.0 * (1 << 30));
}

TEST_F(DashboardTest, JobsJobAndTimeline) {
  AddWorker("w1");
  AddWorker("w2");
  JobSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kSpec, &spec));
  absl::StatusOr<std::string> id = core_->SubmitJob(spec, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  Value v;
  ASSERT_EQ(GetJson("/api/jobs", &v), 200);
  const auto& jobs = Field(v, "jobs").list_value();
  ASSERT_EQ(jobs.values_size(), 1);
  EXPECT_EQ(Field(jobs.values(0), "id").string_value(), *id);
  EXPECT_EQ(Field(jobs.values(0), "name").string_value(), "dash<b>");
  EXPECT_EQ(Field(jobs.values(0), "state").string_value(), "PENDING");

  ASSERT_EQ(GetJson("/api/job?id=" + *id, &v), 200);
  EXPECT_EQ(Field(v, "id").string_value(), *id);
  EXPECT_EQ(Field(v, "plan").kind_case(), Value::kNullValue);
  EXPECT_EQ(Field(v, "loss_curve").list_value().values_size(), 0);
  ASSERT_EQ(GetJson("/api/timeline?id=" + *id, &v), 200);
  EXPECT_EQ(Field(v, "rows").list_value().values_size(), 0);
  EXPECT_EQ(Field(v, "window_ms").number_value(), 5000);
  ASSERT_EQ(GetJson("/api/timeline?window_ms=250&id=" + *id, &v), 200);
  EXPECT_EQ(Field(v, "window_ms").number_value(), 250);
}

TEST_F(DashboardTest, ErrorsNameWhatWasWrong) {
  Value v;
  ASSERT_EQ(GetJson("/api/job", &v), 400);
  EXPECT_EQ(Field(v, "error").string_value(),
            "/api/job needs the parameter id (a job id)");
  ASSERT_EQ(GetJson("/api/job?id=job-nope", &v), 404);
  EXPECT_EQ(Field(v, "error").string_value(), "job 'job-nope' does not exist");
  ASSERT_EQ(GetJson("/api/timeline?id=job-nope", &v), 404);
  ASSERT_EQ(GetJson("/api/job?id=" + std::string(300, 'x'), &v), 400);
  EXPECT_EQ(Field(v, "error").string_value(),
            "parameter id is 300 bytes, more than the 256 allowed");
  ASSERT_EQ(GetJson("/api/timeline?id=j&window_ms=5", &v), 400);
  EXPECT_EQ(Field(v, "error").string_value(),
            "parameter window_ms=5 is not a number of milliseconds from 100 "
            "to 60000");
}

}  // namespace
}  // namespace aqueduct
