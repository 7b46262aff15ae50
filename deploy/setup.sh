#!/usr/bin/env bash
# Installs, from Debian's archive, everything Aqueduct needs to build, test
# and run on a Debian bookworm machine. Idempotent, and silent when all is
# already installed. Set AQ_SETUP_EXTRA to add packages (e.g. python3-torch
# for the benchmarks).
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java bazel-platforms
  g++ libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libgtest-dev libgmock-dev libopenblas-dev
  libgloo-dev zlib1g-dev dataset-fashion-mnist
  # Subword tokenizers: SentencePiece's spm_* tools (aq tokenize).
  sentencepiece
  # Text for the language-model examples and tests: plain UTF-8 files in
  # /usr/share/games/fortunes/ (cookie, computers, songs-poems, ...; the
  # .dat indexes and .u8 symlinks beside them are not for training).
  fortunes
  # HTTP for the daemons' Prometheus metrics and the coordinator's dashboard:
  # libmicrohttpd serves; cpp-httplib is the tests' HTTP client.
  libmicrohttpd-dev libcpp-httplib-dev libbrotli-dev libssl-dev
  # Tests of issue 15: network namespaces and link shaping (multi-host),
  # the metrics parser, the dashboard in a headless browser, a one-node
  # Slurm cluster and offline Kubernetes manifest checks.
  iproute2 python3-prometheus-client chromium-headless-shell
  munge slurmctld slurmd slurm-client python3-kubernetes python3-yaml
  # Issue 22's fault tests: the coordinator's wall clock stepped
  # (libfaketime).
  faketime
)
# shellcheck disable=SC2206
packages+=(${AQ_SETUP_EXTRA:-})

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
    grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "setup: installing ${missing[*]}" >&2
$sudo apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" \
  >/tmp/aqueduct-apt.log 2>&1 || {
  echo "setup: apt-get install failed; see /tmp/aqueduct-apt.log" >&2
  tail -20 /tmp/aqueduct-apt.log >&2
  exit 1
}
