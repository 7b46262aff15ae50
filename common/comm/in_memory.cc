#include "common/comm/in_memory.h"

#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

class DoneSend final : public Work {
 public:
  explicit DoneSend(absl::Status s) : status_(std::move(s)) {}
  absl::Status Wait(absl::Time) override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace

class InMemoryRecv final : public RecvWork {
 public:
  InMemoryRecv(InMemoryCommunicator* comm, int peer, uint64_t tag)
      : comm_(comm), peer_(peer), tag_(tag) {}

  absl::StatusOr<std::string> Wait(absl::Time deadline) override {
    InMemoryHub& hub = *comm_->hub_;
    const InMemoryHub::Key key{peer_, comm_->rank_, tag_};
    absl::MutexLock lock(&hub.mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub.mu_) {
      auto it = hub.queues_.find(key);
      return (it != hub.queues_.end() && !it->second.empty()) ||
             hub.dead_[peer_] || hub.dead_[comm_->rank_] ||
             hub.aborted_[comm_->rank_];
    };
    hub.mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (hub.aborted_[comm_->rank_]) {
      return absl::CancelledError(absl::StrCat("rank ", comm_->rank_,
                                               " aborted receiving tag ", tag_,
                                               " from rank ", peer_));
    }
    auto it = hub.queues_.find(key);
    if (it != hub.queues_.end() && !it->second.empty()) {
      std::string message = std::move(it->second.front());
      it->second.pop_front();
      comm_->received_ += static_cast<int64_t>(message.size());
      return message;
    }
    if (hub.dead_[peer_] || hub.dead_[comm_->rank_]) {
      return absl::UnavailableError(
          absl::StrCat("rank ", peer_, " is gone (receiving tag ", tag_,
                       " on rank ", comm_->rank_, ")"));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", comm_->rank_, " timed out receiving tag ", tag_,
                     " from rank ", peer_));
  }

 private:
  InMemoryCommunicator* comm_;
  int peer_;
  uint64_t tag_;
};

void InMemoryHub::KillRank(int rank) {
  absl::MutexLock lock(&mu_);
  dead_[rank] = true;
}

void InMemoryCommunicator::Abort() {
  absl::MutexLock lock(&hub_->mu_);
  hub_->aborted_[rank_] = true;
}

std::unique_ptr<Work> InMemoryCommunicator::Send(int peer, uint64_t tag,
                                                 std::string message) {
  if (peer < 0 || peer >= hub_->size()) {
    return std::make_unique<DoneSend>(absl::InvalidArgumentError(
        absl::StrCat("rank ", peer, " is out of range")));
  }
  absl::MutexLock lock(&hub_->mu_);
  if (hub_->aborted_[rank_]) {
    return std::make_unique<DoneSend>(absl::CancelledError(
        absl::StrCat("rank ", rank_, " aborted (sending tag ", tag, ")")));
  }
  if (hub_->dead_[peer] || hub_->dead_[rank_]) {
    return std::make_unique<DoneSend>(absl::UnavailableError(
        absl::StrCat("rank ", peer, " is gone (sending tag ", tag, ")")));
  }
  sent_ += static_cast<int64_t>(message.size());
  hub_->queues_[{rank_, peer, tag}].push_back(std::move(message));
  return std::make_unique<DoneSend>(absl::OkStatus());
}

std::unique_ptr<RecvWork> InMemoryCommunicator::Recv(int peer, uint64_t tag) {
  return std::make_unique<InMemoryRecv>(this, peer, tag);
}

absl::Status InMemoryCommunicator::AllReduce(const std::vector<int>& group,
                                             uint64_t sequence, float* data,
                                             size_t n, absl::Time deadline) {
  if (group.size() <= 1) return absl::OkStatus();
  absl::MutexLock lock(&hub_->mu_);
  auto& r = hub_->reductions_[{group, sequence}];
  if (!r.parts.empty() && r.parts.begin()->second.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce ", sequence, ": rank ", rank_, " contributes ",
                     n, " floats, others ", r.parts.begin()->second.size()));
  }
  r.parts[rank_].assign(data, data + n);
  const int members = static_cast<int>(group.size());
  if (static_cast<int>(r.parts.size()) == members && !r.done) {
    r.sum.assign(n, 0.0f);
    for (int g : group) {
      const std::vector<float>& part = r.parts[g];
      for (size_t i = 0; i < n; ++i) r.sum[i] += part[i];
    }
    r.done = true;
  }
  auto complete = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub_->mu_) -> bool {
    bool any_dead = false;
    for (int g : group) any_dead = any_dead || hub_->dead_[g];
    return r.done || any_dead || hub_->aborted_[rank_];
  };
  hub_->mu_.AwaitWithDeadline(absl::Condition(&complete), deadline);
  if (hub_->aborted_[rank_]) {
    return absl::CancelledError(
        absl::StrCat("all-reduce ", sequence, " on rank ", rank_, " aborted"));
  }
  if (!r.done) {
    const size_t arrived = r.parts.size();
    return absl::DeadlineExceededError(
        absl::StrCat("all-reduce ", sequence, " on rank ", rank_, ": ", arrived,
                     " of ", members, " ranks arrived"));
  }
  std::copy(r.sum.begin(), r.sum.end(), data);
  if (++r.collected == members) {
    hub_->reductions_.erase({group, sequence});
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
