// The frame target: a receiving stage (PendingFrame, on the CPU device over
// the in-memory communicator) posts the receive of the frame it expects and
// is sent whatever the input holds. The transports deliver messages whole,
// so the input's bytes are exactly what arrives: one transfer (header,
// labels, padding, tensor) or, with device channels, the header message
// alone (the tensor then travels by the channel, sized by the receiver).
//
// Input: kFrameExpectationBytes bytes saying what the receiver expects,
//   [0] bit 0: device channels
//   [1] kind (1 + value % 3)
//   [2] minibatch, [3] microbatch
//   [4] rank (value % 5), [5..8] dimensions (value % 9 each)
//   [9] labels (value % 17)
// then the bytes on the wire.
#include <memory>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/comm/in_memory.h"
#include "common/comm/in_memory_channels.h"
#include "common/device/cpu_device.h"
#include "tests/fuzz/entries.h"
#include "worker/runtime/frame.h"

namespace aqueduct {
namespace fuzz {

namespace {

struct Expectation {
  bool channels = false;
  FrameKind kind = FrameKind::kActivation;
  int64_t minibatch = 0;
  int microbatch = 0;
  Shape shape;
  int64_t num_labels = 0;
};

Expectation ExpectationOf(const uint8_t* e) {
  Expectation x;
  x.channels = (e[0] & 1) != 0;
  x.kind = static_cast<FrameKind>(1 + e[1] % 3);
  x.minibatch = e[2];
  x.microbatch = e[3];
  std::vector<int64_t> dims;
  for (int d = 0; d < e[4] % 5; ++d) dims.push_back(e[5 + d] % 9);
  x.shape = Shape(std::move(dims));
  x.num_labels = e[9] % 17;
  return x;
}

// Process-wide: a CpuDevice owns a thread pool and an allocator cache, too
// costly to build per input.
CpuDevice& Device() {
  static CpuDevice* device = new CpuDevice();
  return *device;
}

}  // namespace

absl::Status FrameEntry(const uint8_t* data, size_t size) {
  if (size < kFrameExpectationBytes) {
    return absl::InvalidArgumentError("shorter than the expectation");
  }
  const Expectation x = ExpectationOf(data);
  std::string wire(reinterpret_cast<const char*>(data) + kFrameExpectationBytes,
                   size - kFrameExpectationBytes);
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator sender(hub, 0), receiver(hub, 1);
  auto channel_hub = std::make_shared<InMemoryChannelHub>();
  InMemoryDeviceChannels sender_channels(channel_hub, 0);
  InMemoryDeviceChannels receiver_channels(channel_hub, 1);
  absl::StatusOr<std::unique_ptr<PendingFrame>> pending = PendingFrame::Post(
      receiver, Device(), 0, x.kind, x.minibatch, x.microbatch, x.shape,
      x.num_labels, x.channels ? &receiver_channels : nullptr);
  AQ_CHECK(pending.ok());  // Sizes here are small and the device is the CPU.
  const uint64_t tag = FrameTag(x.kind, x.minibatch, x.microbatch);
  std::unique_ptr<Work> sent = sender.SendExact(1, tag, std::move(wire));
  std::vector<float> tensor(x.shape.numel(), 1.0f);
  if (x.channels) {
    DeviceChannel* channel =
        sender_channels.Get(static_cast<int>(x.kind), 0, 1);
    AQ_CHECK(channel != nullptr);
    AQ_CHECK(channel->Send(tensor.data(), tensor.size() * sizeof(float)).ok());
  }
  // Everything has been sent: a wait ends at once, so the deadline only
  // bounds a bug.
  absl::StatusOr<Frame> frame =
      (*pending)->Wait(absl::Now() + absl::Seconds(10), "fuzz receiver");
  AQ_CHECK(sent->Wait(absl::Now() + absl::Seconds(10)).ok());
  if (!frame.ok()) return frame.status();
  // An accepted frame is what the receiver asked for.
  AQ_CHECK(frame->info.kind == x.kind);
  AQ_CHECK(frame->info.minibatch == x.minibatch);
  AQ_CHECK(frame->info.microbatch == x.microbatch);
  AQ_CHECK(frame->data.shape() == x.shape);
  AQ_CHECK(static_cast<int64_t>(frame->labels.size()) == x.num_labels);
  return absl::OkStatus();
}

}  // namespace fuzz
}  // namespace aqueduct
