#!/usr/bin/env bash
# Multi-host tests of the real daemons, each host a network namespace of
# its own (tests/multihost/netns_lib.sh): a coordinator on host c
# (10.77.0.1) and five workers w1..w5 on hosts of their own, with TLS and
# bearer tokens (certificates with every host's address, from
# deploy/tls/make-dev-ca.sh), `aq` run on host c.
#  main       The Fashion-MNIST 4-stage pipeline (1F1B with weight
#             stashing, MH_MAIN_STEPS steps) SUCCEEDS across the hosts: the
#             workers registered with 5 different addresses, its stages ran
#             on 4 different hosts, every stage sent bytes, and every
#             worker host's eth0 sent at least that many.
#  gpt        The README's main job (the GPT on fortunes, 4-stage 1F1B with
#             a flush, tied head), MH_GPT_STEPS steps (default 60) with an
#             evaluation at the end, SUCCEEDS with its stages on 4 hosts.
#  cut        A job's host loses its link (`ip link set down` at the
#             switch) mid-job: the coordinator declares its worker DEAD
#             within the lease (detection time printed), and the job
#             SUCCEEDS on the spare, the restart naming the worker; once
#             the link is back the worker registers again.
#  coord      One job host is partitioned from the coordinator only, for
#             twice the lease: its worker is UNREACHABLE (not DEAD), the
#             job SUCCEEDS at attempt 0 with no restart, every minibatch in
#             its loss curve once (0 steps lost), the worker HEALTHY again.
#  peer       A job host is partitioned from its pipeline neighbour only:
#             the data plane times out, the coordinator's probe finds
#             everyone alive, the job restarts on the spare instead of the
#             worker its stage could not reach, and SUCCEEDS. Every restart
#             names the pair ("stage S on worker A (HOST) could not reach
#             stage T on worker B (HOST)"), no attempt is lost to a worker
#             still busy with the attempt before, and the first of the
#             pair to fail said it could not reach the other.
# MH_CASES (default "main gpt cut coord peer") picks cases; MH_COORD_STAGE
# (default random) the stage whose worker "coord" cuts off. Needs root and
# network namespaces, else reports itself skipped saying why. Bounded in
# time; every namespace and process is removed on exit, failure included.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3" MAKE_CA="$4" EXAMPLE="$5" GPT="$6"
here="$(dirname "$0")"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$here/../daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"
lib="$here/netns_lib.sh"
[ -f "$lib" ] || lib="tests/multihost/netns_lib.sh"
# shellcheck source=tests/multihost/netns_lib.sh
source "$lib"

why=$(mh_can_run) || mh_skip "$why; multi-host tests not run"
fmnist=/usr/share/datasets/fashion-mnist
[ -f "$fmnist/train-images-idx3-ubyte.gz" ] ||
  mh_skip "no Fashion-MNIST in $fmnist (deploy/setup.sh installs it); multi-host tests not run"
cases="${MH_CASES:-main gpt cut coord peer}"
main_steps="${MH_MAIN_STEPS:-300}"
# The lease: short, so that the cases are quick; the heartbeat 5 times as
# often.
lease_ms=3000 heartbeat_ms=200 peer_timeout_ms=4000

mh_up 5 || { echo "mh_up failed"; exit 1; }
caddr=$(mh_addr c)
hosts="$caddr"
for i in 1 2 3 4 5; do hosts="$hosts,$(mh_addr "w$i")"; done
"$MAKE_CA" "$tmp/tls" --hosts "$hosts" --workers 5 --worker-prefix w --first 1 \
  --users admin >/dev/null || { echo "make-dev-ca.sh failed"; exit 1; }
export AQ_TLS_CA="$tmp/tls/ca.pem" AQ_TOKEN_FILE="$tmp/tls/token.admin"

mh_exec c "$COORDINATOR" --listen "$caddr:7070" --state_dir "$tmp/cstate" \
  --tls_ca "$tmp/tls/ca.pem" --tls_cert "$tmp/tls/coordinator.pem" \
  --tls_key "$tmp/tls/coordinator.key" --tokens_file "$tmp/tls/tokens" \
  --heartbeat_interval_ms "$heartbeat_ms" --suspect_after_missed 3 \
  --dead_after_ms "$lease_ms" --checkpoint_root "$tmp" >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
aq() { mh_exec c "$AQ" "$@" --coordinator "$caddr:7070"; }
coordinator_up() { aq workers >/dev/null 2>&1; }
wait_until 20 coordinator_up || { echo "the coordinator did not start:"; cat "$tmp/coordinator.log"; exit 1; }

