# Sourced by benchmarks that run the daemons (tests/bench/*.sh): BIN, a
# bazel-bin with coordinator/coordinator, worker/worker and client/aq
# (built with --config=opt when not given); `tmp`, a directory removed on
# exit, when every pid in `pids` is killed; and wait_healthy.
if [ -z "${BIN:-}" ]; then
  bazel build --config=opt //coordinator:coordinator //worker:worker //client:aq >/dev/null 2>&1
  BIN=bazel-bin
fi
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# wait_healthy ADDRESS N: up to 20 s until N workers of the coordinator at
# ADDRESS are HEALTHY.
wait_healthy() {
  for _ in $(seq 100); do
    [ "$("$BIN/client/aq" workers --coordinator "$1" --output json |
      grep -o '"WORKER_HEALTHY"' | wc -l)" -ge "$2" ] && return 0
    sleep 0.2
  done
  return 1
}
