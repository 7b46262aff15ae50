#!/usr/bin/env bash
# Process-level test of the zero-bubble and chunked schedules through the
# real daemons: a small GPT with its head tied to its embedding across the
# first and last stage, trained by 4 worker daemons under zb_h1, by 2 under
# zb_h2 (both split every backward into I and W), and by 2 holding two
# chunks each under interleaved_1f1b (a loop) and zb_v (a V: the tie on one
# worker), has the per-step losses of `aq train-local` within 1e-5
# (relative); each zero-bubble job's trace shows its W's.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --state_dir "$tmp/cstate" --heartbeat_interval_ms 100 \
  --checkpoint_root "$tmp" >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for w in z1 z2 z3 z4; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 20000 \
    --checkpoint_root "$tmp" >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
done
wait_until 20 eval '[ "$(healthy_count)" -eq 4 ]' || { fail "workers: $(aq workers)"; exit 1; }

# 6 layers: 4 stages of 2, 1, 2, 1 or 2 of 3, with the tie across them.
cat >"$tmp/gpt.textproto" <<'SPEC'
name: "zero-bubble"
model {
  layers { token_embedding { vocab_size: 128 dim: 16 } }
  layers { position_embedding { context: 8 dim: 16 } }
  layers { transformer_block { dim: 16 heads: 2 dropout: 0.1 } }
  layers { transformer_block { dim: 16 heads: 2 } }
  layers { layer_norm { normalized_shape: 16 } }
  layers { linear { in_features: 16 out_features: 128 bias: false } tie_weight_to: 0 }
}
data { text { files: "/usr/share/games/fortunes/cookie" context: 8 tokenizer: "chars" } }
optimizer { adam { lr: 0.003 } }
batch_size: 8
max_steps: 12
seed: 3
SPEC
"$AQ" train-local "$tmp/gpt.textproto" --output json >"$tmp/local.json" 2>"$tmp/local.err" ||
  { fail "train-local: $(cat "$tmp/local.err")"; exit 1; }

# run SCHEDULE WORKERS [STAGES [FILE]]: the job's losses against
# train-local's (FILE: a schedule file, next to the spec, for "custom").
run() {
  local schedule=$1 workers=$2 stages=${3:-$2} file=${4:-} id how
  how="schedule: \"$schedule\" microbatches: 4"
  [ -n "$file" ] && how="schedule_file: \"$file\""
  sed "s/^seed: 3$/seed: 3\npipeline { workers: $workers $how bandwidth_bytes_per_s: 1e6 }/" \
    "$tmp/gpt.textproto" >"$tmp/$schedule.textproto"
  if ! aq submit "$tmp/$schedule.textproto" --wait >"$tmp/$schedule.out" 2>&1; then
    fail "$schedule job: $(cat "$tmp/$schedule.out")"
    return
  fi
  id=$(grep -o 'job-[0-9a-f-]*' "$tmp/$schedule.out" | head -1)
  aq status "$id" --output json >"$tmp/$schedule.json"
  python3 - "$tmp/local.json" "$tmp/$schedule.json" "$schedule" "$stages" <<'PY' ||
import json, sys
local = json.load(open(sys.argv[1]))["loss"]
job = json.load(open(sys.argv[2]))
stages = len(job["plan"]["stages"])
if sys.argv[3] == "auto":  # Whatever it picks flushes: the same losses.
    picked = job["schedule"]
    assert picked in ("1f1b_flush", "zb_h1", "zb_h2", "interleaved_1f1b", "zb_v"), picked
    print(f"auto picked {picked}")
else:
    assert stages == int(sys.argv[4]), f"{stages} stages, not {sys.argv[4]}: {job['plan']}"
curve = sorted(job["loss_curve"], key=lambda p: int(p.get("minibatch", 0)))
got = [p["loss"] for p in curve]
assert len(got) == len(local), (len(got), len(local))
worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, local))
print(f"{sys.argv[3]}: {stages} stages, {len(got)} steps, worst relative difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
    fail "$schedule: the losses differ from train-local's"
  # The pipeline as decided into the plan, and its grid.
  aq plan "$id" >"$tmp/$schedule.plan" 2>&1 || fail "$schedule: aq plan failed"
  grep -E '^(schedule|auto chose|rank [01] \|)' "$tmp/$schedule.plan" | cut -c1-160
  if [ "$schedule" = custom ]; then
    grep -q "^schedule custom, 4 microbatches, $((stages / workers)) chunk(s)" "$tmp/$schedule.plan" ||
      fail "custom: the plan's decision: $(cat "$tmp/$schedule.plan")"
    return
  fi
  if [ "$schedule" = auto ]; then
    grep -q "^auto chose .*1f1b_flush: .*zb_h1: .*zb_v: " "$tmp/$schedule.plan" ||
      fail "auto: the plan does not say what it chose: $(cat "$tmp/$schedule.plan")"
    return
  fi
  grep -q "^schedule $schedule, 4 microbatches, $((stages / workers)) chunk(s) per worker, gloo; simulated: .* bubble" \
    "$tmp/$schedule.plan" || fail "$schedule: the plan's decision: $(cat "$tmp/$schedule.plan")"
  grep -q "^rank $((workers - 1)) |" "$tmp/$schedule.plan" ||
    fail "$schedule: no grid in aq plan: $(cat "$tmp/$schedule.plan")"
  [ "$schedule" = interleaved_1f1b ] && return
  aq trace "$id" -o "$tmp/$schedule.trace.json" >/dev/null 2>&1 ||
    fail "$schedule: no trace"
  grep -q '"name":"W mb=' "$tmp/$schedule.trace.json" ||
    fail "$schedule: the trace shows no W"
}
run zb_h1 4
run zb_h2 2
run interleaved_1f1b 2 4
run zb_v 2 4
run auto 2
# A user's schedule files: the lowered ZB-V that aq schedule writes, and a
# compute-only one written by hand (every F, then I's, W's last, reversed
# on rank 0): each validates, runs, and trains as train-local does.
"$AQ" schedule zb_v --ranks 2 --microbatches 4 -o "$tmp/zbv.schedule" >/dev/null ||
  fail "aq schedule -o"