# Worker $1 on host $1, advertising the host's address. One at a time, so
# that they register in the order w1..w5 (the scheduler's order).
start_worker() {
  local w=$1 addr
  addr=$(mh_addr "$w")
  mh_exec "$w" "$WORKER" --coordinator "$caddr:7070" --worker_id "$w" \
    --advertise_host "$addr" --listen "$addr:7000" \
    --tls_ca "$tmp/tls/ca.pem" --tls_cert "$tmp/tls/worker.pem" \
    --tls_key "$tmp/tls/worker.key" --token_file "$tmp/tls/token.$w" \
    --threads 1 --measure_gemm=false --peer_timeout_ms "$peer_timeout_ms" \
    --checkpoint_root "$tmp" >>"$tmp/$w.log" 2>&1 &
  pids+=("$!")
}
healthy() { [ "$(healthy_count)" -ge "$1" ]; }
for i in 1 2 3 4 5; do
  start_worker "w$i"
  wait_until 20 healthy "$i" || { echo "w$i never HEALTHY: $(aq workers)"; cat "$tmp/w$i.log"; exit 1; }
done

# ---------------------------------------------------------------- helpers
status_json() { aq status "$1" --output json 2>/dev/null; }
state_of() { status_json "$1" | json 'd["state"]'; }
is_final() { case "$(state_of "$1")" in JOB_SUCCEEDED | JOB_FAILED | JOB_CANCELLED) return 0 ;; esac; return 1; }
step_of() { status_json "$1" | json 'd.get("step", 0)'; }
at_step() { [ "$(step_of "$1")" -ge "$2" ]; }
# The furthest weight version the stages of job $1 other than stage $2
# committed (a stage cut off from the coordinator cannot report; when it is
# the output stage the job's step count waits with it).
others_version() {
  status_json "$1" | json "max([int(s.get('committed_version', s.get('committedVersion', 0))) for s in d['stages'] if int(s.get('stage', 0)) != $2] or [0])"
}
worker_state() { aq workers --output json | json "[w['state'] for w in d['workers'] if w['info']['worker_id'] == '$1'][0]"; }
worker_is() { [ "$(worker_state "$1")" = "$2" ]; }
# The worker of job $1's stage $2.
stage_worker() { status_json "$1" | json "d['stages'][$2]['workers'][0]"; }
now_ms() { date +%s%3N; }
# The Fashion-MNIST pipeline with $1 steps, a checkpoint every $2 steps (0:
# none) and at most $3 restarts.
spec() {
  sed -e '/^epochs:/d' -e "s|^batch_size: 64|batch_size: 64\nmax_steps: $1|" "$EXAMPLE"
  [ "$2" -gt 0 ] && echo "checkpoint { dir: \"$tmp/ckpt\" every_steps: $2 }"
  echo "fault_tolerance { max_restarts: $3 }"
}
submit() {  # $1: spec file; prints the job id
  local id
  id=$(aq submit "$1" 2>"$tmp/submit.err") || { fail "submit $1: $(cat "$tmp/submit.err")"; return 1; }
  echo "$id"
}
# Seconds from the time $1 (ms) to $2 (ms, default now), to 0.01 s.
seconds() { awk -v a="$1" -v b="${2:-$(now_ms)}" 'BEGIN { printf "%.2f", (b - a) / 1000 }'; }
seconds_since() { seconds "$1"; }

