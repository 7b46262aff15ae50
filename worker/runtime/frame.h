// Frames: the activations and gradients stages send each other.
//
// A frame is a fixed-size header (kind, minibatch, microbatch, sender,
// weight version, shape, dtype, label count), the labels (activations
// only), padding to 64 bytes, and the tensor's bytes, sent as one
// exact-size transfer (both sides know every size, so a wrong frame cannot
// overrun a buffer). On the CPU device the sender writes the header into
// the headroom the device keeps before every buffer (Device::headroom) and
// sends header and tensor together without copying the tensor (a tensor
// that is a view into a larger buffer is copied once); the receiver's
// tensor is a view of the buffer it allocated when it posted the receive.
// Other devices stage through host memory, unless the job has device
// channels (DeviceChannels: NCCL between GPUs): then the header goes over
// the communicator and the tensor over the channel for its kind and pair of
// ranks, device memory to device memory.
//
// The receiver posts its receives when it knows what it expects (ahead of
// need) and checks the header before the tensor is used: a frame that is
// not what the schedule expects fails with DATA_LOSS naming what was
// expected and what arrived, rather than corrupting weights.
#ifndef AQUEDUCT_WORKER_RUNTIME_FRAME_H_
#define AQUEDUCT_WORKER_RUNTIME_FRAME_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/comm/communicator.h"
#include "common/comm/device_channel.h"
#include "common/device/device.h"
#include "common/tensor.h"

namespace aqueduct {

// kTiedGradient: a tied weight's gradient between the two stages that hold
// it (its "microbatch" is the tie's index in Model::ties()).
enum class FrameKind : uint32_t {
  kGradNorm = 0,  // a stage's sum of squared gradients (clipping)
  kActivation = 1,
  kGradient = 2,
  kTiedGradient = 3
};

// Tags of frames: bits 25.. minibatch, 19..24 the sending stage's chunk
// index on its rank (stage / pipeline positions: several stages of one
// rank send the same pair of ranks frames of the same microbatch), 3..18
// microbatch, 1..2 kind, bit 0 clear. Below 2^58 (evaluation.cc's weights
// tags) for minibatches below 2^33 > kMaxSteps; microbatches below 65536 =
// kMaxMicrobatches, chunks below 64 = kMaxChunks.
uint64_t FrameTag(FrameKind kind, int64_t minibatch, int microbatch,
                  int chunk = 0);

// What a frame says about itself.
struct FrameInfo {
  FrameKind kind = FrameKind::kActivation;
  int64_t minibatch = 0;
  int microbatch = 0;
  int sender = 0;       // Sender's rank.
  int64_t version = 0;  // Weight version the sender used.
  // The sending stage (checked by the receiver), and its chunk index on its
  // rank (in the tag).
  int stage = 0;
  int chunk = 0;
};

// Posts a frame to `peer`. `data` (F32) must not be written until the
// returned work completes (the work holds a handle to its buffer; on the CPU
// its headroom receives the header). `labels` (I32, may be null) are copied
// next to the header. With `bf16` (a job's precision.compute "bf16") the
// tensor travels as bfloat16, rounded to nearest: half the bytes, one
// conversion on each side; not over device channels, which carry fp32.
absl::StatusOr<std::unique_ptr<Work>> SendFrame(
    Communicator& comm, Device& device, int peer, const FrameInfo& info,
    const Tensor& data, const Tensor* labels,
    DeviceChannels* channels = nullptr, bool bf16 = false);

// A received frame: the tensor on the device, and the labels on the host.
struct Frame {
  FrameInfo info;
  Tensor data;
  std::vector<int32_t> labels;
};

// A frame being received, posted ahead of need.
class PendingFrame {
 public:
  // Allocates the destination and posts both receives for the frame of
  // `kind`, minibatch and microbatch from stage `stage` (chunk `chunk` of
  // its rank) on `peer`, with `shape` and `num_labels` labels.
  static absl::StatusOr<std::unique_ptr<PendingFrame>> Post(
      Communicator& comm, Device& device, int peer, FrameKind kind,
      int64_t minibatch, int microbatch, const Shape& shape, int64_t num_labels,
      DeviceChannels* channels = nullptr, int stage = 0, int chunk = 0,
      bool bf16 = false);
  ~PendingFrame();

  // Waits for the header, checks it (`who` names the receiver in errors),
  // then for the body. DATA_LOSS on a mismatch; the transport's error or
  // DEADLINE_EXCEEDED otherwise.
  absl::StatusOr<Frame> Wait(absl::Time deadline, const std::string& who);

 private:
  PendingFrame() = default;
  Device* device_ = nullptr;
  FrameKind kind_ = FrameKind::kActivation;
  int64_t minibatch_ = 0;
  int microbatch_ = 0;
  int stage_ = 0;
  Shape shape_;
  int64_t num_labels_ = 0;
  Tensor data_;
  bool bf16_ = false;          // The tensor arrives as bfloat16.
  Tensor whole_;               // One-transfer frames on the CPU: all of it.
  size_t offset_ = 0;          // Of the tensor within a one-transfer frame.
  std::vector<char> staging_;  // Devices whose memory is not the host's.
  std::unique_ptr<RecvWork> header_;
  std::unique_ptr<Work> body_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_FRAME_H_
