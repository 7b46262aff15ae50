// Transport: bandwidth between two ranks on loopback as a ratio of raw Gloo
// send/recv of the same sizes, in the same run, for (a) pipeline frames
// (worker/runtime/frame.h: SendFrame from a tensor the device allocated,
// PendingFrame posted ahead into a tensor, header checked: exactly what
// stages do) and (b) the communicator's length-prefixed messages (fresh
// strings); and small-message round-trip latency. Ranks are threads of this
// process, each with its own Gloo context and CPU device.
//
//   transport_bench [--seconds-per-size 1] [--ahead 8]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/comm/gloo_communicator.h"
#include "common/comm/local_store.h"
#include "common/device/cpu_device.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "worker/runtime/frame.h"

namespace aqueduct {
namespace {

using Clock = std::chrono::steady_clock;

// A raw Gloo context between the two threads, for the baseline.
class RawStore final : public gloo::rendezvous::Store {
 public:
  explicit RawStore(LocalRendezvousStore* s) : s_(s) {}
  void set(const std::string& k, const std::vector<char>& v) override {
    (void)s_->Set(k, std::string(v.begin(), v.end()));
  }
  std::vector<char> get(const std::string& k) override {
    auto v = s_->Get(k, absl::Seconds(30));
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) (void)get(k);
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds&) override {
    wait(keys);
  }

