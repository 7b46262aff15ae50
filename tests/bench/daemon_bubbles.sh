#!/usr/bin/env bash
# Pipeline bubbles measured through the worker daemons (issue 23): a real
# coordinator and 4 worker processes on 127.0.0.1 train a model of Delay
# layers (each rank's share F = I = W = 10 ms per microbatch: F:B:W =
# 1:1:1) with p = 4 workers and m = 8 microbatches under each schedule of
# $SCHEDULES, and the bench compares each job's steady-state time per
# minibatch with the formula and with the action IR simulator (`aq schedule
# NAME --ranks 4 --microbatches 8 --costs F,B,I,W`).
#
# The model: per stage a tiny Linear (64x64; it only makes replicating a
# stage cost an all-reduce, so that the planner picks a straight pipeline)
# and one Delay layer. One chunk per worker (1f1b_flush, gpipe, zb_h1,
# zb_h2): 4 stages, each Delay F/I/W = 10/10/10 ms; two chunks per worker
# (interleaved_1f1b, zb_v, with `pipeline { chunks: 2 }`): 8 stages, each
# Delay 5/5/5 ms, so that every worker's compute per microbatch is the same
# 30 ms whatever the chunking. The plan is pinned: one profile of the model
# (aq profile, made once per model) for every job, `bandwidth_bytes_per_s:
# 1e7` (planner only), and the bench checks that the job's plan has 4 x
# chunks stages of one Delay layer each (else the schedule's row says so).
#
# Measured, from the job's trace (`aq trace`): the time per minibatch is the
# mean spacing of each stage's optimizer steps ("step v=N" events, their
# ends) from step SKIP to step STEPS - 2 (the first SKIP minibatches hold the
# start-up; the last is left out), averaged over the stages; the compute is
# the busiest worker's compute per minibatch over the same minibatches (the
# durations of its F, B, I, W and step events: the Delay sleeps as they
# actually took, waits on peers excluded); bubble = time per minibatch /
# compute - 1 (the zero-bubble paper's measure: (p-1)/m = 37.5% for 1F1B).
# "nominal" is the bubble against m x (F + I + W) = 240 ms instead. Busy:
# the machine's CPU time in use during the job (everything, the daemons
# included: the Delay layers sleep, then yield-spin their last 1 ms);
# steal: the share the hypervisor took from this VM (both /proc/stat). A
# busy machine delays the Delays' wake-ups and the transfers, and the bubble
# grows with it: run it on an otherwise idle machine.
#
#   tests/bench/daemon_bubbles.sh
#   SCHEDULES="1f1b_flush interleaved_1f1b zb_h1 zb_h2 zb_v" STEPS=40 \
#     tests/bench/daemon_bubbles.sh
#
# Environment: SCHEDULES (default "1f1b_flush zb_h1 zb_h2"), STEPS
# (minibatches per job, default 30), SKIP (start-up minibatches left out,
# default 5), F_MS, I_MS, W_MS (each rank's share per microbatch, default
# 10 each), BIN (a bazel-bin holding coordinator/coordinator, worker/worker
# and client/aq: no build; default: `bazel build --config=opt` them, with
# BAZEL_STARTUP_OPTS, e.g. "--output_base=$HOME/.cache/aq-bubbles"),
# TRANSFER_MS (the simulator's time from a send to its receive, `aq
# schedule --transfer`; default 0), KEEP=1 (keep the temporary directory:
# logs, specs, traces; kept anyway when the bench fails). Exit status: 0
# when every schedule was measured, 1 otherwise (the reasons are printed
# under the table), 2 on bad settings or missing binaries.
set -euo pipefail
cd "$(dirname "$0")/../.."

schedules=${SCHEDULES:-1f1b_flush zb_h1 zb_h2}
steps=${STEPS:-30}
skip=${SKIP:-5}
f_ms=${F_MS:-10} i_ms=${I_MS:-10} w_ms=${W_MS:-10}
transfer_ms=${TRANSFER_MS:-0}
ranks=4 micro=8
[ "$steps" -ge $((skip + 4)) ] || { echo "STEPS must be at least SKIP + 4" >&2; exit 2; }

if [ -z "${BIN:-}" ]; then
  read -ra startup <<<"${BAZEL_STARTUP_OPTS:-}"
  bazel "${startup[@]}" build --config=opt //coordinator:coordinator //worker:worker //client:aq \
    >&2
  BIN=$(bazel "${startup[@]}" info --config=opt bazel-bin 2>/dev/null)
fi
for b in coordinator/coordinator worker/worker client/aq; do
  [ -x "$BIN/$b" ] || { echo "no $BIN/$b" >&2; exit 2; }
