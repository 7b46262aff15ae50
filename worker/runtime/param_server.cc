#include "worker/runtime/param_server.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"

namespace aqueduct {

Consistency ConsistencyOf(const std::string& name) {
  if (name == "bounded") return Consistency::kBounded;
  if (name == "async") return Consistency::kAsync;
  return Consistency::kSync;
}

ParameterShard::ParameterShard(Config config, std::unique_ptr<Device> device,
                               Tensor weights, ParameterSet views, Tensor grads,
                               ParameterSet grad_views,
                               std::unique_ptr<Optimizer> optimizer)
    : config_(config),
      device_(std::move(device)),
      weights_(std::move(weights)),
      grads_(std::move(grads)),
      views_(std::move(views)),
      grad_views_(std::move(grad_views)),
      optimizer_(std::move(optimizer)),
      applied_clock_(config.first_clock),
      pushed_(config.replicas, config.first_clock),
      live_(config.replicas, true) {}

absl::Status ParameterShard::Update(const float* sum) {
  RETURN_IF_ERROR(device_->CopyFromHost(sum, grads_));
  RETURN_IF_ERROR(optimizer_->Step(views_, grad_views_));
  ++updates_;
  return absl::OkStatus();
}

void ParameterShard::Count(int64_t staleness) {
  if (staleness < 0) staleness = 0;
  if (histogram_.size() <= static_cast<size_t>(staleness)) {
    histogram_.resize(staleness + 1, 0);
  }
  ++histogram_[staleness];
}

absl::Status ParameterShard::ApplyComplete() {
  const int d = config_.replicas;
  for (auto it = pending_.find(applied_clock_);
       it != pending_.end() && it->second.count == d;
       it = pending_.find(applied_clock_)) {
    Pending& p = it->second;
    // In replica order, whatever order the pushes came in: a step's
    // update repeats bit for bit.
    std::vector<float>& sum = p.grads[0];
    for (int r = 1; r < d; ++r) {
      const std::vector<float>& g = p.grads[r];
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
    }
    for (int r = 0; r < d; ++r) Count(updates_ - p.bases[r]);
    RETURN_IF_ERROR(Update(sum.data()));
    pending_.erase(it);
    ++applied_clock_;
  }
  return absl::OkStatus();
}

absl::Status ParameterShard::Push(int replica, int64_t clock, int64_t base,
                                  const float* grad) {
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  if (replica < 0 || replica >= config_.replicas || clock != pushed_[replica]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter shard ", config_.index, ": replica ", replica,
        " pushed step ", clock, " where step ",
        replica >= 0 && replica < config_.replicas ? pushed_[replica] : -1,
        " was due"));
  }
  if (base < 0 || base > updates_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter shard ", config_.index, ": replica ", replica,
        " pushed a gradient of update ", base, " at update ", updates_));
  }
  ++pushed_[replica];
  const auto n = static_cast<size_t>(size());
  absl::Status status;
  if (config_.consistency == Consistency::kAsync) {
    Count(updates_ - base);
    status = Update(grad);
  } else {
    Pending& p = pending_[clock];
    if (p.grads.empty()) {
      p.grads.resize(config_.replicas);
      p.bases.resize(config_.replicas);
    }
    p.grads[replica].assign(grad, grad + n);
    p.bases[replica] = base;
    ++p.count;
    status = ApplyComplete();
  }
  if (!status.ok()) error_ = status;
  return status;
}

bool ParameterShard::MayGo(int replica, int64_t clock) const {
  if (!error_.ok()) return true;
  if (clock + 1 >= config_.last_clock) {
    // The last step: every replica's last push applied.
    if (config_.consistency != Consistency::kAsync) {
      return applied_clock_ >= config_.last_clock;
    }
    for (int r = 0; r < config_.replicas; ++r) {
      if (live_[r] && pushed_[r] < config_.last_clock) return false;
    }
    return true;
  }
  switch (config_.consistency) {
    case Consistency::kSync:
      return applied_clock_ >= clock + 1;
    case Consistency::kBounded:
      return applied_clock_ >= clock + 1 - config_.staleness;
    case Consistency::kAsync:
      return true;
  }
  (void)replica;
  return true;
}

absl::StatusOr<int64_t> ParameterShard::Pull(int replica, int64_t clock,
                                             float* out, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  struct Args {
    const ParameterShard* shard;
    int replica;
    int64_t clock;
  } args{this, replica, clock};
  const bool ready =
      mu_.AwaitWithDeadline(absl::Condition(
                                +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                  return a->shard->MayGo(a->replica, a->clock);
                                },
                                &args),
                            deadline);
  if (!error_.ok()) return error_;
  if (!ready) {
    return absl::DeadlineExceededError(
        absl::StrCat("parameter shard ", config_.index, ": replica ", replica,
                     " waited past its deadline after step ", clock,
                     " (steps applied up to ", applied_clock_,
                     "; a replica is behind or lost)"));
  }
  RETURN_IF_ERROR(device_->CopyToHost(weights_, out));
  return updates_;
}

void ParameterShard::Drop(int replica) {
  absl::MutexLock lock(&mu_);
  if (replica >= 0 && replica < config_.replicas) live_[replica] = false;
}

void ParameterShard::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (error_.ok() && !status.ok()) error_ = status;
}

absl::Status ParameterShard::WithState(
    const std::function<absl::Status(const Tensor&, const Optimizer&)>& fn) {
  absl::MutexLock lock(&mu_);
  return fn(weights_, *optimizer_);
}

absl::Status ParameterShard::Load(const float* weights, int64_t steps) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(device_->CopyFromHost(weights, weights_));
  optimizer_->SetSteps(steps);
  updates_ = steps;
  return absl::OkStatus();
}

