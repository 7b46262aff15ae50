#include "common/comm/process_group.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace aqueduct {

namespace {

// Group transfers take tags in [2^60, 2^61): above frames (below 2^58),
// evaluation's weights (2^58) and exchanges (2^59), below the top range
// Gloo's own all-reduce uses. Bits 54..59 the channel, 8..53 the sequence
// (modulo 2^46: transfers between a pair arrive in order, so a wrapped
// sequence still matches), 0..7 the ring step (modulo 256, likewise).
constexpr uint64_t kGroupTagBase = uint64_t{1} << 60;
constexpr uint64_t kSequenceMask = (uint64_t{1} << 46) - 1;

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Make(
    Communicator* comm, std::vector<int> ranks, int channel, std::string name) {
  if (channel < 0 || channel >= kMaxGroupChannels) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": channel ", channel,
                                                   " is not in [0, ",
                                                   kMaxGroupChannels, ")"));
  }
  const std::set<int> distinct(ranks.begin(), ranks.end());
  if (distinct.size() != ranks.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": ranks [", absl::StrJoin(ranks, " "), "] repeat a rank"));
  }
  int own = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= comm->size()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": rank ", ranks[i],
                                                     " is not in the job's ",
                                                     comm->size(), " ranks"));
    }
    if (ranks[i] == comm->rank()) own = static_cast<int>(i);
  }
  if (own < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ranks [", absl::StrJoin(ranks, " "),
                     "] do not include this rank ", comm->rank()));
  }
  return std::unique_ptr<ProcessGroup>(
      new ProcessGroup(comm, std::move(ranks), own, channel, std::move(name)));
}

ProcessGroup::Part ProcessGroup::PartOf(size_t n, int p, int c) {
  const size_t base = n / static_cast<size_t>(p);
  const size_t extra = n % static_cast<size_t>(p);
  const size_t uc = static_cast<size_t>(c);
  const size_t begin = uc * base + std::min(uc, extra);
  return {begin, begin + base + (uc < extra ? 1 : 0)};
}

uint64_t ProcessGroup::Tag(uint64_t sequence, int step) const {
  return kGroupTagBase | (static_cast<uint64_t>(channel_) << 54) |
         ((sequence & kSequenceMask) << 8) |
         (static_cast<uint64_t>(step) & 255);
}

absl::Status ProcessGroup::Labelled(const absl::Status& status,
                                    const char* what) const {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(name_, " ", what, " (rank ", rank_, " of ",
                                   size(), "): ", status.message()));
}

absl::Status ProcessGroup::Exchange(const float* send, size_t send_n,
                                    float* into, size_t recv_n, uint64_t tag,
                                    absl::Time deadline) {
  const int p = size();
  const int next = ranks_[(rank_ + 1) % p];
  const int prev = ranks_[(rank_ + p - 1) % p];
  std::unique_ptr<Work> recv;
  if (recv_n > 0) {
    recv = comm_->RecvBuffer(prev, tag, into, recv_n * sizeof(float));
  }
  if (send_n > 0) {
    bytes_sent_ += static_cast<int64_t>(send_n * sizeof(float));
    RETURN_IF_ERROR(
        comm_->SendBuffer(next, tag, send, send_n * sizeof(float), nullptr)
            ->Wait(deadline));
  }
  if (recv != nullptr) RETURN_IF_ERROR(recv->Wait(deadline));
  return absl::OkStatus();
}

// Step s: send part (r - s - 1) to the next member, receive part (r - s -
// 2) from the previous one and add this member's own to it. After p - 1
// steps member r holds part r's sum.
absl::Status ProcessGroup::RingReduceScatter(float* data, size_t n,
                                             uint64_t sequence,
                                             absl::Time deadline) {
  const int p = size();
  for (int s = 0; s + 1 < p; ++s) {
    const Part out = PartOf(n, p, (rank_ - s - 1 + 2 * p) % p);
    const Part in = PartOf(n, p, (rank_ - s - 2 + 2 * p) % p);
    const size_t len = in.end - in.begin;
    if (scratch_.size() < len) scratch_.resize(len);
    RETURN_IF_ERROR(Exchange(data + out.begin, out.end - out.begin,
                             scratch_.data(), len, Tag(sequence, s), deadline));
    float* own = data + in.begin;
    for (size_t i = 0; i < len; ++i) own[i] += scratch_[i];
  }
  return absl::OkStatus();
}

// Step s: send part (r - s) on, receive part (r - s - 1) in place.
absl::Status ProcessGroup::RingAllGather(float* data, size_t n,
                                         uint64_t sequence, int first_step,
                                         absl::Time deadline) {
  const int p = size();
  for (int s = 0; s + 1 < p; ++s) {
    const Part out = PartOf(n, p, (rank_ - s + p) % p);
    const Part in = PartOf(n, p, (rank_ - s - 1 + 2 * p) % p);
    RETURN_IF_ERROR(Exchange(data + out.begin, out.end - out.begin,
                             data + in.begin, in.end - in.begin,
                             Tag(sequence, first_step + s), deadline));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::AllReduce(float* data, size_t n,
                                     absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = sequence_++;
  ++collectives_;
  if (size() == 1) return absl::OkStatus();
  absl::Status status = RingReduceScatter(data, n, sequence, deadline);
  if (status.ok()) {
    status = RingAllGather(data, n, sequence, size() - 1, deadline);
  }
  return Labelled(status, "all-reduce");
}

absl::Status ProcessGroup::ReduceScatterInPlace(float* data, size_t n,
                                                absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = sequence_++;
  ++collectives_;
  if (size() == 1) return absl::OkStatus();
  return Labelled(RingReduceScatter(data, n, sequence, deadline),
                  "reduce-scatter");
}

absl::Status ProcessGroup::AllGatherInPlace(float* data, size_t n,
                                            absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = sequence_++;
  ++collectives_;
  if (size() == 1) return absl::OkStatus();
  // Step 0 sends this member's own part, as in AllReduce's second half.
  return Labelled(RingAllGather(data, n, sequence, 0, deadline), "all-gather");
}

absl::Status ProcessGroup::AllGather(const float* in, size_t n, float* out,
                                     absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = sequence_++;
  ++collectives_;
  std::memcpy(out + static_cast<size_t>(rank_) * n, in, n * sizeof(float));
  if (size() == 1) return absl::OkStatus();
  return Labelled(RingAllGather(out, n * static_cast<size_t>(size()), sequence,
                                0, deadline),
                  "all-gather");
}

absl::Status ProcessGroup::ReduceScatter(const float* in, size_t n, float* out,
                                         absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = sequence_++;
  ++collectives_;
  const size_t total = n * static_cast<size_t>(size());
  std::vector<float> work(in, in + total);
  absl::Status status =
      RingReduceScatter(work.data(), total, sequence, deadline);
  if (!status.ok()) return Labelled(status, "reduce-scatter");
  std::memcpy(out, work.data() + static_cast<size_t>(rank_) * n,
              n * sizeof(float));
  return absl::OkStatus();
}

}  // namespace aqueduct