done
aq_bin="$BIN/client/aq"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/daemon_bubbles.XXXXXX")
pids=()
ok=0
cleanup() {
  local p
  for p in "${pids[@]+"${pids[@]}"}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${pids[@]+"${pids[@]}"}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ "$ok" -eq 1 ] && [ "${KEEP:-0}" != 1 ]; then
    rm -rf "$tmp"
  else
    echo "logs, specs and traces kept in $tmp" >&2
  fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# Polls `cmd...` every 0.2 s for at most $1 seconds.
wait_until() {
  local end=$((SECONDS + $1))
  shift
  while [ "$SECONDS" -lt "$end" ]; do
    "$@" && return 0
    sleep 0.2
  done
  return 1
}

"$BIN/coordinator/coordinator" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --state_dir "$tmp/state" >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 20 test -s "$tmp/port" || { echo "the coordinator did not start:" >&2; cat "$tmp/coordinator.log" >&2; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$aq_bin" "$@" --coordinator "$addr"; }
for w in 0 1 2 3; do
  "$BIN/worker/worker" --coordinator "$addr" --worker_id "bubbles-$w" \
    --listen 127.0.0.1:0 --threads 1 --measure_gemm=false \
    >"$tmp/worker-$w.log" 2>&1 &
  pids+=("$!")
done
healthy() {
  [ "$(aq workers --output json 2>/dev/null | grep -o '"state":"WORKER_HEALTHY"' | wc -l)" -ge "$ranks" ]
}
wait_until 60 healthy || { echo "fewer than $ranks healthy workers: $(aq workers 2>&1)" >&2; exit 1; }

# The model of $1 chunks per worker: $ranks x $1 stages, each a Linear and
# a Delay of 1/$1 of each rank's F, I and W.
write_spec() {
  local chunks=$1 schedule=$2 out=$3 k
  local f i w
  f=$(awk -v x="$f_ms" -v c="$chunks" 'BEGIN { printf "%g", x / c }')
  i=$(awk -v x="$i_ms" -v c="$chunks" 'BEGIN { printf "%g", x / c }')
  w=$(awk -v x="$w_ms" -v c="$chunks" 'BEGIN { printf "%g", x / c }')
  {
    echo "name: \"bubbles-$schedule\""
    echo "model {"
    echo "  layers { flatten {} }"
    for ((k = 0; k < ranks * chunks; k++)); do
      echo "  layers { linear { in_features: 64 out_features: 64 } }"
      echo "  layers { delay { forward_ms: $f backward_ms: $(awk -v a="$i" -v b="$w" 'BEGIN { printf "%g", a + b }') weight_ms: $w } }"
    done
    echo "}"
    echo "data { synthetic { sample_shape: [64] num_classes: 64 train_samples: 8192 seed: 1 } }"
    echo "optimizer { sgd { lr: 0.01 } }"
    echo "batch_size: 16"
    echo "max_steps: $steps"
    echo "seed: 1"
    echo "fault_tolerance { max_restarts: 0 }"
    echo "pipeline {"
    echo "  workers: $ranks"
    echo "  schedule: \"$schedule\""
    echo "  microbatches: $micro"
    echo "  bandwidth_bytes_per_s: 1e7"
    [ "$chunks" -gt 1 ] && echo "  chunks: $chunks"
    echo "}"
  } >"$out"
}

# CPU jiffies "steal busy total" from /proc/stat's aggregate line (busy:
# all but idle and iowait).
jiffies() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t - $5 - $6, t }' /proc/stat; }

# The bubble of the formula at F, I, W (the zero-bubble paper's figures).
formula() {
  awk -v s="$1" -v p="$ranks" -v m="$micro" -v f="$f_ms" -v i="$i_ms" -v w="$w_ms" 'BEGIN {
    if (s == "1f1b_flush" || s == "gpipe") b = (p - 1) / m
    else if (s == "interleaved_1f1b") b = (p - 1) / (2 * m)
    else if (s == "zb_h1") b = (p - 1) * (f + i - w) / (m * (f + i + w))
    else b = 0
    printf "%.4f", b }'
}