std::vector<int64_t> ParameterShard::StalenessHistogram() const {
  absl::MutexLock lock(&mu_);
  return histogram_;
}

int64_t ParameterShard::updates() const {
  absl::MutexLock lock(&mu_);
  return updates_;
}

absl::StatusOr<int64_t> PullUntil(ParameterShard& shard, int replica,
                                  int64_t clock, float* out,
                                  absl::Time deadline,
                                  const std::atomic<bool>* stop) {
  for (;;) {
    const absl::Time slice =
        std::min(deadline, absl::Now() + absl::Milliseconds(100));
    absl::StatusOr<int64_t> got = shard.Pull(replica, clock, out, slice);
    if (got.ok() ||
        got.status().code() != absl::StatusCode::kDeadlineExceeded ||
        slice >= deadline) {
      return got;
    }
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(absl::StrCat(
          "stopped waiting for parameter shard after step ", clock));
    }
  }
}

namespace {

// Bit 61 set, 60 and 62 clear: apart from frames (minibatch << 25, far
// below), groups (bit 60) and Gloo's reduces (bit 62).
constexpr uint64_t kShardTagBase = uint64_t{1} << 61;
constexpr uint64_t kClockMask = (uint64_t{1} << 40) - 1;

uint64_t ShardTag(int chunk, int shard, bool pull, int64_t clock) {
  return kShardTagBase | (static_cast<uint64_t>(chunk & 63) << 51) |
         (static_cast<uint64_t>(shard & 1023) << 41) |
         (static_cast<uint64_t>(pull) << 40) |
         (static_cast<uint64_t>(clock) & kClockMask);
}

constexpr size_t kHeaderBytes = 2 * sizeof(int64_t);

}  // namespace

uint64_t PushTag(int chunk, int shard, int64_t clock) {
  return ShardTag(chunk, shard, false, clock);
}

uint64_t PullTag(int chunk, int shard, int64_t clock) {
  return ShardTag(chunk, shard, true, clock);
}

std::string EncodeShardMessage(int64_t clock, int64_t update, const float* data,
                               size_t n) {
  std::string message(kHeaderBytes + n * sizeof(float), '\0');
  std::memcpy(message.data(), &clock, sizeof(clock));
  std::memcpy(message.data() + sizeof(clock), &update, sizeof(update));
  if (n > 0) std::memcpy(message.data() + kHeaderBytes, data, n * 4);
  return message;
}

absl::StatusOr<int64_t> DecodeShardMessage(const std::string& message,
                                           int64_t clock, float* data,
                                           size_t n) {
  if (message.size() != kHeaderBytes + n * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a parameter-shard message of step ", clock, " has ", message.size(),
        " bytes, not ", kHeaderBytes + n * sizeof(float)));
  }
  int64_t got_clock, update;
  std::memcpy(&got_clock, message.data(), sizeof(got_clock));
  std::memcpy(&update, message.data() + sizeof(got_clock), sizeof(update));
  if (got_clock != clock) {
    return absl::InvalidArgumentError(
        absl::StrCat("a parameter-shard message of step ", got_clock,
                     " arrived where step ", clock, " was due"));
  }
  if (n > 0) std::memcpy(data, message.data() + kHeaderBytes, n * 4);
  return update;
}

ShardService::ShardService(Communicator* comm, int chunk,
                           absl::Duration timeout,
                           const std::atomic<bool>* stop)
    : comm_(comm), chunk_(chunk), timeout_(timeout), stop_(stop) {}

ShardService::~ShardService() { Join(); }

void ShardService::Join() {
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

absl::Status ShardService::status() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

absl::Status ShardService::Answer(ParameterShard* shard, int k, Remote remote,
                                  int64_t clock) {
  const auto n = static_cast<size_t>(shard->size());
  std::vector<float> buffer(n);
  ASSIGN_OR_RETURN(const std::string push,
                   comm_->Recv(remote.rank, PushTag(chunk_, k, clock))
                       ->Wait(absl::Now() + timeout_));
  ASSIGN_OR_RETURN(const int64_t base,
                   DecodeShardMessage(push, clock, buffer.data(), n));
  RETURN_IF_ERROR(shard->Push(remote.replica, clock, base, buffer.data()));
  ASSIGN_OR_RETURN(const int64_t update,
                   PullUntil(*shard, remote.replica, clock, buffer.data(),
                             absl::Now() + timeout_, stop_));
  return comm_
      ->Send(remote.rank, PullTag(chunk_, k, clock),
             EncodeShardMessage(clock, update, buffer.data(), n))
      ->Wait(absl::Now() + timeout_);
}

void ShardService::Serve(ParameterShard* shard, int k, Remote remote,
                         int64_t first, int64_t last, bool drop_on_loss) {
  threads_.emplace_back([this, shard, k, remote, first, last, drop_on_loss] {
    for (int64_t clock = first; clock < last; ++clock) {
      const absl::Status status = Answer(shard, k, remote, clock);
      if (status.ok()) continue;
      if (drop_on_loss) {
        // Async: the others go on without this replica.
        shard->Drop(remote.replica);
        AQ_LOG_WARN(
            "parameter shard {}: replica {} (rank {}) dropped at step {}, "
            "the others go on: {}",
            k, remote.replica, remote.rank, clock, status.ToString());
        return;
      }
      const absl::Status failed(
          status.code(), absl::StrCat("parameter shard ", k, " serving rank ",
                                      remote.rank, ": ", status.message()));
      // The shard's own replica may be waiting in a Pull for this one's
      // push: it fails now (a peer that died is seen at once, its
      // connection closed) instead of at its deadline.
      shard->Fail(failed);
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = failed;
      return;
    }
  });
}

}  // namespace aqueduct
