// Frames over the in-memory communicator and over Gloo on loopback.
#include "worker/runtime/frame.h"

#include <cstring>
#include <thread>

#include "common/comm/gloo_communicator.h"
#include "common/comm/in_memory.h"
#include "common/comm/in_memory_channels.h"
#include "common/comm/local_store.h"
#include "common/device/bf16.h"
#include "common/device/cpu_device.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

Tensor Iota(Device& device, const Shape& shape, float start) {
  Tensor t = *device.Allocate(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = start + i;
  return t;
}

Tensor Labels(Device& device, int n) {
  Tensor t = *device.Allocate(Shape({n}), DType::kI32);
  for (int i = 0; i < n; ++i) t.i32()[i] = i % 10;
  return t;
}

const absl::Duration kWait = absl::Seconds(20);

TEST(FrameTest, TagsSeparateKindsAndMicrobatches) {
  const uint64_t a = FrameTag(FrameKind::kActivation, 5, 3);
  const uint64_t g = FrameTag(FrameKind::kGradient, 5, 3);
  EXPECT_NE(a, g);
  EXPECT_NE(a, FrameTag(FrameKind::kActivation, 5, 4));
  EXPECT_NE(a, FrameTag(FrameKind::kActivation, 6, 3));
  // Two stages of one rank send the same pair of ranks frames of the same
  // microbatch (interleaved 1F1B): the sender's stage tells them apart.
  EXPECT_NE(a, FrameTag(FrameKind::kActivation, 5, 3, 4));
  // The extremes of every field stay apart and below 2^61.
  const uint64_t top =
      FrameTag(FrameKind::kTiedGradient, 1000000000, 65535, 4095);
  EXPECT_LT(top, uint64_t{1} << 61);
  EXPECT_NE(FrameTag(FrameKind::kActivation, 1, 0, 0),
            FrameTag(FrameKind::kActivation, 0, 0, 4095));
  EXPECT_NE(FrameTag(FrameKind::kActivation, 0, 0, 1),
            FrameTag(FrameKind::kActivation, 0, 65535, 0));
}

TEST(FrameTest, AFrameOfAnotherStageIsRefused) {
  CpuDevice device;
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator a(hub, 0), b(hub, 1);
  // Stage 4 expects stage 3's activation (chunk 1 of its rank); a sender
  // claiming stage 0 under that tag is refused (a header is checked, not
  // trusted).
  auto pending = PendingFrame::Post(b, device, 0, FrameKind::kActivation, 2, 1,
                                    Shape({2, 3}), 0, nullptr, 3, 1);
  ASSERT_TRUE(pending.ok());
  Tensor t = Iota(device, Shape({2, 3}), 0);
  FrameInfo info{FrameKind::kActivation, 2, 1, 0, 1, 0, 0};
  const uint64_t tag = FrameTag(FrameKind::kActivation, 2, 1, 1);
  auto sent = SendFrame(a, device, 1, info, t, nullptr);
  ASSERT_TRUE(sent.ok());
  // Re-send the bytes of the stage-0 frame under stage 3's tag.
  auto wire = b.Recv(0, FrameTag(FrameKind::kActivation, 2, 1, 0))
                  ->Wait(absl::Now() + kWait);
  ASSERT_TRUE(wire.ok()) << wire.status();
  ASSERT_TRUE(a.SendExact(1, tag, *wire)->Wait(absl::Now() + kWait).ok());
  auto frame = (*pending)->Wait(absl::Now() + kWait, "stage 4 (rank 1)");
  ASSERT_EQ(frame.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(frame.status().message().find("expected the activation of stage 3"),
            std::string::npos)
      << frame.status();
  EXPECT_NE(frame.status().message().find("received activation of stage 0"),
            std::string::npos)
      << frame.status();
}

// On the CPU device the header is written into the headroom before the
// tensor and the two leave together; a view into a larger buffer (no
// headroom of its own) is copied once. Both arrive intact.
TEST(FrameTest, HeaderGoesInTheHeadroomOrTheTensorIsCopied) {
  CpuDevice device;
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator a(hub, 0), b(hub, 1);
  Tensor whole = Iota(device, Shape({6, 4}), 0);
  Tensor view = whole.Rows(2, 6);  // Starts 32 bytes into its buffer.
  for (const Tensor& t : {whole, view}) {
    auto p = PendingFrame::Post(b, device, 0, FrameKind::kGradient, 1, 0,
                                t.shape(), 0);
    ASSERT_TRUE(p.ok());
    const std::vector<float> before(whole.f32(), whole.f32() + 24);
    FrameInfo info{FrameKind::kGradient, 1, 0, 0, 9};
    ASSERT_TRUE(SendFrame(a, device, 1, info, t, nullptr).ok());
    auto frame = (*p)->Wait(absl::Now() + kWait, "rank 1");
    ASSERT_TRUE(frame.ok()) << frame.status();
    EXPECT_EQ(frame->data.shape(), t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) {
      EXPECT_EQ(frame->data.f32()[i], t.f32()[i]);
    }
    // The sender's data is untouched either way.
    EXPECT_EQ(std::vector<float>(whole.f32(), whole.f32() + 24), before);
  }
  // The in-place frame's header sits right before the tensor: "AQFR".
  uint32_t magic = 0;
  const char* start = static_cast<const char*>(whole.raw()) - 128;
  std::memcpy(&magic, start, sizeof(magic));
  EXPECT_EQ(magic, 0x41514652u);
}

TEST(FrameTest, ActivationWithLabelsRoundTripsInMemory) {
  CpuDevice device;
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator a(hub, 0), b(hub, 1);
  const Shape shape({4, 3});
  auto pending =
      PendingFrame::Post(b, device, 0, FrameKind::kActivation, 7, 2, shape, 4);
  ASSERT_TRUE(pending.ok()) << pending.status();
  Tensor data = Iota(device, shape, 1);
  Tensor labels = Labels(device, 4);
  FrameInfo info{FrameKind::kActivation, 7, 2, 0, 11};
  auto sent = SendFrame(a, device, 1, info, data, &labels);
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_TRUE((*sent)->Wait(absl::Now() + kWait).ok());
  auto frame = (*pending)->Wait(absl::Now() + kWait, "stage 1");
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(frame->info.version, 11);
  EXPECT_EQ(frame->info.sender, 0);
  EXPECT_EQ(frame->data.shape(), shape);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(frame->data.f32()[i], 1 + i);
  EXPECT_EQ(frame->labels, (std::vector<int32_t>{0, 1, 2, 3}));
}

// A job in bf16: the tensor travels as bfloat16 (half the bytes) and
// arrives rounded; a receiver expecting fp32 refuses it, naming both.
TEST(FrameTest, Bf16FramesRoundTripRoundedAndAreChecked) {
  CpuDevice device;
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator a(hub, 0), b(hub, 1);
  const Shape shape({3, 5});
  auto pending = PendingFrame::Post(b, device, 0, FrameKind::kActivation, 1, 0,
                                    shape, 3, nullptr, 0, 0, /*bf16=*/true);
  ASSERT_TRUE(pending.ok()) << pending.status();
  Tensor data = Iota(device, shape, 0.1f);
  Tensor labels = Labels(device, 3);
  FrameInfo info{FrameKind::kActivation, 1, 0, 0, 4};
  auto sent = SendFrame(a, device, 1, info, data, &labels, nullptr, true);
  ASSERT_TRUE(sent.ok()) << sent.status();
  auto frame = (*pending)->Wait(absl::Now() + kWait, "stage 1");
  ASSERT_TRUE(frame.ok()) << frame.status();
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(frame->data.f32()[i], FromBf16(ToBf16(data.f32()[i])));
  }
  EXPECT_EQ(frame->labels, (std::vector<int32_t>{0, 1, 2}));
  auto fp32 =
      PendingFrame::Post(b, device, 0, FrameKind::kActivation, 2, 0, shape, 0);
  info.minibatch = 2;
  ASSERT_TRUE(SendFrame(a, device, 1, info, data, nullptr, nullptr, true).ok());
  auto refused = (*fp32)->Wait(absl::Now() + kWait, "stage 1");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  // (The exact-size transfer already tells them apart: half the bytes.)
  EXPECT_NE(refused.status().message().find("bytes"), std::string::npos)
      << refused.status();
}

TEST(FrameTest, UnexpectedShapeIsDataLossNamingBoth) {
  CpuDevice device;
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator a(hub, 0), b(hub, 1);
  auto pending = PendingFrame::Post(b, device, 0, FrameKind::kGradient, 3, 0,
                                    Shape({4, 3}), 0);
  ASSERT_TRUE(pending.ok());
  Tensor wrong = Iota(device, Shape({3, 4}), 0);
  FrameInfo info{FrameKind::kGradient, 3, 0, 0, 1};
  ASSERT_TRUE(SendFrame(a, device, 1, info, wrong, nullptr).ok());
  auto frame = (*pending)->Wait(absl::Now() + kWait, "stage 0 (rank 1)");
  ASSERT_EQ(frame.status().code(), absl::StatusCode::kDataLoss);
  const std::string m(frame.status().message());
  EXPECT_NE(
      m.find("stage 0 (rank 1) expected the gradient of stage 0 minibatch 3"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("[4, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
}

TEST(FrameTest, NothingSentTimesOutNamingThePeer) {
  CpuDevice device;
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator b(hub, 1);
  auto pending = PendingFrame::Post(b, device, 0, FrameKind::kActivation, 0, 0,
                                    Shape({2}), 0);
  ASSERT_TRUE(pending.ok());
  auto frame =
      (*pending)->Wait(absl::Now() + absl::Milliseconds(50), "stage 1");
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(frame.status().message().find("rank 0"), std::string::npos);
}

// With device channels (NCCL between GPUs; here their in-memory stand-in
// over the CPU device) the header goes over the communicator and the tensor,
// small or large, over the channel for its kind and pair of ranks; receives
// posted ahead complete one by one.
TEST(FrameTest, TensorsTravelOnDeviceChannels) {
  CpuDevice device;
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator a(hub, 0), b(hub, 1);
  auto channel_hub = std::make_shared<InMemoryChannelHub>();
  InMemoryDeviceChannels ca(channel_hub, 0), cb(channel_hub, 1);
  const std::vector<Shape> shapes = {Shape({4, 3}), Shape({256, 1024})};
  std::vector<std::unique_ptr<PendingFrame>> pending;
  for (int m = 0; m < 4; ++m) {
    auto p = PendingFrame::Post(b, device, 0, FrameKind::kActivation, m, 0,
                                shapes[m % 2], 4, &cb);
    ASSERT_TRUE(p.ok()) << p.status();
    pending.push_back(std::move(*p));
  }
  Tensor labels = Labels(device, 4);
  for (int m = 0; m < 4; ++m) {
    FrameInfo info{FrameKind::kActivation, m, 0, 0, 100 + m};
    auto sent = SendFrame(a, device, 1, info, Iota(device, shapes[m % 2], m),
                          &labels, &ca);
    ASSERT_TRUE(sent.ok()) << sent.status();
    ASSERT_TRUE((*sent)->Wait(absl::Now() + kWait).ok());
    // Frame m has arrived; later ones were posted but not sent yet.
    auto frame = pending[m]->Wait(absl::Now() + kWait, "rank 1");
    ASSERT_TRUE(frame.ok()) << frame.status();
    EXPECT_EQ(frame->info.version, 100 + m);
    EXPECT_EQ(frame->data.shape(), shapes[m % 2]);
    EXPECT_EQ(frame->data.f32()[frame->data.numel() - 1],
              m + frame->data.numel() - 1);
    EXPECT_EQ(frame->labels[3], 3);
  }
  {
    absl::MutexLock lock(&channel_hub->mu);
    EXPECT_EQ(channel_hub->sends, 4);  // Every tensor went by the channel.
  }
}

// Over Gloo a frame goes from the sender's buffer (header in its headroom)
// straight into the receiver's; frames posted before and after the send
// both arrive.
TEST(FrameTest, ManyFramesOverGlooInPlace) {
  LocalRendezvousStore store;
  std::vector<std::unique_ptr<GlooCommunicator>> comms(2);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        auto c = GlooCommunicator::Connect(&store, "frame/", r, 2, "127.0.0.1",
                                           kWait);
        ASSERT_TRUE(c.ok()) << c.status();
        comms[r] = std::move(*c);
      });
    }
    for (auto& t : threads) t.join();
  }
  ASSERT_TRUE(comms[0] && comms[1]);
  CpuDevice device;
  const Shape shape({64, 1024});
  constexpr int kFrames = 16;
  // Half the receives are posted before anything is sent.
  std::vector<std::unique_ptr<PendingFrame>> pending;
  for (int m = 0; m < kFrames / 2; ++m) {
    pending.push_back(*PendingFrame::Post(
        *comms[1], device, 0, FrameKind::kActivation, m, 0, shape, 64));
  }
  std::thread sender([&] {
    std::vector<std::unique_ptr<Work>> sends;
    Tensor labels = Labels(device, 64);
    for (int m = 0; m < kFrames; ++m) {
      FrameInfo info{FrameKind::kActivation, m, 0, 0, m};
      auto s = SendFrame(*comms[0], device, 1, info,
                         Iota(device, shape, 1000.0f * m), &labels);
      ASSERT_TRUE(s.ok()) << s.status();
      sends.push_back(std::move(*s));  // The tensor lives in the work.
    }
    for (auto& s : sends) EXPECT_TRUE(s->Wait(absl::Now() + kWait).ok());
  });
  for (int m = kFrames / 2; m < kFrames; ++m) {
    pending.push_back(*PendingFrame::Post(
        *comms[1], device, 0, FrameKind::kActivation, m, 0, shape, 64));
  }
  for (int m = 0; m < kFrames; ++m) {
    auto frame = pending[m]->Wait(absl::Now() + kWait, "rank 1");
    ASSERT_TRUE(frame.ok()) << frame.status();
    EXPECT_EQ(frame->info.version, m);
    EXPECT_EQ(frame->data.f32()[0], 1000.0f * m);
    EXPECT_EQ(frame->data.f32()[shape.numel() - 1],
              1000.0f * m + shape.numel() - 1);
    EXPECT_EQ(frame->labels[63], 3);
  }
  sender.join();
  const int64_t body = shape.numel() * 4;
  EXPECT_GE(comms[1]->bytes_received(), kFrames * body);

  // Abort (a StopJob) ends waits in progress promptly, on both the
  // one-transfer and the two-transfer path, and every later one.
  auto small = *PendingFrame::Post(*comms[1], device, 0, FrameKind::kGradient,
                                   100, 0, Shape({16}), 0);
  auto large = *PendingFrame::Post(*comms[1], device, 0, FrameKind::kGradient,
                                   101, 0, shape, 0);
  const absl::Time start = absl::Now();
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    comms[1]->Abort();
  });
  auto first = small->Wait(start + kWait, "rank 1");
  auto second = large->Wait(start + kWait, "rank 1");
  aborter.join();
  EXPECT_EQ(first.status().code(), absl::StatusCode::kCancelled)
      << first.status();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kCancelled)
      << second.status();
  EXPECT_NE(first.status().message().find("aborted"), std::string::npos);
  auto later = *PendingFrame::Post(*comms[1], device, 0, FrameKind::kGradient,
                                   102, 0, shape, 0);
  EXPECT_EQ(later->Wait(absl::Now() + kWait, "rank 1").status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace aqueduct
