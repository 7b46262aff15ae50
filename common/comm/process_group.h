// ProcessGroup: some ranks of a job's communicator, with their own
// numbering (0 .. size-1, in the order given) and collectives over them:
// all-reduce (sum), all-gather and reduce-scatter of float buffers in host
// memory (a CPU device's memory; other devices stage through the host).
// The data plane's groups (pipeline/mesh.h: tensor, data, pipeline) are
// ProcessGroups over the one communicator a worker connects, as c10d's
// groups are over one store.
//
// The collectives are rings over the communicator's point-to-point
// transfers (Gloo over TCP, or in memory), so every member sends and
// receives (p - 1) / p of the data per phase:
//
//   all-gather, reduce-scatter:  (p - 1) * n floats sent per member
//                                (n: one member's part)
//   all-reduce:                  2 * (p - 1) / p * n floats sent per member
//                                (n: the buffer; reduce-scatter then
//                                all-gather)
//
// Every member ends with the same bits: each part's sum is added up by one
// member, in ring order, and the others receive it. The order does not
// depend on timing, so a run repeats bit for bit.
//
// Members must call the same collectives in the same order (each call
// takes the next sequence number, which tags its transfers). Groups that
// share pairs of ranks use different `channel`s. Every wait ends by the
// caller's deadline; Communicator::Abort ends them with CANCELLED.
//
// Thread-safety: thread-safe; collectives of one group run one at a time.
#ifndef AQUEDUCT_COMMON_COMM_PROCESS_GROUP_H_
#define AQUEDUCT_COMMON_COMM_PROCESS_GROUP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/comm/communicator.h"

namespace aqueduct {

// Channels keep the tags of groups that share pairs of ranks apart.
inline constexpr int kMaxGroupChannels = 64;

class ProcessGroup {
 public:
  // `ranks`: the members' communicator ranks, distinct, including
  // comm->rank(). `name` labels errors ("tensor group [4 5]").
  // INVALID_ARGUMENT naming the problem. `comm` is not owned and must
  // outlive the group.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Make(
      Communicator* comm, std::vector<int> ranks, int channel,
      std::string name);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }
  const std::string& name() const { return name_; }

  // data[0, n) becomes the element-wise sum over the members.
  absl::Status AllReduce(float* data, size_t n, absl::Time deadline);
  // out[r * n, (r + 1) * n) becomes member r's in[0, n). `out` holds
  // size() * n floats and must not overlap `in`.
  absl::Status AllGather(const float* in, size_t n, float* out,
                         absl::Time deadline);
  // out[0, n) becomes the sum over the members of their in[rank * n,
  // (rank + 1) * n). `in` holds size() * n floats and is left unchanged.
  absl::Status ReduceScatter(const float* in, size_t n, float* out,
                             absl::Time deadline);

  // In place over data[0, n), split in size() parts (Part(n, size(), c)):
  // afterwards this member's part holds the sum of every member's values
  // of it (the rest of `data` is left partly summed). The same ring and
  // order as AllReduce's first half, so the part's bits equal AllReduce's.
  absl::Status ReduceScatterInPlace(float* data, size_t n, absl::Time deadline);
  // In place over data[0, n): every member's part (Part(n, size(), c))
  // goes to every other member.
  absl::Status AllGatherInPlace(float* data, size_t n, absl::Time deadline);

  struct Part {
    size_t begin, end;
  };
  // Part c of p parts of n elements (the first n % p parts one longer).
  static Part PartOf(size_t n, int p, int c);

  // Bytes this member has sent in the group's collectives, and how many
  // collectives it has run.
  int64_t bytes_sent() const { return bytes_sent_.load(); }
  int64_t collectives() const { return collectives_.load(); }

 private:
  ProcessGroup(Communicator* comm, std::vector<int> ranks, int rank,
               int channel, std::string name)
      : comm_(comm),
        ranks_(std::move(ranks)),
        rank_(rank),
        channel_(channel),
        name_(std::move(name)) {}

  // The ring's two phases over data[0, n), split in size() parts.
  absl::Status RingReduceScatter(float* data, size_t n, uint64_t sequence,
                                 absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RingAllGather(float* data, size_t n, uint64_t sequence,
                             int first_step, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One ring step: sends `send` to the next member while receiving `recv`
  // floats from the previous one into `into`.
  absl::Status Exchange(const float* send, size_t send_n, float* into,
                        size_t recv_n, uint64_t tag, absl::Time deadline);
  uint64_t Tag(uint64_t sequence, int step) const;
  absl::Status Labelled(const absl::Status& status, const char* what) const;

  Communicator* const comm_;
  const std::vector<int> ranks_;
  const int rank_;
  const int channel_;
  const std::string name_;
  absl::Mutex mu_;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<float> scratch_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> collectives_{0};
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_PROCESS_GROUP_H_
