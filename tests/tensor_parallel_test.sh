#!/usr/bin/env bash
# Process-level test of tensor groups through the real daemons: a small GPT
# (head tied to its embedding across stages) trained by 2, 4 and 8 worker
# daemons as pipeline x tensor = 1x2, 1x4 and 2x2 with each recomputation
# mode, and sequence-parallel as 1x4 and as pipeline x data x tensor =
# 2x2x2, has the per-step losses of `aq train-local` within 1e-5
# (relative), and its trained model (gathered whole from the tensor
# groups) equals train-local's within 1e-5; a checkpoint written by a 1x2 job (whole
# tensors) resumes under 2x2 and under no tensor groups at all; a degree
# that does not divide the heads is refused naming the layer.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
data_dir="$(dirname "$harness")/data"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --state_dir "$tmp/cstate" --heartbeat_interval_ms 100 \
  --checkpoint_root "$tmp" >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for w in t1 t2 t3 t4 t5 t6 t7 t8; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 20000 \
    --checkpoint_root "$tmp" >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
done
wait_until 30 eval '[ "$(healthy_count)" -eq 8 ]' || { fail "workers: $(aq workers)"; exit 1; }

cat >"$tmp/gpt.textproto" <<'SPEC'
name: "tensor-groups"
model {
  layers { token_embedding { vocab_size: 128 dim: 16 } }
  layers { position_embedding { context: 8 dim: 16 } }
  layers { transformer_block { dim: 16 heads: 4 dropout: 0.1 } }
  layers { transformer_block { dim: 16 heads: 4 dropout: 0.1 } }
  layers { layer_norm { normalized_shape: 16 } }
  layers { linear { in_features: 16 out_features: 128 bias: false } tie_weight_to: 0 }
}
data { text { files: "/usr/share/games/fortunes/cookie" context: 8 tokenizer: "chars" } }
optimizer { sgd { lr: 0.1 momentum: 0.9 } }
batch_size: 8
max_steps: 12
seed: 3
SPEC
"$AQ" train-local "$tmp/gpt.textproto" --save_weights "$tmp/local.safetensors" \
  --output json >"$tmp/local.json" 2>"$tmp/local.err" ||
  { fail "train-local: $(cat "$tmp/local.err")"; exit 1; }

# compare NAME JOB_JSON [WEIGHTS]: per-step losses, and the model, against
# train-local's.
compare() {
  python3 - "$tmp/local.json" "$2" "$1" "$tmp/local.safetensors" "${3:-}" <<'PY'
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = struct.unpack(f"<{(b - a) // 4}f", raw[8 + n + a:8 + n + b])
    return out
local = json.load(open(sys.argv[1]))["loss"]
job = json.load(open(sys.argv[2]))
assert job["state"] == "JOB_SUCCEEDED", job.get("reason")
curve = {int(p.get("minibatch", 0)): p["loss"] for p in job["loss_curve"]}
worst = max(abs(curve[m] - local[m]) / abs(local[m]) for m in curve)
note = f"{sys.argv[3]}: {len(curve)} steps, worst loss difference {worst:.2e}"
ok = worst <= 1e-5
if sys.argv[5]:
    want, got = tensors(sys.argv[4]), tensors(sys.argv[5])
    assert sorted(want) == sorted(got), (sorted(want), sorted(got))
    rel = 0.0
    for name in want:
        d = sum((a - b) ** 2 for a, b in zip(want[name], got[name])) ** 0.5
        norm = sum(a * a for a in want[name]) ** 0.5
        rel = max(rel, d / max(norm, 1e-12))
    note += f", worst weight difference {rel:.2e} over {len(want)} tensors"
    ok = ok and rel <= 1e-5
print(note)
sys.exit(0 if ok else 1)
PY
}