# ---------------------------------------------------------------- main
case_main() {
  local t0 tx_before=() i
  t0=$(now_ms)
  for i in 1 2 3 4; do tx_before+=("$(mh_tx_bytes "w$i")"); done
  spec "$main_steps" 0 0 >"$tmp/main.textproto"
  aq submit "$tmp/main.textproto" --wait --output json >"$tmp/main.json" 2>"$tmp/main.err" ||
    { fail "main job: $(cat "$tmp/main.err") $(cat "$tmp/main.json")"; return; }
  local id
  id=$(json 'd["job_id"]' <"$tmp/main.json")
  status_json "$id" >"$tmp/main.status"
  [ "$(json 'd["state"]' <"$tmp/main.status")" = JOB_SUCCEEDED ] ||
    { fail "main job $id: $(aq status "$id")"; return; }
  [ "$(json 'd["step"]' <"$tmp/main.status")" = "$main_steps" ] || fail "main job $id: not $main_steps steps: $(aq status "$id")"
  # Five workers, five addresses, each its host's.
  local addrs
  addrs=$(aq workers --output json | json '" ".join(sorted(w["info"]["worker_id"] + "=" + w["info"]["address"].rsplit(":", 1)[0] for w in d["workers"]))')
  local want="" w
  for i in 1 2 3 4 5; do want="$want w$i=$(mh_addr "w$i")"; done
  [ "$addrs" = "${want# }" ] || fail "workers' registered addresses: '$addrs', want '${want# }'"
  # Four stages on four different workers (so hosts); every stage sent
  # bytes (the last sends gradients back).
  local stage_workers
  stage_workers=$(json '" ".join(s["workers"][0] for s in d["stages"])' <"$tmp/main.status")
  [ "$(echo "$stage_workers" | tr ' ' '\n' | sort -u | wc -l)" = 4 ] ||
    fail "main job $id: stages not on 4 different hosts: $stage_workers"
  local sent
  sent=$(json '" ".join(str(s.get("bytes_sent", 0)) for s in d["stages"])' <"$tmp/main.status")
  for i in $sent; do [ "$i" -gt 0 ] || fail "main job $id: a stage sent no bytes: $sent"; done
  # The bytes went over the hosts' links: each stage sends a 64x1024
  # float32 tensor per step (activations forward; gradients back from the
  # last), so every job host's eth0 sent at least steps x 256 KiB.
  local s=0 tx reported floor=$((main_steps * 262144))
  for w in $stage_workers; do
    tx=$(($(mh_tx_bytes "$w") - tx_before[${w#w} - 1]))
    reported=$(echo "$sent" | cut -d' ' -f$((s + 1)))
    [ "$tx" -ge "$floor" ] || fail "host $w sent $tx bytes on eth0, less than $main_steps steps x 256 KiB"
    echo "main: stage $s on $w ($(mh_addr "$w")): eth0 sent $tx bytes; the stage reports $reported"
    s=$((s + 1))
  done
  echo "main: $id SUCCEEDED $main_steps steps across hosts in $(seconds_since "$t0") s" \
    "(accuracy $(json 'd.get("test_accuracy", 0)' <"$tmp/main.status"))"
}

# ---------------------------------------------------------------- gpt
# The README's main job (examples/gpt_fortunes.textproto: a small GPT on
# Debian's fortunes, 4-stage 1F1B with a flush, its head tied across the
# first and last stage), shortened to $MH_GPT_STEPS steps with an
# evaluation at the end, across the four job hosts.
case_gpt() {
  local t0 id steps="${MH_GPT_STEPS:-60}"
  t0=$(now_ms)
  sed -e "s/^max_steps: .*/max_steps: $steps/" -e "s/^eval_every: .*/eval_every: $steps/" \
    "$GPT" >"$tmp/gpt.textproto"
  aq submit "$tmp/gpt.textproto" --wait --output json >"$tmp/gpt.json" 2>"$tmp/gpt.err" ||
    { fail "gpt job: $(cat "$tmp/gpt.err") $(cat "$tmp/gpt.json")"; return; }
  id=$(json 'd["job_id"]' <"$tmp/gpt.json")
  status_json "$id" >"$tmp/gpt.status"
  [ "$(json 'd["state"]' <"$tmp/gpt.status")" = JOB_SUCCEEDED ] ||
    { fail "gpt job $id: $(aq status "$id")"; return; }
  local stage_workers
  stage_workers=$(json '" ".join(s["workers"][0] for s in d["stages"])' <"$tmp/gpt.status")
  [ "$(echo "$stage_workers" | tr ' ' '\n' | sort -u | wc -l)" = 4 ] ||
    fail "gpt job $id: stages not on 4 different hosts: $stage_workers"
  aq status "$id" | grep -i "validation" | sed 's/^/gpt: /'
  echo "gpt: $id SUCCEEDED $steps steps on $stage_workers in $(seconds_since "$t0") s"
}

# ---------------------------------------------------------------- cut
case_cut() {
  local t0 id victim
  t0=$(now_ms)
  spec 600 50 2 >"$tmp/cut.textproto"
  id=$(submit "$tmp/cut.textproto") || return
  wait_until 120 at_step "$id" 100 || { fail "cut: $id never reached step 100: $(aq status "$id")"; return; }
  victim=$(stage_worker "$id" 1)
  local cut_ms
  cut_ms=$(now_ms)
  mh_cut "$victim" || { fail "cut: mh_cut $victim failed"; return; }
  echo "cut: the link of $victim (stage 1 of $id) is down"
  wait_until 30 worker_is "$victim" WORKER_DEAD || fail "cut: $victim never DEAD: $(aq workers)"
  local dead_ms
  dead_ms=$(now_ms)
  wait_until 240 is_final "$id" || fail "cut: $id never ended: $(aq status "$id")"
  aq status "$id" >"$tmp/cut.status" 2>&1
  status_json "$id" >"$tmp/cut.json"
  local restart_ms detect
  restart_ms=$(json 'd["restarts"][0]["at_ms"] if d.get("restarts") else 0' <"$tmp/cut.json")
  detect=$(seconds "$cut_ms" "$restart_ms")
  echo "cut: detection (the cut -> the restart record): $detect s (lease $((lease_ms / 1000)).0 s);" \
    "seen DEAD by aq after $(seconds "$cut_ms" "$dead_ms") s"
  [ "$restart_ms" -gt "$cut_ms" ] || fail "cut: no restart after the cut: $(cat "$tmp/cut.status")"
  # Within the lease, plus one heartbeat for the pipeline to drain and a
  # tick's rounding.
  [ "$((restart_ms - cut_ms))" -le $((lease_ms + 1000)) ] ||
    fail "cut: detected $detect s after the cut, more than the lease ($lease_ms ms) + 1 s"
  grep -q "SUCCEEDED step 600/600" "$tmp/cut.status" || fail "cut: $id did not succeed: $(cat "$tmp/cut.status")"
  grep -Eq "^restart 1 at step [0-9]+: .*worker $victim\b.*DEAD" "$tmp/cut.status" ||
    fail "cut: the restart does not name $victim as DEAD: $(grep '^restart' "$tmp/cut.status")"
  grep '^restart' "$tmp/cut.status" | sed 's/^/cut: /'
  # Plugged back, the worker learns it was declared DEAD and registers a
  # new incarnation.
  mh_restore "$victim"
  wait_until 30 worker_is "$victim" WORKER_HEALTHY || fail "cut: $victim not HEALTHY after the link came back: $(aq workers)"
  echo "cut: $id took $(seconds_since "$t0") s"
}

# ---------------------------------------------------------------- coord
case_coord() {
  local t0 id stage victim steps=900
  t0=$(now_ms)
  spec "$steps" 0 2 >"$tmp/coord.textproto"
  id=$(submit "$tmp/coord.textproto") || return
  wait_until 120 at_step "$id" 50 || { fail "coord: $id never reached step 50: $(aq status "$id")"; return; }
  stage=${MH_COORD_STAGE:-$((RANDOM % 4))}  # Any stage (the output stage too).
  victim=$(stage_worker "$id" "$stage")
  local step_before version_before
  step_before=$(step_of "$id") version_before=$(others_version "$id" "$stage")
  mh_partition "$victim" c || { fail "coord: mh_partition $victim c failed"; return; }
  echo "coord: $victim (stage $stage of $id) cut off from the coordinator at step $step_before"
  local held_ms=$((2 * lease_ms)) part_ms seen_unreachable=0
  part_ms=$(now_ms)
  while [ $(($(now_ms) - part_ms)) -lt "$held_ms" ]; do
    worker_is "$victim" WORKER_UNREACHABLE && seen_unreachable=1
    sleep 0.2
  done
  local step_at_heal state_at_heal version_at_heal
  step_at_heal=$(step_of "$id") state_at_heal=$(worker_state "$victim")
  version_at_heal=$(others_version "$id" "$stage")
  mh_heal "$victim" c
  echo "coord: healed after $(seconds_since "$part_ms") s at step $step_at_heal; $victim was $state_at_heal"
  [ "$seen_unreachable" = 1 ] || fail "coord: $victim never shown UNREACHABLE during the partition (at the heal: $state_at_heal)"
  echo "coord: the other stages committed v$version_before -> v$version_at_heal during the partition"
  [ "$version_at_heal" -gt "$version_before" ] || fail "coord: $id made no progress during the partition (the other stages' versions $version_before -> $version_at_heal)"
  wait_until 20 worker_is "$victim" WORKER_HEALTHY || fail "coord: $victim not HEALTHY after the heal: $(aq workers)"
  wait_until 240 is_final "$id" || fail "coord: $id never ended: $(aq status "$id")"
  status_json "$id" >"$tmp/coord.json"
  aq status "$id" >"$tmp/coord.status" 2>&1
  grep -q "SUCCEEDED step $steps/$steps" "$tmp/coord.status" || fail "coord: $id did not succeed: $(cat "$tmp/coord.status")"
  [ "$(json 'd.get("attempt", 0)' <"$tmp/coord.json")" = 0 ] || fail "coord: $id not at attempt 0: $(cat "$tmp/coord.status")"
  [ "$(json 'len(d.get("restarts", []))' <"$tmp/coord.json")" = 0 ] || fail "coord: $id restarted: $(cat "$tmp/coord.status")"
  # Every minibatch once in the loss curve (kept whole up to 1000 points):
  # no step lost, none trained twice.
  local curve
  curve=$(json 'sorted(int(p.get("minibatch", 0)) for p in d["loss_curve"]) == list(range('"$steps"'))' <"$tmp/coord.json")
  [ "$curve" = True ] || fail "coord: the loss curve is not minibatches 0..$((steps - 1)) once each"
  grep -q "$victim .*-> UNREACHABLE" "$tmp/coordinator.log" || fail "coord: the coordinator logged no UNREACHABLE for $victim"
  echo "coord: $id SUCCEEDED at attempt 0, 0 steps lost, in $(seconds_since "$t0") s"
}

# ---------------------------------------------------------------- peer
case_peer() {
  local t0 id a b
  t0=$(now_ms)
  spec 600 50 2 >"$tmp/peer.textproto"
  id=$(submit "$tmp/peer.textproto") || return
  wait_until 120 at_step "$id" 50 || { fail "peer: $id never reached step 50: $(aq status "$id")"; return; }
  a=$(stage_worker "$id" 1) b=$(stage_worker "$id" 2)
  local part_ms
  part_ms=$(now_ms)
  mh_partition "$a" "$b" || { fail "peer: mh_partition $a $b failed"; return; }
  echo "peer: $a (stage 1) and $b (stage 2) of $id cut off from each other"
  wait_until 300 is_final "$id" || fail "peer: $id never ended: $(aq status "$id")"
  mh_heal "$a" "$b"
  aq status "$id" >"$tmp/peer.status" 2>&1
  status_json "$id" >"$tmp/peer.json"
  local state
  state=$(json 'd["state"]' <"$tmp/peer.json")
  grep '^restart\|^reason\|FAILED\|SUCCEEDED' "$tmp/peer.status" | sed 's/^/peer: /'
  [ "$(grep -c '^restart ' "$tmp/peer.status")" -ge 1 ] || fail "peer: $id did not restart: $(cat "$tmp/peer.status")"
  # Nobody died: the coordinator's probe found every worker alive.
  local w
  for w in w1 w2 w3 w4 w5; do
    worker_is "$w" WORKER_HEALTHY || fail "peer: $w is $(worker_state "$w"), not HEALTHY"
  done
  # Every restart names the pair, whichever of the two reported first (a
  # stage stalled behind the pair reports later: worker/runtime/stage_job.cc).
  local pair_re="stage [12] on worker ($a|$b) \([0-9.]+\) could not reach stage [12] on worker ($a|$b) \([0-9.]+\)"
  local line
  while read -r line; do
    echo "$line" | grep -Eq "$pair_re" || fail "peer: a restart does not name the pair $a/$b: $line"
  done < <(grep '^restart ' "$tmp/peer.status")
  grep -q "busy with job" "$tmp/peer.status" && fail "peer: an attempt was lost to a busy worker: $(cat "$tmp/peer.status")"
  # One of the pair failed first saying it could not reach the other (the
  # restart may stop the other before its own wait times out).
  local x y said=""
  for x in "$a" "$b"; do
    y=$([ "$x" = "$a" ] && echo "$b" || echo "$a")
    line=$(grep -m1 "job $id failed: DEADLINE_EXCEEDED" "$tmp/$x.log")
    echo "$line" | grep -q "could not reach stage [12] on worker $y ($(mh_addr "$y"))" &&
      said="$x"
  done
  [ -n "$said" ] || fail "peer: neither $a nor $b logged that it could not reach the other"
  local first_ms
  first_ms=$(json 'd["restarts"][0]["at_ms"] if d.get("restarts") else 0' <"$tmp/peer.json")
  echo "peer: the partition -> restart 1: $(seconds "$part_ms" "$first_ms") s (peer timeout $((peer_timeout_ms / 1000)).0 s)"
  [ "$state" = JOB_SUCCEEDED ] ||
    fail "peer: $id ended $state, not recovered on the spare: $(json 'd["reason"]' <"$tmp/peer.json")"
  echo "peer: $id recovered (SUCCEEDED) in $(seconds_since "$t0") s"
  json '" ".join(s["workers"][0] for s in d["stages"])' <"$tmp/peer.json" |
    sed 's/^/peer: the last attempt ran on /'
}

for c in $cases; do
  "case_$c"
done

if [ "$fails" -gt 0 ]; then
  echo "coordinator log:"; tail -60 "$tmp/coordinator.log"
  echo "$fails failure(s)"; exit 1
fi
echo "PASS"