# The plan check and the measurement from the job's status and trace: one
# line "measured_ms compute_ms stages" or an error on stderr (exit 1).
analyse() {
  python3 - "$@" <<'PY'
import json, re, sys
status_file, trace_file, chunks, ranks, skip, steps = sys.argv[1:7]
chunks, ranks, skip, steps = int(chunks), int(ranks), int(skip), int(steps)
status = json.load(open(status_file))
stages = status.get("plan", {}).get("stages", [])
# The Delay layers are 2, 4, ... (after the flatten and each Linear).
delays = set(range(2, 2 + 2 * ranks * chunks, 2))
cuts = []  # Each stage's layers [first, end) and replicas.
for s in stages:
    first, end = int(s.get("first_layer", 0)), int(s.get("end_layer", 0))
    cuts.append((first, end, int(s.get("replicas", 1))))
plan = " ".join(f"[{a},{b})x{r}" for a, b, r in cuts)
if len(stages) != ranks * chunks:
    sys.exit(f"the job ran {len(stages)} stages (layers x replicas: {plan}), "
             f"not {ranks * chunks} ({chunks} per worker)")
for a, b, r in cuts:
    if len(delays & set(range(a, b))) != 1 or r != 1:
        sys.exit(f"the plan is not one Delay layer per unreplicated stage: {plan}")
workers = {r for s in stages for r in s.get("worker_ranks", [])}
if len(workers) != ranks:
    sys.exit(f"the plan uses {len(workers)} workers, not {ranks}: {plan}")
trace = json.load(open(trace_file))["traceEvents"]
names = {}  # pid (a stage replica, or a worker's stages) -> worker
for e in trace:
    if e.get("ph") == "M" and e.get("name") == "process_name":
        m = re.match(r"stage \d+ replica \d+ \((.*)\)$", e["args"]["name"])
        names[e["pid"]] = m.group(1)
step_events = {}  # pid -> its optimizer steps
compute = {}  # worker -> minibatch -> compute us
for e in trace:
    if e.get("ph") != "X" or e.get("tid") != 1:
        continue
    worker = names[e["pid"]]
    if e["name"].startswith("step v="):
        step_events.setdefault(e["pid"], []).append(e)
        continue
    m = re.search(r"mb=(\d+)", e["name"])
    if m:
        per = compute.setdefault(worker, {})
        per[int(m.group(1))] = per.get(int(m.group(1)), 0) + e["dur"]
if len(compute) != ranks:
    sys.exit(f"the trace shows the compute of {len(compute)} workers, not {ranks}")
# Each series' steps in time order, k per minibatch (k > 1 if one series
# held several stages' steps): the k-th, 2k-th, ... end minibatches 0, 1, ...
periods = []
last = steps - 2  # Steps [skip, last]; compute of minibatches (skip, last].
for pid, evs in sorted(step_events.items()):
    evs.sort(key=lambda e: e["ts"])
    k = len(evs) // steps
    if k < 1 or len(evs) != k * steps:
        sys.exit(f"{names[pid]} traced {len(evs)} steps, not a multiple of {steps}")
    per = compute[names[pid]]
    for i, e in enumerate(evs):
        per[i // k] = per.get(i // k, 0) + e["dur"]
    ends = [e["ts"] + e["dur"] for e in evs[k - 1::k]]
    periods.append((ends[last] - ends[skip]) / (last - skip) / 1000)
if len(periods) < ranks:
    sys.exit(f"the trace has the steps of {len(periods)} stages, fewer than the {ranks} workers")
measured = sum(periods) / len(periods)
busiest = max(sum(per.get(mb, 0) for mb in range(skip + 1, last + 1)) / (last - skip) / 1000
              for per in compute.values())
print(f"{measured:.3f} {busiest:.3f} {plan}")
PY
}

rows=()
mem_rows=()
failures=()
for schedule in $schedules; do
  case "$schedule" in
    interleaved_1f1b | zb_v) chunks=2 ;;
    *) chunks=1 ;;
  esac
  spec="$tmp/$schedule.textproto"
  write_spec "$chunks" "$schedule" "$spec"
  profile="$tmp/profile-$chunks.json"
  if [ ! -s "$profile" ]; then
    "$aq_bin" profile "$spec" --threads 1 -o "$profile" >"$tmp/profile-$chunks.log" 2>&1 ||
      { echo "aq profile: $(cat "$tmp/profile-$chunks.log")" >&2; exit 1; }
  fi
  sim=$("$aq_bin" schedule "$schedule" --ranks "$ranks" --microbatches "$micro" \
    --costs "$f_ms,$(awk -v a="$i_ms" -v b="$w_ms" 'BEGIN { printf "%g", a + b }'),$i_ms,$w_ms" \
    --transfer "$transfer_ms" --output json 2>&1) || { failures+=("$schedule: aq schedule: $sim"); continue; }
  read -r sim_ms sim_bubble < <(echo "$sim" | python3 -c \
    'import json,sys; d=json.load(sys.stdin); print(d["step_time"], d["bubble"])')
  echo "== $schedule: submitting ($steps minibatches, $((ranks * chunks)) stages)" >&2
  read -r s0 b0 t0 < <(jiffies)
  if ! id=$(aq submit "$spec" --profile "$profile" 2>"$tmp/$schedule.submit.err"); then
    failures+=("$schedule: aq submit refused it: $(tr '\n' ' ' <"$tmp/$schedule.submit.err")")
    continue
  fi
  # Bounded: 60 s of start-up and planning, then 2 s a minibatch.
  if ! timeout $((60 + 2 * steps)) "$aq_bin" watch "$id" --coordinator "$addr" \
    >"$tmp/$schedule.watch" 2>&1; then
    aq cancel "$id" >/dev/null 2>&1 || true
    aq status "$id" --output json >"$tmp/$schedule.status.json" 2>/dev/null || true
    reason=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("state"), d.get("reason", ""))' \
      "$tmp/$schedule.status.json" 2>/dev/null || echo "no status")
    failures+=("$schedule: job $id did not succeed (or not within $((60 + 2 * steps)) s): $reason")
    continue
  fi
  read -r s1 b1 t1 < <(jiffies)
  steal=$(awk -v s="$((s1 - s0))" -v t="$((t1 - t0))" 'BEGIN { printf "%.1f", (t > 0 ? 100 * s / t : 0) }')
  busy=$(awk -v b="$((b1 - b0))" -v t="$((t1 - t0))" 'BEGIN { printf "%.0f", (t > 0 ? 100 * b / t : 0) }')
  aq status "$id" --output json >"$tmp/$schedule.status.json"
  aq trace "$id" -o "$tmp/$schedule.trace.json" --output json >"$tmp/$schedule.trace.out"
  dropped=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dropped"])' "$tmp/$schedule.trace.out")
  [ "$dropped" = 0 ] || failures+=("$schedule: the trace dropped $dropped events (figures from what is left)")
  if ! result=$(analyse "$tmp/$schedule.status.json" "$tmp/$schedule.trace.json" "$chunks" "$ranks" \
    "$skip" "$steps" 2>"$tmp/$schedule.analyse.err"); then
    failures+=("$schedule: $(tail -1 "$tmp/$schedule.analyse.err")")
    continue
  fi
  read -r measured compute plan <<<"$result"
  echo "   $id: plan $plan; $measured ms per minibatch, busiest worker's compute $compute ms (CPUs $busy% busy, steal $steal%)" >&2
  rows+=("$schedule $(formula "$schedule") $sim_bubble $sim_ms $measured $compute $busy $steal")
  # Peak activations: the simulator's per rank (microbatches of a rank's
  # share, freed at I), and what each stage reported (microbatches holding
  # anything, a pending W included, and the bytes of the peak).
  mem_rows+=("$(python3 - "$tmp/$schedule.status.json" "$schedule" "$sim" <<'PY'
import json, sys
status = json.load(open(sys.argv[1]))
sim = json.loads(sys.argv[3])
stages = status.get("stages", [])
held = " ".join(str(s.get("peak_in_flight", 0)) for s in stages)
kib = " ".join(f"{int(s.get('stashed_activation_bytes', 0)) / 1024:.0f}" for s in stages)
peaks = " ".join(f"{p:g}" for p in sim.get("peak_activations", []))
print(f"{sys.argv[2]:<17} simulated per rank: {peaks:<16} reported per stage: {held:<24} KiB: {kib}")
PY
)")
done