# run NAME WORKERS DEGREE RECOMPUTE [EXTRA [PIPELINE]]: the job against
# train-local (PIPELINE: more fields of its pipeline section).
run() {
  local name=$1 workers=$2 degree=$3 recompute=$4 extra=${5:-} more=${6:-} id
  sed "s|^seed: 3$|seed: 3\npipeline { workers: $workers schedule: \"1f1b_flush\" microbatches: 4 tensor_parallel: $degree recompute: \"$recompute\" $more }\n$extra|" \
    "$tmp/gpt.textproto" >"$tmp/$name.textproto"
  id=$(aq submit "$tmp/$name.textproto" ${PROFILE:+--profile "$PROFILE"} --wait \
    --output json 2>"$tmp/$name.err" | grep -o 'job-[0-9a-f-]*' | head -1)
  [ -n "$id" ] || { fail "$name: $(cat "$tmp/$name.err")"; return; }
  aq status "$id" --output json >"$tmp/$name.json"
  aq weights "$id" -o "$tmp/$name.safetensors" >/dev/null 2>&1 ||
    fail "$name: no trained model"
  compare "$name" "$tmp/$name.json" "$tmp/$name.safetensors" ||
    fail "$name: differs from train-local"
  python3 - "$tmp/$name.json" "$degree" "$recompute" <<'PY' || fail "$name: the plan"
import json, sys
plan = json.load(open(sys.argv[1]))["plan"]
for s in plan["stages"]:
    assert int(s.get("tensor_parallel", 1)) == int(sys.argv[2]), s
    assert s.get("recompute", "none") == (sys.argv[3] or "none"), s
    assert len(s["worker_ranks"]) % int(sys.argv[2]) == 0, s
print(f"  plan: {[len(s['worker_ranks']) for s in plan['stages']]} ranks per stage, "
      f"{[int(s.get('replicas', 1)) for s in plan['stages']]} replicas")
PY
  echo "$id" >"$tmp/$name.id"
}
run tp2 2 2 none "checkpoint { dir: \"$tmp/ckpt\" every_steps: 6 }"
run tp4 4 4 full
run pp2tp2 4 2 selective
# Sequence parallelism, and all 8 daemons.
run sp_tp4 4 4 none "" "sequence_parallel: true"
# Planned from a profile measured once (tests/data/), so that the plan does
# not depend on the build's speed (a sanitizer's changes what a measured
# profile favours): pipeline x data x tensor = 2x2x2.
PROFILE="$data_dir/gpt_tensor_groups_profile.json" \
  run sp_8 8 2 full "" "sequence_parallel: true"
python3 - "$tmp/sp_8.json" <<'PY' || fail "sp_8: not 2x2x2"
import json, sys
stages = json.load(open(sys.argv[1]))["plan"]["stages"]
assert [int(s.get("replicas", 1)) for s in stages] == [2, 2], stages
assert sorted(r for s in stages for r in s["worker_ranks"]) == list(range(8))
PY

# The 1x2 job's checkpoint holds whole tensors: resumed on 2x2 and on 2
# plain stages, the losses after it are train-local's.
ck=$(cat "$tmp/tp2.id" 2>/dev/null)
resume() {
  local name=$1 workers=$2 degree=$3 id
  sed "s|^seed: 3$|seed: 3\npipeline { workers: $workers schedule: \"1f1b_flush\" microbatches: 4 tensor_parallel: $degree }|" \
    "$tmp/gpt.textproto" >"$tmp/$name.textproto"
  id=$(aq submit "$tmp/$name.textproto" --resume "$ck" --wait --output json 2>"$tmp/$name.err" |
    grep -o 'job-[0-9a-f-]*' | head -1)
  [ -n "$id" ] || { fail "$name: $(cat "$tmp/$name.err")"; return; }
  aq status "$id" --output json >"$tmp/$name.json"
  compare "$name" "$tmp/$name.json" || fail "$name: differs from train-local after the checkpoint"
}
if [ -n "$ck" ]; then
  resume resumed_pp2tp2 4 2
  resume resumed_plain 2 1
fi

# Heads 4 cannot be split 3 ways: refused at submit.
sed 's|^seed: 3$|seed: 3\npipeline { workers: 3 schedule: \"1f1b_flush\" tensor_parallel: 3 }|' \
  "$tmp/gpt.textproto" >"$tmp/bad.textproto"
aq submit "$tmp/bad.textproto" >"$tmp/bad.out" 2>&1 && fail "tensor_parallel 3 was accepted"
grep -q "tensor_parallel=3 does not divide model.layers\[2\]'s 4 heads" "$tmp/bad.out" ||
  fail "the indivisible degree's error: $(cat "$tmp/bad.out")"

[ "$fails" -eq 0 ] && echo "tensor_parallel_test: passed"
exit $((fails > 0))
