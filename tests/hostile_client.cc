// hostile_client: performs one of issue 14's exhaustion attempts against a
// coordinator and prints what happened as one JSON line: the calls made,
// their status codes counted, the first refusal's message and what the
// attack learned (a job id, a counter's value). It judges nothing: the
// exhaustion test (tests/exhaustion_test.sh) reads the line and asserts.
//
//   hostile_client --coordinator HOST:PORT --attack NAME [--count N]
//       [--job JOB] [--wait_ms MS] [--threads T]
//       [--tls_ca F] [--tls_cert F] [--tls_key F] [--token_file F]
//       [--worker_id ID] [--tokens_file F --identities PREFIX]
//
// Attacks (credentials: a user's token for the job calls, a worker's token
// and the worker certificate for the worker calls):
//   huge_job            submit a job asking for 100,000 workers that waits
//                       --wait_ms for them (prints its id)
//   fat_registrations   --count registrations with one 4 KB field each,
//                       round-robin over the worker credentials of
//                       --tokens_file named PREFIX* (or --worker_id)
//   long_names          --count submissions with 100 KB job names
//   big_messages        --count submissions of 60 MB each (a 60 MB job
//                       name), --threads at once (issue 22, item 7)
//   store_flood         --count StoreSet of 1 MiB values into --job's keys
//   waiting_store       --count concurrent StoreGet of missing keys of
//                       --job, each waiting --wait_ms
//   watch               --count concurrent WatchJob of --job for --wait_ms
//   store_add_overflow  StoreAdd past INT64_MAX on one of --job's keys
//   forged_progress     ReportProgress as --worker_id: for another worker,
//                       from a wrong incarnation, for another stage, with
//                       step 2^63-1 and with utilisation -inf
//
// Exit status: 0 when the attack ran (whatever the coordinator answered),
// 1 when it could not (the job or worker it needs was not found), 2 for bad
// usage.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "common/version.h"
#include "grpcpp/create_channel.h"
#include "proto/service.grpc.pb.h"
#include "tests/grpc_client_util.h"

namespace aqueduct {
namespace {

struct Options {
  std::string address;
  std::string attack;
  int count = 1;
  int threads = 4;
  std::string job;
  int64_t wait_ms = 15000;
  std::string ca, cert, key, token_file;
  std::string worker_id;
  std::string tokens_file, identities;
};

const char* CodeName(grpc::StatusCode code) {
  static const std::map<grpc::StatusCode, const char*> kNames = {
      {grpc::OK, "OK"},
      {grpc::CANCELLED, "CANCELLED"},
      {grpc::UNKNOWN, "UNKNOWN"},
      {grpc::INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {grpc::DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"},
      {grpc::NOT_FOUND, "NOT_FOUND"},
      {grpc::ALREADY_EXISTS, "ALREADY_EXISTS"},
      {grpc::PERMISSION_DENIED, "PERMISSION_DENIED"},
      {grpc::RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
      {grpc::FAILED_PRECONDITION, "FAILED_PRECONDITION"},
      {grpc::ABORTED, "ABORTED"},
      {grpc::OUT_OF_RANGE, "OUT_OF_RANGE"},
      {grpc::UNIMPLEMENTED, "UNIMPLEMENTED"},
      {grpc::INTERNAL, "INTERNAL"},
      {grpc::UNAVAILABLE, "UNAVAILABLE"},
      {grpc::DATA_LOSS, "DATA_LOSS"},
      {grpc::UNAUTHENTICATED, "UNAUTHENTICATED"},
  };
  auto it = kNames.find(code);
  return it == kNames.end() ? "?" : it->second;
}

// JSON string literal of `s` (control characters escaped, cut to 300
// bytes: a refusal's message must not echo a 100 KB field back).
std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char c : s.substr(0, 300)) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// What the attack's calls returned. Thread-safe.
class Tally {
 public:
  void Add(const grpc::Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    ++codes_[CodeName(s.error_code())];
    if (!s.ok() && first_refusal_.empty()) {
      first_refusal_ = s.error_message();
      if (first_refusal_.empty()) first_refusal_ = CodeName(s.error_code());
    }
  }
  // An extra "name":value pair (value already JSON).
  void Note(const std::string& name, const std::string& json) {
    std::lock_guard<std::mutex> lock(mu_);
    notes_ += absl::StrCat(",\"", name, "\":", json);
  }
  void Print(const std::string& attack, absl::Duration took) {
    std::lock_guard<std::mutex> lock(mu_);
    int calls = 0;
    std::string codes;
    for (const auto& [name, n] : codes_) {
      calls += n;
      absl::StrAppend(&codes, codes.empty() ? "" : ",", "\"", name, "\":", n);
    }
    std::printf(
        "{\"attack\":\"%s\",\"calls\":%d,\"ok\":%d,\"codes\":{%s},"
        "\"first_refusal\":%s,\"seconds\":%.2f%s}\n",
        attack.c_str(), calls, codes_.count("OK") ? codes_.at("OK") : 0,
        codes.c_str(), Json(first_refusal_).c_str(),
        absl::ToDoubleSeconds(took), notes_.c_str());
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> codes_;
  std::string first_refusal_;
  std::string notes_;
};

// The credentials of the attack: TLS material and one bearer token.
struct Credentials {
  SecurityConfig config;
  std::shared_ptr<grpc::Channel> channel;
};

Credentials Connect(const Options& o, const std::string& token) {
  Credentials c;
  c.config = TlsFromFiles(o.ca, o.cert, o.key);
  c.config.token = token;
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  args.SetMaxReceiveMessageSize(std::numeric_limits<int>::max());
  c.channel =
      grpc::CreateCustomChannel(o.address, ChannelCredentials(c.config), args);
  return c;
}

std::string TokenOf(const Options& o) {
  if (o.token_file.empty()) return "";
  return std::string(absl::StripAsciiWhitespace(ReadFileOrEmpty(o.token_file)));
}

// A call's context: a deadline of `seconds` and the bearer token.
void Prepare(grpc::ClientContext* ctx, const Credentials& c,
             double seconds = 20) {
  PrepareCall(ctx, c.config.token, absl::Seconds(seconds));
}

// Runs fn(0 .. count-1) on `threads` threads.
void RunParallel(int count, int threads, const std::function<void(int)>& fn) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = t; i < count; i += threads) fn(i);
    });
  }
  for (std::thread& th : pool) th.join();
}