run custom 2 4 zbv.schedule
cat >"$tmp/mine.schedule" <<'PROGRAM'
# aqueduct schedule: ranks=2 stages_per_rank=1 placement=loop microbatches=4
0: 0F0 0F1 0F2 0F3 0I0 0I1 0I2 0I3 0W3 0W2 0W1 0W0
1: 1F0 1I0 1F1 1I1 1F2 1I2 1F3 1I3 1W0 1W1 1W2 1W3
PROGRAM
run custom 2 2 mine.schedule
# A broken one is refused at submit, naming the rank and the action.
printf '%s\n' '# aqueduct schedule: ranks=2 stages_per_rank=1 placement=loop microbatches=1' \
  '0: 0F0 0W0 0I0' '1: 1F0 1I0 1W0' >"$tmp/broken.schedule"
sed 's/^seed: 3$/seed: 3\npipeline { workers: 2 schedule_file: "broken.schedule" }/' \
  "$tmp/gpt.textproto" >"$tmp/broken.textproto"
if aq submit "$tmp/broken.textproto" >"$tmp/broken.out" 2>&1; then
  fail "a broken schedule file was accepted"
fi
grep -q "rank 0, action .*0W0.*W before its I" "$tmp/broken.out" ||
  fail "the broken schedule's error: $(cat "$tmp/broken.out")"

# Too few layers for 4 workers of 2 chunks (6 layers, 8 stages): the job
# fails naming the schedule, the workers and the stages.
sed 's/^seed: 3$/seed: 3\npipeline { workers: 4 schedule: "zb_v" microbatches: 4 }/' \
  "$tmp/gpt.textproto" >"$tmp/few.textproto"
aq submit "$tmp/few.textproto" --wait >"$tmp/few.out" 2>&1 && fail "zb_v on 4 workers of a 6-layer model ran"
grep -q "zb_v on 4 workers holds 2 chunks each, so the model is cut into 8 stages" "$tmp/few.out" ||
  fail "the too-few-layers error: $(cat "$tmp/few.out")"

# Checkpoints of a chunked job (each worker writes a file per stage it
# holds), resumed under zb_v on the same 4 stages and under 1f1b_flush on 3:
# the losses after the checkpoint are train-local's.
sed "s|^seed: 3$|seed: 3\npipeline { workers: 2 schedule: \"zb_v\" microbatches: 4 bandwidth_bytes_per_s: 1e6 }\ncheckpoint { dir: \"$tmp/ckpt\" every_steps: 6 }|" \
  "$tmp/gpt.textproto" >"$tmp/ck.textproto"
ck=$(aq submit "$tmp/ck.textproto" --wait --output json 2>"$tmp/ck.err" | grep -o 'job-[0-9a-f-]*' | head -1)
[ -n "$ck" ] || fail "the checkpointed zb_v job: $(cat "$tmp/ck.err")"
aq checkpoints "$ck" --output json >"$tmp/ck.json" 2>&1 || fail "aq checkpoints: $(cat "$tmp/ck.json")"
grep -q '"version":"6"\|"version":6' "$tmp/ck.json" || fail "no checkpoint at 6: $(cat "$tmp/ck.json")"
# resume NAME WORKERS SCHEDULE
resume() {
  local name=$1 workers=$2 schedule=$3 id
  sed -e "s|workers: 2 schedule: \"zb_v\"|workers: $workers schedule: \"$schedule\"|" \
    -e '/^checkpoint {/d' "$tmp/ck.textproto" >"$tmp/$name.textproto"
  id=$(aq submit "$tmp/$name.textproto" --resume "$ck" --wait --output json 2>"$tmp/$name.err" |
    grep -o 'job-[0-9a-f-]*' | head -1)
  [ -n "$id" ] || { fail "$name: $(cat "$tmp/$name.err")"; return; }
  aq status "$id" --output json >"$tmp/$name.json"
  python3 - "$tmp/local.json" "$tmp/$name.json" "$name" <<'PY' || fail "$name: the losses after the checkpoint differ from train-local's"
import json, sys
local = json.load(open(sys.argv[1]))["loss"]
job = json.load(open(sys.argv[2]))
assert job["state"] == "JOB_SUCCEEDED", job.get("reason")
curve = {int(p.get("minibatch", 0)): p["loss"] for p in job["loss_curve"]}
assert sorted(curve) == list(range(6, 12)), sorted(curve)
worst = max(abs(curve[m] - local[m]) / abs(local[m]) for m in curve)
print(f"{sys.argv[3]}: resumed at 6 on {len(job['plan']['stages'])} stages, worst relative difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
}
resume resumed_zb_v 2 zb_v
resume resumed_flush 3 1f1b_flush

[ "$fails" -eq 0 ] && echo "zero_bubble_test: passed"
exit $((fails > 0))
