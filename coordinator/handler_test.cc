#include "coordinator/handler.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "coordinator/core.h"
#include "coordinator/input_checks.h"
#include "coordinator/model_store.h"
#include "gtest/gtest.h"
#include "pipeline/spec.h"
#include "zlib.h"

namespace aqueduct {
namespace {

constexpr char kSpec[] = R"pb(
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
  batch_size: 8
  max_steps: 4
)pb";

// A worker that accepts every assignment and profiles nothing (jobs come
// with their profile).
class FakeWorkerClient final : public WorkerClient {
 public:
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
  absl::StatusOr<ModelProfile> Profile(const JobSpec&,
                                       absl::Duration) override {
    return absl::UnimplementedError("no profiling in these tests");
  }
  absl::StatusOr<WorkerRuntimeStatus> GetStatus(absl::Duration) override {
    return WorkerRuntimeStatus();  // Alive.
  }
};

// The models directory of a test: fresh and empty.
std::string ModelsDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(
      tmp != nullptr ? tmp : "/tmp", "/handler_test_", getpid(), "_",
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  mkdir(dir.c_str(), 0700);
  return dir + "/models";
}

std::unique_ptr<ModelStore> OpenStore() {
  ModelStoreOptions options;
  options.dir = ModelsDir();
  options.chunk_bytes = 64 << 10;
  auto store = ModelStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// The names in `dir`.
std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

uint32_t Crc(const std::string& s) {
  return static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(s.data()), s.size()));
}

class HandlerTest : public ::testing::Test {
 protected:
  HandlerTest()
      : core_(CoordinatorOptions(), &clock_,
              [](const std::string&) -> std::unique_ptr<WorkerClient> {
                return std::make_unique<FakeWorkerClient>();
              }),
        models_(OpenStore()),
        handler_(NewCoordinatorHandler(&core_, models_.get())) {}

  // Registers worker w1 and runs a one-stage job on it; returns its id.
  std::string RunJob() {
    v1::RegisterWorkerRequest reg;
    reg.mutable_info()->set_worker_id("w1");
    reg.mutable_info()->set_incarnation("inc-1");
    reg.mutable_info()->set_address("127.0.0.1:1");
    reg.mutable_info()->set_version(core_.options().registry.version);
    EXPECT_TRUE(handler_->RegisterWorker(reg).ok());
    v1::SubmitJobRequest submit;
    *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
    for (int i = 0; i < submit.spec().model().layers_size(); ++i) {
      v1::LayerProfile* layer = submit.mutable_profile()->add_nodes();
      layer->set_id(absl::StrCat("layer", i));
      layer->set_forward_ms(1);
      layer->set_backward_ms(1);
      layer->set_layer_index(i);
      if (i == 0) continue;
      v1::ProfileEdge* edge = submit.mutable_profile()->add_edges();
      edge->set_from(absl::StrCat("layer", i - 1));
      edge->set_to(absl::StrCat("layer", i));
    }
    const std::string job = handler_->SubmitJob(submit)->job_id();
    int64_t seen = -1;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      auto status = core_.WaitForJob(job, seen, deadline);
      if (!status.ok() || status->first.state() == v1::JOB_RUNNING) break;
      seen = status->second;
    }
    EXPECT_EQ(core_.GetJob(job)->state(), v1::JOB_RUNNING);
    return job;
  }

  // `bytes` as w1's upload for `job`, in chunks of `chunk` bytes.
  static std::vector<v1::UploadModelChunk> Chunks(const std::string& job,
                                                  const std::string& bytes,
                                                  size_t chunk) {
    std::vector<v1::UploadModelChunk> out;
    for (size_t offset = 0; offset < bytes.size(); offset += chunk) {
      v1::UploadModelChunk& c = out.emplace_back();
      c.set_worker_id("w1");
      c.set_incarnation("inc-1");
      c.set_job_id(job);
      c.set_offset(static_cast<int64_t>(offset));
      c.set_data(bytes.substr(offset, chunk));
      c.set_total_bytes(static_cast<int64_t>(bytes.size()));
      c.set_crc32(Crc(bytes));
    }
    return out;
  }

  absl::StatusOr<v1::UploadModelResponse> Upload(
      const std::vector<v1::UploadModelChunk>& chunks) {
    size_t next = 0;
    return handler_->UploadModel([&](v1::UploadModelChunk* chunk) {
      if (next == chunks.size()) return false;
      *chunk = chunks[next++];
      return true;
    });
  }

  // The job's model through GetModel, checking every chunk's header.
  std::string Download(const std::string& job, absl::Status* status) {
    v1::GetModelRequest request;
    request.set_job_id(job);
    std::string out;
    *status = handler_->GetModel(
        request, [] { return false; },
        [&](const v1::ModelChunk& c) {
          EXPECT_EQ(c.offset(), static_cast<int64_t>(out.size()));
          out += c.data();
          EXPECT_LE(out.size(), static_cast<size_t>(c.total_bytes()));
          if (out.size() == static_cast<size_t>(c.total_bytes())) {
            EXPECT_EQ(c.crc32(), Crc(out));
          }
          return true;
        });
    return out;
  }

  FakeClock clock_;
  CoordinatorCore core_;
  std::unique_ptr<ModelStore> models_;
  std::unique_ptr<CoordinatorHandler> handler_;
};