// A valid job asking for `workers` workers that waits `wait_ms` for them.
v1::SubmitJobRequest SmallJob(const std::string& name, int workers,
                              int64_t wait_ms) {
  v1::SubmitJobRequest s;
  v1::JobSpec* spec = s.mutable_spec();
  spec->set_name(name);
  v1::LinearSpec* l = spec->mutable_model()->add_layers()->mutable_linear();
  l->set_in_features(4);
  l->set_out_features(2);
  auto* d = spec->mutable_data()->mutable_synthetic();
  d->add_sample_shape(4);
  d->set_num_classes(2);
  d->set_train_samples(64);
  spec->mutable_optimizer()->mutable_sgd()->set_lr(0.1f);
  spec->set_batch_size(8);
  spec->set_max_steps(1);
  spec->mutable_pipeline()->set_workers(workers);
  spec->mutable_pipeline()->set_wait_for_workers_ms(wait_ms);
  return s;
}

bool HugeJob(const Options& o, Tally* tally) {
  Credentials c = Connect(o, TokenOf(o));
  auto stub = v1::Coordinator::NewStub(c.channel);
  grpc::ClientContext ctx;
  Prepare(&ctx, c);
  v1::SubmitJobResponse response;
  const grpc::Status s =
      stub->SubmitJob(&ctx, SmallJob("huge", 100000, o.wait_ms), &response);
  tally->Add(s);
  tally->Note("job_id", Json(response.job_id()));
  return true;
}

bool LongNames(const Options& o, Tally* tally) {
  Credentials c = Connect(o, TokenOf(o));
  auto stub = v1::Coordinator::NewStub(c.channel);
  RunParallel(o.count, o.threads, [&](int i) {
    const std::string name = absl::StrCat(i, "-", std::string(100 << 10, 'n'));
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    v1::SubmitJobResponse response;
    tally->Add(stub->SubmitJob(&ctx, SmallJob(name, 100000, 60000), &response));
  });
  return true;
}

bool BigMessages(const Options& o, Tally* tally) {
  Credentials c = Connect(o, TokenOf(o));
  auto stub = v1::Coordinator::NewStub(c.channel);
  RunParallel(o.count, o.threads, [&](int i) {
    const std::string name = absl::StrCat(i, "-", std::string(60 << 20, 'n'));
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    v1::SubmitJobResponse response;
    tally->Add(stub->SubmitJob(&ctx, SmallJob(name, 1, 60000), &response));
  });
  return true;
}

