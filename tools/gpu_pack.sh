#!/usr/bin/env bash
# Builds the GPU tests, benchmarks and daemons here (the CUDA toolkit, no
# GPU) and packs them, with the Debian shared libraries they load, into
# .gpu/aq-gpu.tar.xz (git ignores .gpu/), for a machine that has a GPU,
# the NVIDIA driver and the CUDA libraries but none of Debian's packages.
# tools/gpu_device_run.sh unpacks and runs it there (docs/gpu.md).
#
# The CUDA libraries (cudart, cuBLAS, cuBLASLt, NCCL) and glibc are left
# out: the GPU machine's own are used.
#
# Usage: tools/gpu_pack.sh   (then: device run --carry .gpu
#                              'bash tools/gpu_device_run.sh')
set -euo pipefail
cd "$(dirname "$0")/.."

tests=(//common/device/cuda:kernels_test //common/device/cuda:cuda_device_test
  //common/comm/nccl:nccl_test //worker:device_parity_test
  //worker:pipeline_test)
binaries=(//tests/bench:mlp_bench //tests/bench:nccl_bench //client:aq
  //coordinator:coordinator //worker:worker //tests/bench:schedule_bench)
bazel build "${tests[@]}" "${binaries[@]}"

stage=/tmp/aq-gpu-stage
rm -rf "$stage" && mkdir -p .gpu "$stage/bin" "$stage/lib" "$stage/fortunes"
paths=()
for label in "${tests[@]}" "${binaries[@]}"; do
  paths+=("bazel-bin/$(echo "${label#//}" | tr ':' '/')")
done
cp -L "${paths[@]}" "$stage/bin/"
chmod -R u+w "$stage"

# Every shared library the binaries load (Bazel's own _solib ones for the
# tests too, resolved from where Bazel built them), less glibc and CUDA's.
skip='^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libnccl)[.]so'
for bin in "${paths[@]}"; do
  ldd "$bin" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  cp -L "$path" "$stage/lib/$name"
done

# The GPT example's text (Debian's fortunes), for the GPT run there.
cp /usr/share/games/fortunes/{cookie,computers,songs-poems,definitions,people,science} \
  "$stage/fortunes/"

tar -C "$stage" -cJf "$PWD/.gpu/aq-gpu.tar.xz" .
ls -la .gpu/aq-gpu.tar.xz
du -sh "$stage"/bin "$stage"/lib