TEST_F(HandlerTest, SubmitGetListAndCancel) {
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  auto submitted = handler_->SubmitJob(submit);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  v1::GetJobRequest get;
  get.set_job_id(submitted->job_id());
  auto job = handler_->GetJob(get);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_PENDING);
  EXPECT_EQ(job->total_steps(), 4);
  EXPECT_EQ(handler_->ListJobs({})->jobs_size(), 1);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(submitted->job_id());
  EXPECT_EQ(handler_->CancelJob(cancel)->state(), v1::JOB_CANCELLED);
  get.set_job_id("job-none");
  EXPECT_EQ(handler_->GetJob(get).status().code(), absl::StatusCode::kNotFound);
  submit.mutable_spec()->set_batch_size(-1);
  EXPECT_EQ(handler_->SubmitJob(submit).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The issue's attack: 750 jobs named with 100 KB each made ListJobs exceed
// the message limit. They are refused by the field limit; the jobs a user
// may have are listed, with their owner, page by page.
TEST_F(HandlerTest, OversizedNamesAreRefusedAndListJobsStillAnswers) {
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  submit.mutable_spec()->set_name(std::string(100 << 10, 'n'));
  for (int i = 0; i < 750; ++i) {
    const absl::Status s = handler_->SubmitJob(submit).status();
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    ASSERT_EQ(s.message(),
              "invalid job spec: name is 102400 bytes, more than the 256 "
              "allowed");
  }
  submit.mutable_spec()->set_name(std::string(256, 'n'));
  submit.set_owner("alice");
  std::vector<std::string> ids;
  for (int i = 0; i < core_.options().max_jobs_per_user; ++i) {
    auto submitted = handler_->SubmitJob(submit);
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    ids.push_back(submitted->job_id());
  }
  EXPECT_EQ(handler_->SubmitJob(submit).status().code(),
            absl::StatusCode::kResourceExhausted);
  auto all = handler_->ListJobs({});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->jobs_size(), 64);
  EXPECT_EQ(all->next_page_token(), "");
  EXPECT_LT(all->ByteSizeLong(), size_t{1} << 20);
  EXPECT_EQ(all->jobs(0).owner(), "alice");
  // Page by page, each job once.
  v1::ListJobsRequest request;
  request.set_page_size(25);
  std::vector<std::string> listed;
  for (int page = 0; page < 10; ++page) {
    auto response = handler_->ListJobs(request);
    ASSERT_TRUE(response.ok()) << response.status();
    for (const v1::JobStatus& j : response->jobs()) {
      listed.push_back(j.job_id());
    }
    if (response->next_page_token().empty()) break;
    request.set_page_token(response->next_page_token());
  }
  EXPECT_EQ(listed, ids);
  request.set_page_size(-3);
  EXPECT_EQ(handler_->ListJobs(request).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(HandlerTest, RegisterTellsTheLease) {
  v1::RegisterWorkerRequest request;
  request.mutable_info()->set_worker_id("w1");
  request.mutable_info()->set_incarnation("i1");
  request.mutable_info()->set_address("127.0.0.1:1");
  request.mutable_info()->set_version(core_.options().registry.version);
  auto response = handler_->RegisterWorker(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_GT(response->heartbeat_interval_ms(), 0);
  EXPECT_GT(response->lease_ms(), response->heartbeat_interval_ms());
  v1::HeartbeatRequest beat;
  beat.set_worker_id("w1");
  beat.set_incarnation("stale");
  EXPECT_EQ(handler_->Heartbeat(beat).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(HandlerTest, StoreChecksItsInputAndWaitsWithADeadline) {
  const std::string key = "jobs/" + RunJob() + "/a0/k";
  v1::StoreGetRequest get;
  get.set_key(key);
  get.set_wait_ms(-1);
  EXPECT_EQ(handler_->StoreGet(get, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kInvalidArgument);
  get.set_wait_ms(20);
  const absl::Time start = absl::Now();
  EXPECT_EQ(handler_->StoreGet(get, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  v1::StoreSetRequest set;
  set.set_key(key);
  set.set_value("v");
  ASSERT_TRUE(handler_->StoreSet(set).ok());
  EXPECT_EQ(handler_->StoreGet(get, absl::InfiniteFuture())->value(), "v");
  // Keys are scoped to a running job's attempt.
  set.set_key("k");
  EXPECT_EQ(handler_->StoreSet(set).status().code(),
            absl::StatusCode::kInvalidArgument);
  set.set_key("jobs/job-none/a0/k");
  EXPECT_EQ(handler_->StoreSet(set).status().code(),
            absl::StatusCode::kNotFound);
  // StoreAdd is an overflow-safe counter.
  v1::StoreAddRequest add;
  add.set_key(key + "/counter");
  add.set_delta(std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(handler_->StoreAdd(add).ok());
  add.set_delta(1);
  EXPECT_EQ(handler_->StoreAdd(add).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(HandlerTest, WatchEndsOnDeadlineOrCancellation) {
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  v1::WatchJobRequest watch;
  watch.set_job_id(handler_->SubmitJob(submit)->job_id());
  std::vector<v1::JobState> seen;
  auto record = [&](const v1::JobStatus& s) {
    seen.push_back(s.state());
    return true;
  };
  const absl::Status timed_out = handler_->WatchJob(
      watch, absl::Now() + absl::Milliseconds(300), [] { return false; },
      record);
  EXPECT_EQ(timed_out.code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_EQ(seen.size(), 1u);  // The first status; nothing changed since.
  EXPECT_EQ(seen[0], v1::JOB_PENDING);
  EXPECT_EQ(handler_
                ->WatchJob(
                    watch, absl::InfiniteFuture(), [] { return true; }, record)
                .code(),
            absl::StatusCode::kCancelled);
  watch.set_job_id("job-none");
  EXPECT_EQ(handler_
                ->WatchJob(
                    watch, absl::Now() + absl::Seconds(5), [] { return false; },
                    record)
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(HandlerTest, SubmitPassesResumeAndListsCheckpoints) {
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  submit.set_resume("job-none");
  const auto refused = handler_->SubmitJob(submit);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("job-none"), std::string::npos)
      << refused.status();
  v1::ListCheckpointsRequest list;
  list.set_job_id("job-none");
  EXPECT_EQ(handler_->ListCheckpoints(list).status().code(),
            absl::StatusCode::kNotFound);
  submit.clear_resume();
  list.set_job_id(handler_->SubmitJob(submit)->job_id());
  const auto none = handler_->ListCheckpoints(list);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->checkpoints_size(), 0);
}

TEST_F(HandlerTest, UploadedModelReadsBackBitExact) {
  const std::string job = RunJob();
  absl::Status s;
  Download(job, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "job " + job + " has no trained model (it is RUNNING)");

  std::mt19937 rng(7);
  std::string bytes((5 << 20) / 2 + 3, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  const auto uploaded = Upload(Chunks(job, bytes, 1 << 20));
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_EQ(uploaded->path(), models_->PathFor(job));
  const JobStatus status = *core_.GetJob(job);
  EXPECT_EQ(status.model_path(), uploaded->path());
  EXPECT_EQ(status.model_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_TRUE(Download(job, &s) == bytes);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(Files(models_->options().dir),
            std::vector<std::string>{job + ".safetensors"});
}

TEST_F(HandlerTest, DamagedUploadsAreRefusedAndLeaveNoFile) {
  const std::string job = RunJob();
  const std::string bytes(3000, 'w');
  std::vector<v1::UploadModelChunk> chunks = Chunks(job, bytes, 1000);
  for (v1::UploadModelChunk& c : chunks) c.set_crc32(c.crc32() ^ 1);
  EXPECT_EQ(Upload(chunks).status().code(), absl::StatusCode::kDataLoss);

  chunks = Chunks(job, bytes, 1000);
  chunks[1].set_offset(1001);
  const auto gap = Upload(chunks);
  EXPECT_EQ(gap.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gap.status().message().find("contiguous"), std::string::npos);

  chunks = Chunks(job, bytes, 1000);
  chunks[2].set_attempt(1);
  EXPECT_EQ(Upload(chunks).status().code(), absl::StatusCode::kInvalidArgument);

  chunks = Chunks(job, bytes, 1000);
  chunks.pop_back();
  EXPECT_EQ(Upload(chunks).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Upload({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Files(models_->options().dir).empty());
  EXPECT_TRUE(core_.GetJob(job)->model_path().empty());
}

TEST_F(HandlerTest, OnlyTheOutputStageMayUpload) {
  const std::string job = RunJob();
  std::vector<v1::UploadModelChunk> chunks = Chunks(job, "model", 1000);
  chunks[0].set_attempt(3);
  EXPECT_EQ(Upload(chunks).status().code(),
            absl::StatusCode::kFailedPrecondition);
  chunks = Chunks(job, "model", 1000);
  chunks[0].set_worker_id("w-other");
  EXPECT_FALSE(Upload(chunks).ok());
  chunks = Chunks("job-none", "model", 1000);
  EXPECT_EQ(Upload(chunks).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Files(models_->options().dir).empty());
}

// ---- Issue 14: bounded waits and paginated listings ----

// The issue's regression: each waiting StoreGet or Watch held a server
// thread (300 took the coordinator from 13 to 313 threads). At most 64
// wait at once, at most 32 of them for one job's keys (or for watches); a
// further waiter is refused at once; finished waiters free their slot.
TEST_F(HandlerTest, AtMost64CallsWaitAtOnceAndHalfForOneJob) {
  const std::string job = RunJob();
  ASSERT_EQ(core_.options().max_waiting_calls, 64);
  const std::string other = "other-job";
  std::vector<std::thread> waiters;
  auto wait_for = [&](const std::string& j, int i) {
    waiters.emplace_back([this, j, i] {
      v1::StoreGetRequest get;
      get.set_key(absl::StrCat("jobs/", j, "/a0/rank", i));
      get.set_wait_ms(30000);
      absl::StatusOr<v1::StoreGetResponse> got;
      do {
        got = handler_->StoreGet(get, absl::Now() + absl::Seconds(30));
      } while (absl::IsResourceExhausted(got.status()));
      EXPECT_TRUE(got.ok()) << got.status();
    });
  };
  for (int i = 0; i < 32; ++i) wait_for(job, i);
  // Probe with short waits until the job's 32 slots are held.
  auto refused_probe = [&](const std::string& j) {
    v1::StoreGetRequest probe;
    probe.set_key(absl::StrCat("jobs/", j, "/a0/probe"));
    probe.set_wait_ms(1);
    absl::Status refused;
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      refused = handler_->StoreGet(probe, absl::InfiniteFuture()).status();
      if (absl::IsResourceExhausted(refused)) break;
    }
    return refused;
  };
  absl::Status refused = refused_probe(job);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            absl::StrCat("too many waiting calls of job ", job,
                         " (limit 32, half of --max_waiting_calls); try "
                         "again later"));
  // Another job still waits; with its 32 the pool of 64 is full.
  for (int i = 0; i < 32; ++i) wait_for(other, i);
  refused = refused_probe("third-job");
  EXPECT_EQ(refused.message(),
            "too many waiting calls (limit 64, --max_waiting_calls); try again "
            "later");
  v1::WatchJobRequest watch;
  watch.set_job_id(job);
  EXPECT_EQ(handler_
                ->WatchJob(
                    watch, absl::Now() + absl::Seconds(5), [] { return false; },
                    [](const v1::JobStatus&) { return true; })
                .code(),
            absl::StatusCode::kResourceExhausted);
  // A key that is set answers without a slot.
  v1::StoreSetRequest set;
  set.set_key(absl::StrCat("jobs/", job, "/a0/rank0"));
  set.set_value("up");
  ASSERT_TRUE(handler_->StoreSet(set).ok());
  v1::StoreGetRequest present;
  present.set_key(set.key());
  present.set_wait_ms(1000);
  EXPECT_EQ(handler_->StoreGet(present, absl::InfiniteFuture())->value(), "up");
  for (int i = 1; i < 32; ++i) {
    set.set_key(absl::StrCat("jobs/", job, "/a0/rank", i));
    ASSERT_TRUE(handler_->StoreSet(set).ok());
  }
  // The other job's keys through the core: it is not running, so its
  // workers could not set them through the handler.
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(core_.store()
                    ->Set(absl::StrCat("jobs/", other, "/a0/rank", i), "up")
                    .ok());
  }
  for (std::thread& t : waiters) t.join();
  // Every slot is free again.
  v1::StoreGetRequest probe;
  probe.set_key(absl::StrCat("jobs/", job, "/a0/probe"));
  probe.set_wait_ms(1);
  EXPECT_EQ(handler_->StoreGet(probe, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// A StoreGet waits at most max_store_wait, whatever it asks; a Watch holds
// a slot while it runs.
TEST(HandlerWaitsTest, WaitsAreCappedAndWatchesCount) {
  FakeClock clock;
  CoordinatorOptions o;
  o.max_waiting_calls = 1;
  o.max_store_wait = absl::Milliseconds(200);
  CoordinatorCore core(o, &clock,
                       [](const std::string&) -> std::unique_ptr<WorkerClient> {
                         return std::make_unique<FakeWorkerClient>();
                       });
  auto handler = NewCoordinatorHandler(&core);
  v1::StoreGetRequest get;
  get.set_key("jobs/j/a0/never");
  get.set_wait_ms(3600 * 1000);
  const absl::Time start = absl::Now();
  EXPECT_EQ(handler->StoreGet(get, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  v1::WatchJobRequest watch;
  watch.set_job_id(handler->SubmitJob(submit)->job_id());
  absl::Notification watching;
  std::thread watcher([&] {
    EXPECT_EQ(
        handler
            ->WatchJob(
                watch, absl::Now() + absl::Seconds(3), [] { return false; },
                [&](const v1::JobStatus&) {
                  if (!watching.HasBeenNotified()) watching.Notify();
                  return true;
                })
            .code(),
        absl::StatusCode::kDeadlineExceeded);
  });
  watching.WaitForNotification();
  EXPECT_EQ(handler->StoreGet(get, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kResourceExhausted);
  watcher.join();
  EXPECT_EQ(handler->StoreGet(get, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// The issue's regression: 18,000 registrations with 4 KB fields made
// ListWorkers exceed the gRPC message limit, so `aq workers` failed for
// good. They are refused now; and however many workers there are, each
// page is bounded and the pages list each worker once, in id order,
// without its incarnation.
TEST_F(HandlerTest, ListWorkersPaginatesWithinBounds) {
  // Not a line per registration.
  const spdlog::level::level_enum level = logging::Get()->level();
  logging::Get()->set_level(spdlog::level::warn);
  const std::string big(4096, 'x');
  v1::RegisterWorkerRequest reg;
  reg.mutable_info()->set_incarnation("inc");
  reg.mutable_info()->set_version(core_.options().registry.version);
  reg.mutable_info()->set_address("127.0.0.1:1");
  for (int i = 0; i < 18000; ++i) {
    reg.mutable_info()->set_worker_id(absl::StrCat("w", i));
    reg.mutable_info()->set_host(big);
    ASSERT_EQ(handler_->RegisterWorker(reg).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // 6,000 workers with every field at its limit.
  const std::string text(kMaxWorkerTextBytes, 't');
  reg.mutable_info()->set_host(text);
  reg.mutable_info()->set_proto_hash(text);
  reg.mutable_info()->mutable_device()->set_name(text);
  reg.mutable_info()->mutable_device()->set_kind(text);
  reg.mutable_info()->set_incarnation(std::string(kMaxWorkerIdBytes, 'i'));
  reg.mutable_info()->set_address(std::string(249, 'h') + ":65535");
  for (int i = 0; i < 6000; ++i) {
    reg.mutable_info()->set_worker_id(
        absl::StrCat(std::string(kMaxWorkerIdBytes - 8, 'w'), 10000000 + i));
    ASSERT_TRUE(handler_->RegisterWorker(reg).ok());
  }
  v1::ListWorkersRequest list;
  list.set_page_size(-1);
  EXPECT_EQ(handler_->ListWorkers(list).status().code(),
            absl::StatusCode::kInvalidArgument);
  list.set_page_size(0);
  auto first = handler_->ListWorkers(list);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->workers_size(), 500);  // The default.
  // Capped at 5,000, and at 3 MiB.
  list.set_page_size(100000);
  std::vector<std::string> ids;
  int pages = 0;
  do {
    auto page = handler_->ListWorkers(list);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->ByteSizeLong(), size_t{3} << 20);
    EXPECT_LE(page->workers_size(), 5000);
    for (const WorkerStatus& w : page->workers()) {
      EXPECT_TRUE(w.info().incarnation().empty());
      ids.push_back(w.info().worker_id());
    }
    list.set_page_token(page->next_page_token());
    ++pages;
  } while (!list.page_token().empty() && pages < 100);
  EXPECT_GT(pages, 2);  // The bytes cut the pages, not the count alone.
  ASSERT_EQ(ids.size(), 6000u);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 6000u);
  list.set_page_token("not-a-token");
  const auto bad = handler_->ListWorkers(list);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "ListWorkersRequest.page_token='not-a-token' is not a token this "
            "coordinator gave");
  logging::Get()->set_level(level);
}

// ---- Issue 22, items 10 and 11 ----

// Item 10: one user's 64 open watches and log follows refused every other
// user's `aq submit --wait`. Each caller now holds at most a quarter of
// --max_waiting_calls (16 of 64), watches and log follows together, and
// another user still gets a slot.
TEST_F(HandlerTest, OneUserCannotTakeEveryWaitingSlot) {
  ASSERT_EQ(core_.options().max_waiting_calls, 64);
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  v1::WatchJobRequest watch;
  watch.set_job_id(handler_->SubmitJob(submit)->job_id());
  // Alice opens 32 watches (what the watches' group allowed before).
  std::atomic<bool> release{false};
  std::atomic<int> holding{0};
  std::atomic<int> refused{0};
  std::vector<absl::Status> results(32);  // Read after the joins.
  std::vector<std::thread> alice;
  for (int i = 0; i < 32; ++i) {
    alice.emplace_back([&, i] {
      bool counted = false;
      results[i] = handler_->WatchJob(
          "alice", watch, absl::Now() + absl::Seconds(60),
          [&] { return release.load(); },
          [&](const v1::JobStatus&) {
            if (!counted) ++holding;
            counted = true;
            return true;
          });
      if (absl::IsResourceExhausted(results[i])) ++refused;
    });
  }
  // Each either holds a slot (it has written the first status) or was
  // refused at once.
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (holding.load() + refused.load() < 32 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(holding.load(), 16);
  EXPECT_EQ(refused.load(), 16);
  // Her log follows count in the same share.
  v1::StreamLogsRequest follow;
  follow.set_job_id(watch.job_id());
  follow.set_since_seq(int64_t{1} << 40);  // No line to send: it waits.
  follow.set_follow(true);
  const auto no_lines = [](const v1::LogLine&) { return true; };
  EXPECT_EQ(handler_
                ->StreamLogs(
                    "alice", follow, absl::Now() + absl::Seconds(5),
                    [] { return false; }, no_lines)
                .code(),
            absl::StatusCode::kResourceExhausted);
  // Bob still watches and follows: each waits until its deadline.
  const auto status_ok = [](const v1::JobStatus&) { return true; };
  EXPECT_EQ(handler_
                ->WatchJob(
                    "bob", watch, absl::Now() + absl::Milliseconds(300),
                    [] { return false; }, status_ok)
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(handler_
                ->StreamLogs(
                    "bob", follow, absl::Now() + absl::Milliseconds(300),
                    [] { return false; }, no_lines)
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  release = true;
  for (std::thread& t : alice) t.join();
  // 16 held until released, 16 were refused naming her share.
  const absl::Status her_share = absl::ResourceExhaustedError(
      "too many waiting calls of caller alice (limit 16, a quarter of "
      "--max_waiting_calls); try again later");
  EXPECT_EQ(std::count(results.begin(), results.end(), her_share), 16);
  EXPECT_EQ(std::count(results.begin(), results.end(),
                       absl::CancelledError("the client went away")),
            16);
  // Her slots are free again.
  EXPECT_EQ(handler_
                ->WatchJob(
                    "alice", watch, absl::Now() + absl::Milliseconds(100),
                    [] { return false; }, status_ok)
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Anonymous callers (authentication off) have no share of their own: the
// groups' halves still bound them.
TEST(HandlerWaitsTest, AnonymousCallersShareTheGroupsOnly) {
  FakeClock clock;
  CoordinatorOptions o;
  o.max_waiting_calls = 4;  // Groups of 2, callers' shares of 1.
  CoordinatorCore core(o, &clock,
                       [](const std::string&) -> std::unique_ptr<WorkerClient> {
                         return std::make_unique<FakeWorkerClient>();
                       });
  auto handler = NewCoordinatorHandler(&core);
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  v1::WatchJobRequest watch;
  watch.set_job_id(handler->SubmitJob(submit)->job_id());
  std::atomic<bool> release{false};
  absl::Notification first, second;
  std::vector<std::thread> watchers;
  for (absl::Notification* started : {&first, &second}) {
    watchers.emplace_back([&, started] {
      EXPECT_TRUE(absl::IsCancelled(handler->WatchJob(
          watch, absl::Now() + absl::Seconds(30),
          [&] { return release.load(); },
          [&](const v1::JobStatus&) {
            if (!started->HasBeenNotified()) started->Notify();
            return true;
          })));
    });
  }
  first.WaitForNotification();
  second.WaitForNotification();
  const absl::Status third = handler->WatchJob(
      watch, absl::Now() + absl::Seconds(5), [] { return false; },
      [](const v1::JobStatus&) { return true; });
  EXPECT_EQ(third.message(),
            "too many waiting calls of watches (limit 2, half of "
            "--max_waiting_calls); try again later");
  release = true;
  for (std::thread& t : watchers) t.join();
}

// Item 11: a job named with ESC[2J or CR/LF was printed raw by `aq jobs`.
// It is refused at submit naming the field, as is such a resume; nothing
// is kept.
TEST_F(HandlerTest, ControlCharactersInASubmissionAreRefused) {
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  submit.mutable_spec()->set_name("evil\x1b[2J\x1b[H\r\nINFO forged");
  absl::Status s = handler_->SubmitJob(submit).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "invalid job spec: name='evil\\x1b[2J\\x1b[H\\r\\nINFO forged' "
            "holds a control character (it would act on the terminals that "
            "show it)");
  submit.mutable_spec()->set_name("mlp");
  submit.mutable_spec()->mutable_model()->mutable_layers(0)->set_name(
      std::string("a\0z", 3));
  s = handler_->SubmitJob(submit).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      std::string(s.message())
          .rfind("invalid job spec: model.layers[0].name='a\\x00z' holds", 0),
      0u)
      << s;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  submit.set_resume("job-1\x1b]0;owned\x07");
  s = handler_->SubmitJob(submit).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "resume='job-1\\x1b]0;owned\\x07' holds a control character");
  EXPECT_EQ(handler_->ListJobs({})->jobs_size(), 0);
}

// Item 11: a worker's log line with ESC[2J or CR/LF reached `aq logs` raw.
// The coordinator keeps it escaped (a tab stays), and keeps the report's
// progress; a worker's error, which becomes the job's reason, too.
TEST_F(HandlerTest, AWorkersLogLinesAreKeptEscaped) {
  const std::string job = RunJob();
  v1::ReportProgressRequest report;
  report.set_worker_id("w1");
  report.set_incarnation("inc-1");
  v1::StageProgress* p = report.add_stages();
  p->set_job_id(job);
  p->set_committed_version(1);
  p->set_minibatches_done(1);
  v1::LogLine* line = p->add_log_lines();
  line->set_level("info");
  line->set_time_ms(1700000000000);
  line->set_text(
      "\x1b[2J\x1b[Hloss\t0.5\r\n2026-01-01 info coordinator -: forged");
  ASSERT_TRUE(handler_->ReportProgress(report).ok());
  v1::StreamLogsRequest read;
  read.set_job_id(job);
  std::vector<std::string> texts;
  ASSERT_TRUE(handler_
                  ->StreamLogs(
                      read, absl::Now() + absl::Seconds(5),
                      [] { return false; },
                      [&](const v1::LogLine& l) {
                        if (l.worker() == "w1") texts.push_back(l.text());
                        return true;
                      })
                  .ok());
  EXPECT_EQ(texts, std::vector<std::string>{
                       "\\x1b[2J\\x1b[Hloss\t0.5\\x0d\\x0a2026-01-01 info "
                       "coordinator -: forged"});
  EXPECT_EQ(core_.GetJob(job)->step(), 1);
  p->clear_log_lines();
  p->set_error("boom\x1b]0;owned\x07\r\nreason forged");
  p->set_error_code(static_cast<int>(absl::StatusCode::kFailedPrecondition));
  ASSERT_TRUE(handler_->ReportProgress(report).ok());
  const JobStatus failed = *core_.GetJob(job);
  EXPECT_EQ(failed.state(), v1::JOB_FAILED);
  EXPECT_NE(
      failed.reason().find("boom\\x1b]0;owned\\x07\\x0d\\x0areason forged"),
      std::string::npos)
      << failed.reason();
  EXPECT_EQ(FindControl(failed.reason(), /*allow_tab=*/false),
            absl::string_view::npos);
}

TEST(HandlerWithoutModelsTest, RefusesModels) {
  FakeClock clock;
  CoordinatorCore core(CoordinatorOptions(), &clock,
                       [](const std::string&) -> std::unique_ptr<WorkerClient> {
                         return nullptr;
                       });
  auto handler = NewCoordinatorHandler(&core);
  EXPECT_EQ(handler->UploadModel([](v1::UploadModelChunk*) { return false; })
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace aqueduct