// The worker credentials (name, token) of a token file whose names start
// with `prefix`.
std::vector<std::pair<std::string, std::string>> WorkerTokens(
    const std::string& path, const std::string& prefix) {
  std::vector<std::pair<std::string, std::string>> out;
  for (absl::string_view line : absl::StrSplit(ReadFileOrEmpty(path), '\n')) {
    std::vector<std::string> f =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.size() == 3 && f[1] == "worker" && absl::StartsWith(f[2], prefix)) {
      out.emplace_back(f[2], f[0]);
    }
  }
  return out;
}

// A registration of `id` with field `field` (of 7) 4 KB long.
v1::RegisterWorkerRequest FatRegistration(const std::string& id, int field,
                                          int port) {
  const std::string fat(4096, 'x');
  v1::RegisterWorkerRequest r;
  v1::WorkerInfo* info = r.mutable_info();
  info->set_worker_id(field == 0 ? id + fat : id);
  info->set_incarnation(field == 1 ? fat : "1");
  info->set_version(field == 2 ? std::string(kVersion) + fat : kVersion);
  info->set_proto_hash(field == 3 ? fat : "");
  info->set_host(field == 4 ? fat : "127.0.0.1");
  info->mutable_device()->set_kind("cpu");
  info->mutable_device()->set_name(field == 5 ? fat : "cpu");
  info->set_address(field == 6 ? fat + ":1" : absl::StrCat("127.0.0.1:", port));
  return r;
}

bool FatRegistrations(const Options& o, Tally* tally) {
  std::vector<std::pair<std::string, std::string>> ids;
  if (!o.tokens_file.empty()) ids = WorkerTokens(o.tokens_file, o.identities);
  if (ids.empty()) ids.emplace_back(o.worker_id, TokenOf(o));
  std::vector<Credentials> creds;
  for (const auto& [name, token] : ids) creds.push_back(Connect(o, token));
  // One channel per identity would open as many TLS connections; the
  // bearer token is per call, so all identities share the first channel.
  auto stub = v1::Coordinator::NewStub(creds[0].channel);
  RunParallel(o.count, o.threads, [&](int i) {
    const size_t who = static_cast<size_t>(i) % ids.size();
    grpc::ClientContext ctx;
    Prepare(&ctx, creds[who]);
    v1::RegisterWorkerResponse response;
    tally->Add(stub->RegisterWorker(
        &ctx, FatRegistration(ids[who].first, i % 7, 30000 + i % 30000),
        &response));
  });
  tally->Note("identities", std::to_string(ids.size()));
  return true;
}

// The job `o.job` as the caller sees it; NOT_FOUND etc. as a status.
grpc::Status GetJob(const Credentials& c, const std::string& job,
                    v1::JobStatus* status) {
  grpc::ClientContext ctx;
  Prepare(&ctx, c);
  v1::GetJobRequest request;
  request.set_job_id(job);
  return v1::Coordinator::NewStub(c.channel)->GetJob(&ctx, request, status);
}

// A key of the job's current attempt, as its workers' keys are made.
std::string JobKey(const Credentials& c, const std::string& job,
                   const std::string& rest) {
  v1::JobStatus status;
  (void)GetJob(c, job, &status);
  return absl::StrCat("jobs/", job, "/a", status.attempt(), "/", rest);
}

bool StoreFlood(const Options& o, Tally* tally) {
  Credentials c = Connect(o, TokenOf(o));
  auto stub = v1::Coordinator::NewStub(c.channel);
  const std::string prefix = JobKey(c, o.job, "flood-");
  const std::string value(size_t{1} << 20, 'v');
  std::atomic<int> stored{0};
  RunParallel(o.count, o.threads, [&](int i) {
    v1::StoreSetRequest request;
    request.set_key(absl::StrCat(prefix, i));
    request.set_value(value);
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    v1::StoreSetResponse response;
    const grpc::Status s = stub->StoreSet(&ctx, request, &response);
    tally->Add(s);
    if (s.ok()) ++stored;
  });
  tally->Note("mib_values_stored", std::to_string(stored.load()));
  // Then to the brim: values of half the size until one byte is refused,
  // so that nothing is left for another job's rendezvous.
  int64_t topped = 0;
  for (size_t size = value.size() / 2, n = 0; size >= 1; ++n) {
    v1::StoreSetRequest request;
    request.set_key(absl::StrCat(prefix, "top-", n));
    request.set_value(value.substr(0, size));
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    v1::StoreSetResponse response;
    const grpc::Status s = stub->StoreSet(&ctx, request, &response);
    tally->Add(s);
    if (s.ok()) {
      topped += static_cast<int64_t>(size);
    } else if (s.error_code() == grpc::RESOURCE_EXHAUSTED) {
      size /= 2;
    } else {
      break;
    }
  }
  tally->Note("topped_up_bytes", std::to_string(topped));
  return true;
}