echo
echo "p = $ranks, m = $micro, each rank's F/I/W = $f_ms/$i_ms/$w_ms ms per microbatch, simulator's transfer $transfer_ms ms; minibatches $((skip + 1))-$((steps - 2)) (from 0) of $steps"
printf '%-17s %8s %8s %9s %8s %8s %8s %10s %6s %5s %6s\n' schedule formula simulated measured nominal \
  "pred ms" "meas ms" "compute ms" ratio busy steal
for r in "${rows[@]+"${rows[@]}"}"; do
  read -r schedule form sb sms meas comp busy steal <<<"$r"
  awk -v s="$schedule" -v fb="$form" -v sb="$sb" -v sms="$sms" -v ms="$meas" -v c="$comp" \
    -v st="$steal" -v bu="$busy" -v nom="$(awk -v m="$micro" -v f="$f_ms" -v i="$i_ms" -v w="$w_ms" 'BEGIN { print m * (f + i + w) }')" \
    'BEGIN { printf "%-17s %7.2f%% %7.2f%% %8.2f%% %7.2f%% %8.1f %8.1f %10.1f %6.3f %4d%% %5.1f%%\n",
      s, 100 * fb, 100 * sb, 100 * (ms / c - 1), 100 * (ms / nom - 1), sms, ms, c, ms / sms, bu, st }'
done
echo "(measured: bubble against the busiest worker's measured compute; nominal: against $micro x (F + I + W); ratio: measured / predicted step time; busy: the machine's CPUs during the job, everything included)"
echo
echo "peak activations (microbatches; a stage's report counts one whose W is still pending):"
for r in "${mem_rows[@]+"${mem_rows[@]}"}"; do echo "$r"; done
for f in "${failures[@]+"${failures[@]}"}"; do echo "not measured: $f"; done
[ "${#failures[@]}" -eq 0 ] && ok=1
[ "$ok" -eq 1 ]
