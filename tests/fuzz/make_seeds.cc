// Writes the fuzz seeds that the real encoders make, under a corpus
// directory (tests/fuzz/corpus): frames as SendFrame puts them on the wire
// (each after the expectation bytes of frame_entry.cc that make the
// receiver expect it), JSON forms of job specs, and a safetensors file with
// a tensor of every dtype. Other seeds are copied from where the real
// programs wrote them (corpus/README.md).
//
// Usage: make_seeds CORPUS_DIR [SPEC.textproto...]
//   (bazel run //tests/fuzz:make_seeds -- $PWD/tests/fuzz/corpus
//    $PWD/examples/fmnist_mlp.textproto)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/comm/in_memory.h"
#include "common/comm/in_memory_channels.h"
#include "common/device/cpu_device.h"
#include "common/safetensors.h"
#include "google/protobuf/util/json_util.h"
#include "pipeline/spec.h"
#include "tests/fuzz/entries.h"
#include "worker/runtime/frame.h"

namespace aqueduct {
namespace fuzz {
namespace {

namespace fs = std::filesystem;

bool Write(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "%s: cannot write\n", path.c_str());
    return false;
  }
  std::printf("%s: %zu bytes\n", path.c_str(), bytes.size());
  return true;
}

struct FrameSeed {
  const char* name;
  FrameKind kind;
  int64_t minibatch;
  int microbatch;
  std::vector<int64_t> dims;  // Each < 9, at most 4 (frame_entry.cc).
  int labels;                 // < 17.
  bool channels;
};

// The expectation bytes that make frame_entry.cc's receiver expect `s`.
std::string Expectation(const FrameSeed& s) {
  std::string e(kFrameExpectationBytes, '\0');
  e[0] = s.channels ? 1 : 0;
  e[1] = static_cast<char>(static_cast<int>(s.kind) - 1);
  e[2] = static_cast<char>(s.minibatch);
  e[3] = static_cast<char>(s.microbatch);
  e[4] = static_cast<char>(s.dims.size());
  for (size_t d = 0; d < s.dims.size(); ++d) {
    e[5 + d] = static_cast<char>(s.dims[d]);
  }
  e[9] = static_cast<char>(s.labels);
  return e;
}

// What SendFrame puts on the communicator for `s`.
std::string Encode(const FrameSeed& s) {
  static CpuDevice device;
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator sender(hub, 0), receiver(hub, 1);
  auto channel_hub = std::make_shared<InMemoryChannelHub>();
  InMemoryDeviceChannels channels(channel_hub, 0);
  Tensor data = *device.Allocate(Shape(s.dims), DType::kF32);
  for (int64_t i = 0; i < data.numel(); ++i) data.f32()[i] = 0.5f * i;
  Tensor labels = *device.Allocate(Shape({s.labels}), DType::kI32);
  for (int i = 0; i < s.labels; ++i) labels.i32()[i] = i % 10;
  const FrameInfo info{s.kind, s.minibatch, s.microbatch, 0, 3};
  auto sent =
      SendFrame(sender, device, 1, info, data, s.labels > 0 ? &labels : nullptr,
                s.channels ? &channels : nullptr);
  if (!sent.ok()) {
    std::fprintf(stderr, "%s: %s\n", s.name, sent.status().ToString().c_str());
    return "";
  }
  const uint64_t tag = FrameTag(s.kind, s.minibatch, s.microbatch);
  auto got = receiver.Recv(0, tag)->Wait(absl::Now() + absl::Seconds(10));
  return got.ok() ? *got : "";
}

bool WriteFrames(const fs::path& dir) {
  using K = FrameKind;
  const FrameSeed seeds[] = {
      {"seed_activation_labels", K::kActivation, 7, 2, {4, 3}, 4, false},
      {"seed_gradient", K::kGradient, 3, 0, {2, 8}, 0, false},
      {"seed_tied_gradient", K::kTiedGradient, 1, 0, {5, 2}, 0, false},
      {"seed_activation_4d", K::kActivation, 0, 1, {2, 1, 3, 3}, 2, false},
      {"seed_channels_activation", K::kActivation, 9, 3, {4, 3}, 4, true},
      {"seed_channels_gradient", K::kGradient, 2, 1, {8}, 0, true},
  };
  bool ok = true;
  for (const FrameSeed& s : seeds) {
    const std::string wire = Encode(s);
    ok = !wire.empty() &&
         Write(dir / (std::string(s.name) + ".frame"), Expectation(s) + wire) &&
         ok;
  }
  return ok;
}

bool WriteJsonSpec(const fs::path& dir, const std::string& path) {
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(path);
  std::string json;
  if (!spec.ok() ||
      !google::protobuf::util::MessageToJsonString(*spec, &json).ok()) {
    std::fprintf(stderr, "%s: not a spec\n", path.c_str());
    return false;
  }
  return Write(dir / ("seed_" + fs::path(path).stem().string() + ".json"),
               json);
}

// A tensor of each dtype, an empty one and metadata.
bool WriteSafetensors(const fs::path& dir) {
  SafetensorsFile file;
  file.metadata = {{"format", "pt"}, {"producer", "make_seeds"}};
  auto add = [&](const char* name, DType dtype, std::vector<int64_t> dims) {
    HostTensor t;
    t.dtype = dtype;
    t.shape = Shape(std::move(dims));
    t.data.resize(t.shape.numel() * DTypeSize(dtype));
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = i * 7 % 251;
    file.tensors[name] = std::move(t);
  };
  add("f32", DType::kF32, {2, 3});
  add("bf16", DType::kBF16, {4});
  add("f16", DType::kF16, {2, 2});
  add("i32", DType::kI32, {3});
  add("empty", DType::kF32, {0, 5});
  add("scalar", DType::kF32, {});
  absl::StatusOr<std::string> bytes = SerializeSafetensors(file);
  return bytes.ok() && Write(dir / "seed_every_dtype.safetensors", *bytes);
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_seeds CORPUS_DIR [SPEC.textproto...]\n");
    return 2;
  }
  const fs::path corpus = argv[1];
  for (const char* target : {"frame", "spec", "safetensors"}) {
    fs::create_directories(corpus / target);
  }
  bool ok = WriteFrames(corpus / "frame");
  ok = WriteSafetensors(corpus / "safetensors") && ok;
  for (int i = 2; i < argc; ++i) {
    ok = WriteJsonSpec(corpus / "spec", argv[i]) && ok;
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace fuzz
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::fuzz::Main(argc, argv); }
