#!/usr/bin/env bash
# The pipeline's own speed (issue 26): the main job's GPT
# (examples/gpt_fortunes.textproto) in one process using every core (aq
# train-local --threads $(nproc)) against the same job through 2 and 4
# worker daemons of one thread each on this machine (1f1b_flush, 4
# microbatches, the planner's cut), STEPS steps each, ROUNDS rounds
# alternating; tokens/s side by side (the coordinator's samples/s x
# context for the daemons, train-local's for one process), and what limits
# the pipelines: from each job's trace (aq trace), per stage, the share of
# its span in compute, in communication waits (send/recv, data) and idle.
#
#   tests/bench/gpt_pipeline_speed.sh [STEPS=300] [ROUNDS=2]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-300}"
rounds="${2:-2}"
spec=examples/gpt_fortunes.textproto
# shellcheck source=tests/bench/bench_lib.sh
source tests/bench/bench_lib.sh
aq="$BIN/client/aq"
context=64

# start_cluster N: a coordinator and N workers of one thread; sets addr.
start_cluster() {
  rm -rf "$tmp/c$1" && mkdir -p "$tmp/c$1"
  "$BIN/coordinator/coordinator" --listen 127.0.0.1:0 --port_file "$tmp/c$1/port" \
    --state_dir "$tmp/c$1/state" >"$tmp/c$1/coordinator.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do [ -s "$tmp/c$1/port" ] && break; sleep 0.1; done
  addr="127.0.0.1:$(cat "$tmp/c$1/port")"
  for w in $(seq "$1"); do
    "$BIN/worker/worker" --coordinator "$addr" --worker_id "w$w" --listen 127.0.0.1:0 \
      --threads 1 >"$tmp/c$1/w$w.log" 2>&1 &
    pids+=($!)
  done
  wait_healthy "$addr" "$1" || { echo "workers never healthy" >&2; exit 1; }
}

# run_daemons N: the job on N workers; prints "tokens/s" and writes the
# per-stage breakdown to $tmp/breakdown-N.
run_daemons() {
  local n=$1 id
  sed -e "s/^max_steps: 4000/max_steps: $steps/" -e "s/^eval_every: 1000/eval_every: 0/" \
    -e "s/^  workers: 4/  workers: $n microbatches: 4/" "$spec" >"$tmp/gpt-$n.textproto"
  id=$("$aq" submit "$tmp/gpt-$n.textproto" --coordinator "$addr")
  "$aq" watch "$id" --coordinator "$addr" >/dev/null 2>&1 || true
  "$aq" status "$id" --coordinator "$addr" --output json >"$tmp/status-$n.json"
  "$aq" trace "$id" --coordinator "$addr" -o "$tmp/trace-$n.json" >/dev/null
  python3 - "$tmp/status-$n.json" "$tmp/trace-$n.json" "$context" >"$tmp/breakdown-$n" <<'PY'
import json, re, sys
status = json.load(open(sys.argv[1]))
trace = json.load(open(sys.argv[2]))["traceEvents"]
if status.get("state") != "JOB_SUCCEEDED":
    sys.exit("the job did not succeed: %s" % status.get("state"))
print("%.1f" % (float(status["samples_per_second"]) * int(sys.argv[3])))
names, spans = {}, {}
for e in trace:
    if e.get("ph") == "M" and e.get("name") == "process_name":
        names[e["pid"]] = e["args"]["name"]
for e in trace:
    if e.get("ph") != "X":
        continue
    s = spans.setdefault(e["pid"], {"first": e["ts"], "last": e["ts"] + e["dur"], 1: 0, 2: 0})
    s["first"] = min(s["first"], e["ts"])
    s["last"] = max(s["last"], e["ts"] + e["dur"])
    s[e["tid"]] += e["dur"]
layers = [(int(s.get("first_layer", 0)), int(s.get("end_layer", 0)))
          for s in status.get("plan", {}).get("stages", [])]
for pid in sorted(spans):
    s = spans[pid]
    span = s["last"] - s["first"]
    m = re.match(r"stage (\d+)", names.get(pid, ""))
    st = int(m.group(1)) if m else -1
    cut = "layers [%d, %d)" % layers[st] if 0 <= st < len(layers) else ""
    print("  %-32s %-16s compute %5.1f%%  communication %5.1f%%  idle %5.1f%%" % (
        names.get(pid, pid), cut, 100 * s[1] / span, 100 * s[2] / span,
        100 * (span - s[1] - s[2]) / span))
PY
  head -1 "$tmp/breakdown-$n"
}

run_local() {
  "$aq" train-local "$spec" --max_steps "$steps" --threads "$(nproc)" --set eval_every=0 \
    --output json | python3 -c "import json,sys; print('%.1f' % (json.load(sys.stdin)['samples_per_second'] * $context))"
}

declare -A results
for r in $(seq "$rounds"); do
  results[local]+="$(run_local) "
  for n in 2 4; do
    start_cluster "$n"
    results[$n]+="$(run_daemons "$n") "
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
  done
  echo "round $r done" >&2
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
one=$(echo "${results[local]}" | median)
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); $steps steps, $rounds rounds (medians)"
echo "one process, $(nproc) threads:     $one tokens/s   (rounds: ${results[local]})"
for n in 2 4; do
  med=$(echo "${results[$n]}" | median)
  awk -v a="$med" -v b="$one" -v n="$n" -v all="${results[$n]}" 'BEGIN {
    printf "%d worker daemons, 1 thread: %s tokens/s   (%.2fx one process; rounds: %s)\n", n, a, a / b, all }'
  echo " the last round's stages:"
  tail -n +2 "$tmp/breakdown-$n"
done
