// main() for a fuzz binary built without libFuzzer (the normal gcc build,
// e.g. `bazel run //tests/fuzz:spec_fuzzer -- FILE...`): runs each file
// once through LLVMFuzzerTestOneInput, as libFuzzer does when given files,
// to reproduce a crash under a debugger or another compiler.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "%s: cannot open\n", argv[i]);
      return 2;
    }
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size());
    std::printf("%s: %zu bytes, ran\n", argv[i], bytes.size());
  }
  return 0;
}
