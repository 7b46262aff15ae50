// Transport: bandwidth between two ranks on loopback as a ratio of raw Gloo
// send/recv of the same sizes, in the same run, for
//   (a) frames as stages use them (worker/runtime/frame.h: SendFrame from a
//       tensor the device allocated per message, PendingFrame posted
//       `--ahead` ahead, header checked, at most `--in-flight` sends
//       outstanding; both default to 2, what a stage's window of 8 ops
//       holds per peer and kind in 1F1B);
//   (b) frames one at a time, as raw Gloo is driven below: one tensor sent
//       again and again, each send waited for, one receive posted at a time
//       (the device hands the receive the block the last frame freed);
//   (c) the communicator's length-prefixed messages (fresh strings);
// and small-message round-trip latency. Ranks are threads of this process,
// each with its own Gloo context and CPU device.
//
// This VM's loopback bandwidth moves by tens of percent from one second to
// the next, so each size runs `--rounds` short rounds, each timing every
// mode back to back in a rotating order; a ratio is the median over rounds
// of (mode / raw Gloo) within the round.
//
//   transport_bench [--seconds-per-size 2] [--rounds 11] [--ahead 2]
//                   [--in-flight 2]
//                   [--sizes BYTES,BYTES,...]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
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

// The machine's CPU jiffies taken by the hypervisor (steal) and in all,
// from /proc/stat's aggregate line; zeros where there is none.
struct CpuJiffies {
  uint64_t steal = 0, total = 0;
};
CpuJiffies ReadCpuJiffies() {
  CpuJiffies j;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  stat >> cpu;
  if (cpu != "cpu") return j;
  for (int field = 0; field < 8; ++field) {
    uint64_t v = 0;
    if (!(stat >> v)) break;
    j.total += v;
    if (field == 7) j.steal = v;
  }
  return j;
}
double StealPercent(const CpuJiffies& a, const CpuJiffies& b) {
  return b.total > a.total ? 100.0 * static_cast<double>(b.steal - a.steal) /
                                 static_cast<double>(b.total - a.total)
                           : 0.0;
}

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
  double seconds_per_size = 2;
  int rounds = 11;
  int ahead = 2;      // Frames posted ahead by the receiver.
  int in_flight = 2;  // Frames sent and not yet complete.
  std::vector<size_t> sizes = {64 << 10, 256 << 10, 1 << 20,
                               4 << 20,  16 << 20,  64 << 20};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--seconds-per-size") {
      (void)absl::SimpleAtod(argv[i + 1], &seconds_per_size);
    } else if (std::string(argv[i]) == "--rounds") {
      (void)absl::SimpleAtoi(argv[i + 1], &rounds);
    } else if (std::string(argv[i]) == "--sizes") {
      sizes.clear();
      for (absl::string_view part : absl::StrSplit(argv[i + 1], ',')) {
        size_t bytes = 0;
        if (!absl::SimpleAtoi(part, &bytes) || bytes < 4 || bytes % 4 != 0) {
          std::fprintf(stderr, "--sizes: '%s' is not a multiple of 4 bytes\n",
                       std::string(part).c_str());
          return 2;
        }
        sizes.push_back(bytes);
      }
    } else if (std::string(argv[i]) == "--in-flight") {
      (void)absl::SimpleAtoi(argv[i + 1], &in_flight);
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
  for (size_t size : sizes) {
    // Four modes per round at ~3 GB/s.
    const int reps = std::max<int>(
        3, static_cast<int>(seconds_per_size / rounds / 4 * 3e9 / size));
    // Rank 0 posts send(i) for i < reps, at most `outstanding` in flight,
    // while `receive` runs on another thread; bytes per second.
    auto stream = [&](const std::function<std::unique_ptr<Work>(int)>& send,
                      const std::function<void()>& receive,
                      size_t outstanding = 4) {
      const Clock::time_point start = Clock::now();
      std::thread receiver(receive);
      std::vector<std::unique_ptr<Work>> sends;
      for (int i = 0; i < reps; ++i) {
        sends.push_back(send(i));
        if (sends.size() >= outstanding) {
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
    // receives posted `ahead` ahead, at most `in_flight` sends outstanding.
    const Shape shape({static_cast<int64_t>(size / sizeof(float))});
    // Memory a sender has never written reads as the kernel's shared zero
    // page, which the socket copy finds in cache: raw Gloo's source is
    // written, so the blocks frames are sent from must be too. Write every
    // block the rounds below will take from the sender's device (at most
    // in_flight + 1 at a time), then hand them back to its cache.
    {
      std::vector<Tensor> blocks;
      for (int i = 0; i < std::max(6, in_flight + 2); ++i) {
        blocks.push_back(*devices[0].Allocate(shape, DType::kF32));
        std::fill(blocks.back().f32(), blocks.back().f32() + shape.numel(),
                  1.0f + static_cast<float>(i));
      }
    }
    int64_t minibatch = 0;
    auto run_frames = [&]() {
      const int64_t first = minibatch;
      minibatch += reps;
      auto send = [&](int i) {
        const FrameInfo info{FrameKind::kActivation, first + i, 0, 0, 0};
        return *SendFrame(*comms[0], devices[0], 1, info,
                          *devices[0].Allocate(shape, DType::kF32), nullptr);
      };
      return stream(
          send,
          [&] {
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
          },
          static_cast<size_t>(std::max(1, in_flight)));
    };
    // Frames one at a time: the same tensor each time, one receive posted
    // at a time, each send waited for before the next.
    Tensor sent = *devices[0].Allocate(shape, DType::kF32);
    auto run_frames_serial = [&]() {
      const int64_t first = minibatch;
      minibatch += reps;
      auto send = [&](int i) {
        const FrameInfo info{FrameKind::kActivation, first + i, 0, 0, 0};
        return *SendFrame(*comms[0], devices[0], 1, info, sent, nullptr);
      };
      return stream(
          send,
          [&] {
            for (int i = 0; i < reps; ++i) {
              auto posted = *PendingFrame::Post(*comms[1], devices[1], 0,
                                                FrameKind::kActivation,
                                                first + i, 0, shape, 0);
              auto frame = posted->Wait(absl::Now() + absl::Seconds(60),
                                        "transport_bench");
              if (!frame.ok()) {
                std::fprintf(stderr, "%s\n", frame.status().ToString().c_str());
                std::exit(1);
              }
            }
          },
          1);
    };
    // Raw Gloo: preallocated buffers, unbound send/recv.
    std::vector<char> src(size, 'x'), dst(size);
    auto run_raw = [&]() {
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
    // Rounds of all four modes back to back, the order rotating, so that
    // each ratio compares measurements a fraction of a second apart.
    const std::vector<std::function<double()>> modes = {
        run_raw, run_frames, run_frames_serial, run_prefixed};
    std::vector<std::vector<double>> rate(modes.size()), ratio(modes.size());
    const CpuJiffies before = ReadCpuJiffies();
    for (int round = 0; round < rounds; ++round) {
      std::vector<double> r(modes.size());
      for (size_t k = 0; k < modes.size(); ++k) {
        const size_t m = (k + static_cast<size_t>(round)) % modes.size();
        r[m] = modes[m]();
      }
      for (size_t m = 0; m < modes.size(); ++m) {
        rate[m].push_back(r[m] / 1e9);
        ratio[m].push_back(r[m] / r[0]);
      }
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    auto low = [](const std::vector<double>& v) {
      return *std::min_element(v.begin(), v.end());
    };
    std::printf(
        "{\"bytes\":%zu,\"rounds\":%d,\"raw_gloo_gb_per_s\":%.3f,"
        "\"frames_gb_per_s\":%.3f,\"frames_ratio\":%.3f,"
        "\"frames_ratio_min\":%.3f,\"frames_serial_gb_per_s\":%.3f,"
        "\"frames_serial_ratio\":%.3f,\"frames_serial_ratio_min\":%.3f,"
        "\"length_prefixed_gb_per_s\":%.3f,\"length_prefixed_ratio\":%.3f,"
        "\"steal_percent\":%.1f}\n",
        size, rounds, median(rate[0]), median(rate[1]), median(ratio[1]),
        low(ratio[1]), median(rate[2]), median(ratio[2]), low(ratio[2]),
        median(rate[3]), median(ratio[3]),
        StealPercent(before, ReadCpuJiffies()));
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