bool WaitingStore(const Options& o, Tally* tally) {
  Credentials c = Connect(o, TokenOf(o));
  auto stub = v1::Coordinator::NewStub(c.channel);
  const std::string prefix = JobKey(c, o.job, "never-");
  RunParallel(o.count, o.count, [&](int i) {
    v1::StoreGetRequest request;
    request.set_key(absl::StrCat(prefix, i));
    request.set_wait_ms(o.wait_ms);
    grpc::ClientContext ctx;
    Prepare(&ctx, c, o.wait_ms / 1000.0 + 5);
    v1::StoreGetResponse response;
    tally->Add(stub->StoreGet(&ctx, request, &response));
  });
  return true;
}

bool Watch(const Options& o, Tally* tally) {
  Credentials c = Connect(o, TokenOf(o));
  auto stub = v1::Coordinator::NewStub(c.channel);
  std::mutex mu;
  int64_t updates = 0;
  RunParallel(o.count, o.count, [&](int) {
    v1::WatchJobRequest request;
    request.set_job_id(o.job);
    grpc::ClientContext ctx;
    Prepare(&ctx, c, o.wait_ms / 1000.0);
    auto reader = stub->WatchJob(&ctx, request);
    v1::JobStatus status;
    int64_t mine = 0;
    while (reader->Read(&status)) ++mine;
    tally->Add(reader->Finish());
    std::lock_guard<std::mutex> lock(mu);
    updates += mine;
  });
  tally->Note("updates", std::to_string(updates));
  return true;
}

bool StoreAddOverflow(const Options& o, Tally* tally) {
  Credentials c = Connect(o, TokenOf(o));
  auto stub = v1::Coordinator::NewStub(c.channel);
  const std::string key = JobKey(c, o.job, "counter");
  std::string values;
  for (int64_t delta : {std::numeric_limits<int64_t>::max(), int64_t{1},
                        std::numeric_limits<int64_t>::min(), int64_t{0}}) {
    v1::StoreAddRequest request;
    request.set_key(key);
    request.set_delta(delta);
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    v1::StoreAddResponse response;
    const grpc::Status s = stub->StoreAdd(&ctx, request, &response);
    tally->Add(s);
    absl::StrAppend(&values, values.empty() ? "" : ",",
                    s.ok() ? std::to_string(response.value()) : "null");
  }
  // The counter after INT64_MAX, +1, INT64_MIN and +0: [max, null, -1, -1]
  // unless the +1 wrapped.
  tally->Note("values", absl::StrCat("[", values, "]"));
  return true;
}

