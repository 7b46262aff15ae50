#!/usr/bin/env bash
# The plan's predicted memory per worker against what the workers measured,
# for a job run through the daemons: a local coordinator and WORKERS
# workers (opt build), the spec with max_steps STEPS, then per stage the
# plan's predicted_memory_bytes against the measured bytes: the peaks of
# stashed weight versions and of saved activations (aq status --output
# json), plus the model state whose size is exact (weights, gradients and
# the optimizer's moments: (2 + optimizer factor) x the stage's parameter
# bytes, counted from the trained model's file).
#
#   tests/bench/plan_memory.sh [SPEC=examples/gpt_fortunes.textproto] [STEPS=300]
set -euo pipefail
cd "$(dirname "$0")/../.."
spec_in="${1:-examples/gpt_fortunes.textproto}"
steps="${2:-300}"
deploy/setup.sh
bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker \
  >/dev/null 2>&1 ||
  bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
state=$(mktemp -d /tmp/aq-plan-memory.XXXXXX)
threads=1
# shellcheck source=tests/bench/cluster_lib.sh
. tests/bench/cluster_lib.sh
trap stop_cluster EXIT
workers=$(sed -n 's/^ *workers: *\([0-9]*\).*/\1/p' "$spec_in" | head -1)
spec="$state/spec.textproto"
sed -e "s/^max_steps: .*/max_steps: $steps/" -e "s/^eval_every: .*//" \
  "$spec_in" >"$spec"
start_coordinator 127.0.0.1:0
for w in $(seq "$workers"); do start_worker "$w"; done
wait_healthy "$workers"
"$bin/client/aq" submit "$spec" --wait --coordinator "$address" >/dev/null
id=$("$bin/client/aq" jobs --coordinator "$address" | awk 'END { print $1 }')
"$bin/client/aq" weights "$id" -o "$state/model.safetensors" \
  --coordinator "$address" >/dev/null
"$bin/client/aq" status "$id" --output json --coordinator "$address" \
  >"$state/status.json"
factor=0
grep -q "adam *{" "$spec" && factor=2
grep -q "momentum: *[1-9.]" "$spec" && factor=1
python3 - "$state/status.json" "$state/model.safetensors" "$factor" <<'PY'
import json, re, struct, sys
status = json.load(open(sys.argv[1]))
with open(sys.argv[2], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
factor = float(sys.argv[3])
layer_bytes = {}
for name, t in header.items():
    if name == "__metadata__":
        continue
    layer = int(re.match(r"layers\.(\d+)\.", name).group(1))
    size = t["data_offsets"][1] - t["data_offsets"][0]
    layer_bytes[layer] = layer_bytes.get(layer, 0) + size
mib = 1 << 20
print("| stage | layers | depth | predicted | measured | predicted / measured "
      "| of which stashed weights, activations |")
print("|---|---|---|---|---|---|---|")
for plan, st in zip(status["plan"]["stages"], status["stages"]):
    first, end = plan.get("first_layer", 0), plan["end_layer"]
    params = sum(b for l, b in layer_bytes.items() if first <= l < end)
    weights = int(st.get("stashed_weight_bytes", 0))
    acts = int(st.get("stashed_activation_bytes", 0))
    measured = (2 + factor) * params + weights + acts
    predicted = plan["predicted_memory_bytes"]
    print(f"| {st.get('stage', 0)} | [{first}, {end}) | "
          f"{plan.get('warmup_depth', 0)} | {predicted / mib:.2f} MiB | "
          f"{measured / mib:.2f} MiB | {predicted / measured:.3f} | "
          f"{weights / mib:.2f}, {acts / mib:.2f} MiB |")
PY
