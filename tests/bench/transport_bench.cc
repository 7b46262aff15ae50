// Transport: Send/Recv bandwidth between two ranks on loopback through
// GlooCommunicator (what the pipeline uses: a length, then the bytes), as a
// ratio of raw Gloo send/recv of the same sizes over the same connection, in
// the same run; and small-message round-trip latency. Ranks are threads of
// this process, each with its own Gloo context.
//
//   transport_bench [--seconds-per-size 1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/comm/gloo_communicator.h"
#include "common/comm/local_store.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

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
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--seconds-per-size") {
      (void)absl::SimpleAtod(argv[i + 1], &seconds_per_size);
    }
  }
  LocalRendezvousStore store;
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
    // Aqueduct's communicator: rank 0 sends `reps` messages, rank 1 receives
    // (exact: sizes known on both sides, as pipeline frames are).
    auto run_aq = [&](bool exact) {
      const Clock::time_point start = Clock::now();
      std::thread receiver([&] {
        for (int i = 0; i < reps; ++i) {
          auto r = exact ? comms[1]->RecvExact(0, 1000 + i, size)
                         : comms[1]->Recv(0, 1000 + i);
          (void)r->Wait(absl::Now() + absl::Seconds(60));
        }
      });
      std::vector<std::unique_ptr<SendWork>> sends;
      for (int i = 0; i < reps; ++i) {
        sends.push_back(
            exact ? comms[0]->SendExact(1, 1000 + i, std::string(size, 'x'))
                  : comms[0]->Send(1, 1000 + i, std::string(size, 'x')));
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
    double aq = 0, exact = 0, rawbw = 0;
    for (int round = 0; round < 3; ++round) {
      rawbw = std::max(rawbw, run_raw());
      aq = std::max(aq, run_aq(false));
      exact = std::max(exact, run_aq(true));
    }
    std::printf(
        "{\"bytes\":%zu,\"exact_gb_per_s\":%.3f,\"length_prefixed_gb_per_s\":"
        "%.3f,\"raw_gloo_gb_per_s\":%.3f,\"exact_ratio\":%.3f,"
        "\"length_prefixed_ratio\":%.3f}\n",
        size, exact / 1e9, aq / 1e9, rawbw / 1e9, exact / rawbw, aq / rawbw);
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