// The worker `id` as the coordinator lists it (paging through all).
bool FindWorker(const Credentials& c, const std::string& id,
                v1::WorkerStatus* out) {
  auto stub = v1::Coordinator::NewStub(c.channel);
  v1::ListWorkersRequest request;
  do {
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    v1::ListWorkersResponse page;
    if (!stub->ListWorkers(&ctx, request, &page).ok()) return false;
    for (const v1::WorkerStatus& w : page.workers()) {
      if (w.info().worker_id() == id) {
        *out = w;
        return true;
      }
    }
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return false;
}

// The forged reports: each claims the job finished with accuracy 0.999
// unless it is a range attack.
std::vector<std::pair<std::string, v1::ReportProgressRequest>> ForgedReports(
    const v1::WorkerStatus& me, const v1::JobStatus& job) {
  v1::ReportProgressRequest base;
  base.set_worker_id(me.info().worker_id());
  base.set_incarnation(me.info().incarnation());
  v1::StageProgress* p = base.add_stages();
  p->set_job_id(job.job_id());
  p->set_stage(me.stage());
  p->set_replica(me.replica());
  p->set_attempt(job.attempt());
  p->set_committed_version(job.total_steps());
  p->set_minibatches_done(job.total_steps());
  p->set_finished(true);
  p->set_test_accuracy(0.999);
  std::vector<std::pair<std::string, v1::ReportProgressRequest>> out;
  for (const v1::StageStatus& st : job.stages()) {
    for (const std::string& w : st.workers()) {
      if (w == me.info().worker_id()) continue;
      out.emplace_back("other_worker", base);
      out.back().second.set_worker_id(w);
      out.back().second.mutable_stages(0)->set_stage(st.stage());
      out.emplace_back("other_stage", base);
      out.back().second.mutable_stages(0)->set_stage(st.stage());
    }
  }
  out.emplace_back("wrong_incarnation", base);
  out.back().second.set_incarnation("forged");
  out.emplace_back("step_2^63-1", base);
  out.back().second.mutable_stages(0)->set_finished(false);
  out.back().second.mutable_stages(0)->set_committed_version(
      std::numeric_limits<int64_t>::max());
  out.emplace_back("utilization_-inf", base);
  out.back().second.mutable_stages(0)->set_finished(false);
  out.back().second.mutable_stages(0)->set_committed_version(0);
  out.back().second.mutable_stages(0)->set_minibatches_done(0);
  out.back().second.mutable_stages(0)->set_utilization(
      -std::numeric_limits<double>::infinity());
  return out;
}

bool ForgedProgress(const Options& o, Tally* tally) {
  Credentials c = Connect(o, TokenOf(o));
  v1::WorkerStatus me;
  v1::JobStatus job;
  if (!FindWorker(c, o.worker_id, &me) || !GetJob(c, o.job, &job).ok()) {
    std::fprintf(stderr, "hostile_client: worker %s or job %s not found\n",
                 o.worker_id.c_str(), o.job.c_str());
    return false;
  }
  auto stub = v1::Coordinator::NewStub(c.channel);
  std::string answers;
  for (const auto& [what, request] : ForgedReports(me, job)) {
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    v1::ReportProgressResponse response;
    const grpc::Status s = stub->ReportProgress(&ctx, request, &response);
    tally->Add(s);
    absl::StrAppend(&answers, answers.empty() ? "" : ",", "\"", what, "\":\"",
                    CodeName(s.error_code()), "\"");
  }
  tally->Note("answers", absl::StrCat("{", answers, "}"));
  return true;
}

bool ParseFlags(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    std::map<std::string, std::string*> strings = {
        {"--coordinator", &o->address},
        {"--attack", &o->attack},
        {"--job", &o->job},
        {"--tls_ca", &o->ca},
        {"--tls_cert", &o->cert},
        {"--tls_key", &o->key},
        {"--token_file", &o->token_file},
        {"--worker_id", &o->worker_id},
        {"--tokens_file", &o->tokens_file},
        {"--identities", &o->identities}};
    bool ok = true;
    if (strings.count(flag)) {
      *strings[flag] = v;
    } else if (flag == "--count") {
      ok = absl::SimpleAtoi(v, &o->count);
    } else if (flag == "--threads") {
      ok = absl::SimpleAtoi(v, &o->threads);
    } else if (flag == "--wait_ms") {
      ok = absl::SimpleAtoi(v, &o->wait_ms);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "hostile_client: bad flag %s %s\n", flag.c_str(),
                   v.c_str());
      return false;
    }
  }
  return !o->address.empty() && !o->attack.empty() && o->count >= 1 &&
         o->threads >= 1;
}

int Main(int argc, char** argv) {
  Options o;
  const std::map<std::string, bool (*)(const Options&, Tally*)> attacks = {
      {"huge_job", HugeJob},
      {"fat_registrations", FatRegistrations},
      {"long_names", LongNames},
      {"big_messages", BigMessages},
      {"store_flood", StoreFlood},
      {"waiting_store", WaitingStore},
      {"watch", Watch},
      {"store_add_overflow", StoreAddOverflow},
      {"forged_progress", ForgedProgress},
  };
  if (!ParseFlags(argc, argv, &o) || !attacks.count(o.attack)) {
    std::fprintf(stderr,
                 "usage: hostile_client --coordinator HOST:PORT --attack "
                 "NAME [flags] (see the top of tests/hostile_client.cc)\n");
    return 2;
  }
  Tally tally;
  const absl::Time start = absl::Now();
  if (!attacks.at(o.attack)(o, &tally)) return 1;
  tally.Print(o.attack, absl::Now() - start);
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