 private:
  LocalRendezvousStore* s_;
};

int Main(int argc, char** argv) {
  double seconds_per_size = 1;
  int ahead = 8;  // Frames posted ahead by the receiver.
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--seconds-per-size") {
      (void)absl::SimpleAtod(argv[i + 1], &seconds_per_size);
    } else if (std::string(argv[i]) == "--ahead") {
      (void)absl::SimpleAtoi(argv[i + 1], &ahead);
    }
  }
  LocalRendezvousStore store;
  CpuDevice devices[2];
  std::vector<std::unique_ptr<GlooCommunicator>> comms(2);
  std::vector<std::shared_ptr<gloo::Context>> raw(2);
  {
    std::vector<std::thread> t;
    for (int r = 0; r < 2; ++r) {
      t.emplace_back([&, r] {
        comms[r] = *GlooCommunicator::Connect(&store, "aq/", r, 2, "127.0.0.1",
                                              absl::Seconds(30));
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(r, 2);
        RawStore rs(&store);
        gloo::rendezvous::PrefixStore prefixed("raw/", rs);
        ctx->connectFullMesh(prefixed, dev);
        raw[r] = ctx;
      });
    }
    for (auto& th : t) th.join();
  }
  const std::vector<size_t> sizes = {64 << 10, 256 << 10, 1 << 20,
                                     4 << 20,  16 << 20,  64 << 20};
  for (size_t size : sizes) {
    const int reps = std::max<int>(
        3, static_cast<int>(seconds_per_size * 1e9 / 4 / size));  // ~4 GB/s.
    // Rank 0 posts send(i) for i < reps, at most 4 outstanding, while
    // `receive` runs on another thread; bytes per second.
    auto stream = [&](const std::function<std::unique_ptr<Work>(int)>& send,
                      const std::function<void()>& receive) {
      const Clock::time_point start = Clock::now();
      std::thread receiver(receive);
      std::vector<std::unique_ptr<Work>> sends;
      for (int i = 0; i < reps; ++i) {
        sends.push_back(send(i));
        if (sends.size() > 4) {
          (void)sends.front()->Wait(absl::Now() + absl::Seconds(60));
          sends.erase(sends.begin());
        }
      }
      for (auto& s : sends) (void)s->Wait(absl::Now() + absl::Seconds(60));
      receiver.join();
      return reps * static_cast<double>(size) /
             std::chrono::duration<double>(Clock::now() - start).count();
    };
    // The length-prefixed path: fresh strings.
    auto run_prefixed = [&]() {
      return stream(
          [&](int i) {
            return comms[0]->Send(1, 1000 + i, std::string(size, 'x'));
          },
          [&] {
            for (int i = 0; i < reps; ++i) {
              (void)comms[1]
                  ->Recv(0, 1000 + i)
                  ->Wait(absl::Now() + absl::Seconds(60));
            }
          });
    };
    // Frames as a stage sends them: a tensor from the device per message,
    // receives posted `ahead` ahead (default 8), at most 4 sends outstanding.
    const Shape shape({static_cast<int64_t>(size / sizeof(float))});
    int64_t minibatch = 0;
    auto run_frames = [&]() {
      const int64_t first = minibatch;
      minibatch += reps;
      auto send = [&](int i) {
        const FrameInfo info{FrameKind::kActivation, first + i, 0, 0, 0};
        return *SendFrame(*comms[0], devices[0], 1, info,
                          *devices[0].Allocate(shape, DType::kF32), nullptr);
      };
      return stream(send, [&] {
        std::vector<std::unique_ptr<PendingFrame>> posted;
        int next_post = 0;
        for (int i = 0; i < reps; ++i) {
          for (; next_post < reps && next_post < i + ahead; ++next_post) {
            posted.push_back(*PendingFrame::Post(
                *comms[1], devices[1], 0, FrameKind::kActivation,
                first + next_post, 0, shape, 0));
          }
          auto frame = posted[i]->Wait(absl::Now() + absl::Seconds(60),
                                       "transport_bench");
          if (!frame.ok()) {
            std::fprintf(stderr, "%s\n", frame.status().ToString().c_str());
            std::exit(1);
          }
          posted[i].reset();
        }
      });
    };
    // Raw Gloo: preallocated buffers, unbound send/recv.
    auto run_raw = [&]() {
      std::vector<char> src(size, 'x'), dst(size);
      const Clock::time_point start = Clock::now();
      std::thread receiver([&] {
        auto buf = raw[1]->createUnboundBuffer(dst.data(), dst.size());
        for (int i = 0; i < reps; ++i) {
          buf->recv(0, 5000 + i);
          buf->waitRecv();
        }
      });
      auto buf = raw[0]->createUnboundBuffer(src.data(), src.size());
      for (int i = 0; i < reps; ++i) {
        buf->send(1, 5000 + i);
        buf->waitSend();
      }
      receiver.join();
      return reps * static_cast<double>(size) /
             std::chrono::duration<double>(Clock::now() - start).count();
    };
    // Alternate, best of three each, to share the machine's noise.
    double prefixed = 0, frames = 0, rawbw = 0;
    for (int round = 0; round < 3; ++round) {
      rawbw = std::max(rawbw, run_raw());
      frames = std::max(frames, run_frames());
      prefixed = std::max(prefixed, run_prefixed());
    }
    std::printf(
        "{\"bytes\":%zu,\"frames_gb_per_s\":%.3f,\"length_prefixed_gb_per_"
        "s\":%.3f,\"raw_gloo_gb_per_s\":%.3f,\"frames_ratio\":%.3f,"
        "\"length_prefixed_ratio\":%.3f}\n",
        size, frames / 1e9, prefixed / 1e9, rawbw / 1e9, frames / rawbw,
        prefixed / rawbw);
    std::fflush(stdout);
  }
  // Small-message round trip (8 bytes), median of 2,000.
  std::vector<double> rtt;
  std::thread echo([&] {
    for (int i = 0; i < 2000; ++i) {
      auto m =
          comms[1]->Recv(0, 900000 + i)->Wait(absl::Now() + absl::Seconds(10));
      (void)comms[1]
          ->Send(0, 950000 + i, *m)
          ->Wait(absl::Now() + absl::Seconds(10));
    }
  });
  for (int i = 0; i < 2000; ++i) {
    const Clock::time_point t0 = Clock::now();
    auto sent = comms[0]->Send(1, 900000 + i, "12345678");
    (void)comms[0]->Recv(1, 950000 + i)->Wait(absl::Now() + absl::Seconds(10));
    (void)sent->Wait(absl::Now() + absl::Seconds(10));
    rtt.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  echo.join();
  std::sort(rtt.begin(), rtt.end());
  std::printf("{\"round_trip_8_bytes_us_p50\":%.1f,\"p99\":%.1f}\n",
              rtt[rtt.size() / 2], rtt[rtt.size() * 99 / 100]);
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
