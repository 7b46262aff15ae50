#!/usr/bin/env bash
# Slurm for real: starts a one-node Slurm cluster from Debian's packages on
# this machine (munged, slurmctld, slurmd, no systemd, no cgroups), then
# runs deploy/slurm/aqueduct.sbatch through `sbatch --wait` with 3 tasks: a
# coordinator, 3 workers through srun (TLS and tokens made for the
# allocation) and a short 2-stage pipeline job. Asserts the batch job's exit
# code 0, its output (SUCCEEDED, the steps) and that nothing is left
# running; then a job spec that fails, whose status must come back nonzero.
# Fails, saying why, when not root, when a Slurm program is missing
# (deploy/setup.sh installs them) or when a Slurm daemon cannot start
# (with its log's tail): none of these is a skip. Processes left under its
# directory at the end fail it too. Bounded in time; everything is torn
# down.
#
#   slurm_test.sh AQ COORDINATOR WORKER MAKE_DEV_CA SBATCH_SCRIPT
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3" MAKE_CA="$4" SCRIPT="$5"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

# A prerequisite missing, or a daemon that did not start: the test fails.
give_up() {
  echo "FAIL: $1" >&2
  exit 1
}

export PATH="$PATH:/usr/sbin:/sbin"
[ "$(id -u)" -eq 0 ] || give_up "not root: slurmd runs jobs as their user only when it runs as root"
for b in munged mungekey slurmctld slurmd sbatch sinfo scontrol srun squeue scancel; do
  command -v "$b" >/dev/null ||
    give_up "$b is missing (deploy/setup.sh installs munge slurmctld slurmd slurm-client)"
done
# Absolute binaries: the batch job runs in the spool directory.
abs() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
AQ=$(abs "$AQ") COORDINATOR=$(abs "$COORDINATOR") WORKER=$(abs "$WORKER")
MAKE_CA=$(abs "$MAKE_CA") SCRIPT=$(abs "$SCRIPT")

# Everything under one short directory: munge's socket path must fit a
# sockaddr_un (108 bytes), which Bazel's $TEST_TMPDIR can exceed.
tmp=$(mktemp -d /tmp/aq-slurm.XXXXXX)
chmod 755 "$tmp"
node=$(hostname -s)
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }
ctld_port=$(free_port) slurmd_port=$(free_port) aq_port=$(free_port)
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done

munge_pid="" ctld_pid="" slurmd_pid=""
# Whether no process runs from or names a path under $tmp.
none_under_tmp() { ! pgrep -f "$tmp/" >/dev/null 2>&1; }
# Stops the jobs and the daemons; 1 when processes the batch jobs started
# outlived them (a bug: their teardown is the sbatch script's), 0 otherwise.
teardown() {
  local p left=0
  # Jobs first, so that slurmd kills their steps; then the daemons.
  [ -n "$ctld_pid" ] && scancel --full --signal=KILL -u root 2>/dev/null
  for p in $slurmd_pid $ctld_pid $munge_pid; do kill -TERM "$p" 2>/dev/null; done
  for p in $slurmd_pid $ctld_pid $munge_pid; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  # The daemons are gone; anything else under $tmp gets 10 s to end.
  if ! wait_until 10 none_under_tmp; then
    echo "FAIL: processes left under $tmp: $(pgrep -af "$tmp/")" >&2
    for p in $(pgrep -f "$tmp/"); do kill -KILL "$p" 2>/dev/null; done
    left=1
  fi
  return "$left"
}
# On exit, whatever the status so far: a failed teardown or a sanitizer
# report (cleanup, in a subshell so that it returns) turns it into 1.
on_exit() {
  local rc=$?
  teardown || rc=1
  (cleanup) || rc=1
  rm -rf "$tmp"
  exit "$rc"
}
trap on_exit EXIT

# dump NAME LOG: a daemon's log tail for the failure.
dump() { tail -n 15 "$2" 2>/dev/null | tr '\n' ' ' | cut -c1-900; }

# munge: its own key, socket, pid, log and seed files.
mkdir -p "$tmp/munge"
chmod 700 "$tmp/munge"
mungekey --create --keyfile "$tmp/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$tmp/munge/munge.key"
munge_socket="$tmp/munge/munge.socket"
munged --foreground --force --key-file "$tmp/munge/munge.key" --socket "$munge_socket" \
  --pid-file "$tmp/munge/munged.pid" --log-file "$tmp/munge/munged.log" \
  --seed-file "$tmp/munge/munged.seed" >"$tmp/munge/stdout" 2>&1 &
munge_pid=$!
wait_until 10 test -S "$munge_socket" ||
  give_up "munged did not start: $(dump munged "$tmp/munge/munged.log") $(cat "$tmp/munge/stdout")"

mkdir -p "$tmp/ctld" "$tmp/slurmd" "$tmp/jobs"
export SLURM_CONF="$tmp/slurm.conf"
# CPUs=4 with config_overrides: slurmd takes the configured CPUs rather than
# draining the node for having fewer (this VM has 2), so 3 tasks fit.
cat >"$SLURM_CONF" <<CONF
ClusterName=aqtest
SlurmctldHost=$node
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
StateSaveLocation=$tmp/ctld
SlurmdSpoolDir=$tmp/slurmd
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
NodeName=$node CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=30 State=UP
CONF
slurmctld -D -i -f "$SLURM_CONF" >"$tmp/slurmctld.out" 2>&1 &
ctld_pid=$!
# Up when it answers a ping; a slurmctld that exited will not.
ctld_up() { kill -0 "$ctld_pid" 2>/dev/null && scontrol ping 2>/dev/null | grep -q 'is UP'; }
wait_until 30 ctld_up ||
  give_up "slurmctld did not start: $(dump slurmctld "$tmp/slurmctld.log") $(cat "$tmp/slurmctld.out")"
slurmd -D -f "$SLURM_CONF" -N "$node" >"$tmp/slurmd.out" 2>&1 &
slurmd_pid=$!
idle() { sinfo -h -N -n "$node" -o '%T' 2>/dev/null | grep -q '^idle'; }
if ! wait_until 60 idle; then
  kill -0 "$slurmd_pid" 2>/dev/null ||
    give_up "slurmd did not start: $(dump slurmd "$tmp/slurmd.log") $(cat "$tmp/slurmd.out")"
  give_up "node $node not idle within 60 s: $(sinfo -N 2>&1 | tail -2 | tr '\n' ' ') slurmd: $(dump slurmd "$tmp/slurmd.log")"
fi
echo "slurm up: $(sinfo -h -N -o '%N %T %c CPUs')"

# The 2-stage job: a short pipeline on 2 of the 3 workers.
cat >"$tmp/jobs/pipe.textproto" <<'SPEC'
name: "slurm-pipe"
model { layers { flatten {} } layers { linear { in_features: 8 out_features: 16 } }
        layers { relu {} } layers { linear { in_features: 16 out_features: 2 } } }
data { synthetic { sample_shape: [8] num_classes: 2 train_samples: 256 test_samples: 64 seed: 1 } }
optimizer { sgd { lr: 0.1 } }
pipeline { workers: 2 schedule: "1f1b_flush" }
batch_size: 16
epochs: 2
SPEC
bindir="$tmp/bin"
mkdir -p "$bindir"
ln -s "$COORDINATOR" "$bindir/coordinator"
ln -s "$WORKER" "$bindir/worker"
ln -s "$AQ" "$bindir/aq"

started=$SECONDS
(cd "$tmp/jobs" && AQ_BIN="$bindir" AQ_MAKE_CA="$MAKE_CA" AQ_PORT="$aq_port" \
  AQ_START_TIMEOUT=60 AQ_WORKER_ARGS="--measure_gemm=false --peer_timeout_ms 20000" \
  timeout 240 sbatch --wait --ntasks=3 --time=5 --output="$tmp/jobs/ok-%j.out" \
  "$SCRIPT" "$tmp/jobs/pipe.textproto") >"$tmp/sbatch.out" 2>&1
rc=$?
took=$((SECONDS - started))
out=$(cat "$tmp"/jobs/ok-*.out 2>/dev/null)
echo "sbatch --wait: exit $rc in ${took}s"
echo "$out"
[ "$rc" -eq 0 ] || fail "sbatch --wait exit $rc: $(cat "$tmp/sbatch.out") $out"
echo "$out" | grep -q "coordinator on $node" || fail "no coordinator line in the job's output"
echo "$out" | grep -q "3 workers registered" || fail "not 3 workers registered: $out"
echo "$out" | grep -q "SUCCEEDED step 32/32" || fail "the job's output lacks SUCCEEDED step 32/32"
echo "$out" | grep -Eq "aqueduct-slurm: job job-[^ ]+ SUCCEEDED" || fail "no SUCCEEDED summary line"
statedir=$(ls -d "$tmp"/jobs/aqueduct-* 2>/dev/null | head -1)
[ -n "$statedir" ] || fail "no state directory aqueduct-<jobid> in the submit directory"
for i in 0 1 2; do
  grep -q "worker slurm-[0-9]*-$i serving" "$statedir/worker-$i.log" 2>/dev/null ||
    fail "worker-$i.log does not show worker $i serving: $(tail -3 "$statedir/worker-$i.log" 2>/dev/null)"
done
grep -q "TLS on, authentication on" "$statedir/coordinator/../coordinator.log" 2>/dev/null ||
  fail "the coordinator did not run with TLS and tokens: $(head -3 "$statedir/coordinator.log")"
# Torn down: no daemon of the job outlives it.
gone() { ! pgrep -f "$statedir/" >/dev/null; }
wait_until 20 gone || fail "daemons outlived the batch job: $(pgrep -af "$statedir/")"
# The workers left (SIGTERM), not killed: each logged its stop.
stopped=$(grep -l "worker stopped" "$statedir"/worker-*.log 2>/dev/null | wc -l)
[ "$stopped" -eq 3 ] || fail "$stopped of 3 workers stopped cleanly"

# A job that fails (a stage count the 3 workers cannot give): nonzero exit.
sed 's/workers: 2 schedule/workers: 5 wait_for_workers_ms: 2000 schedule/; s/^name: .*/name: "too-wide"/' \
  "$tmp/jobs/pipe.textproto" >"$tmp/jobs/wide.textproto"
(cd "$tmp/jobs" && AQ_BIN="$bindir" AQ_MAKE_CA="$MAKE_CA" AQ_PORT="$aq_port" \
  AQ_START_TIMEOUT=60 AQ_WORKER_ARGS="--measure_gemm=false" \
  timeout 240 sbatch --wait --ntasks=3 --time=5 --output="$tmp/jobs/bad-%j.out" \
  "$SCRIPT" "$tmp/jobs/wide.textproto" --output text) >"$tmp/sbatch-bad.out" 2>&1
rc=$?
bad=$(cat "$tmp"/jobs/bad-*.out 2>/dev/null)
echo "failing job: sbatch --wait exit $rc"
echo "$bad" | tail -3
[ "$rc" -ne 0 ] || fail "a job that cannot run gave sbatch exit 0: $bad"
echo "$bad" | grep -q "did not succeed (aq exit [1-9]" || fail "no failure summary line: $bad"

if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed; logs:" >&2
  tail -n 20 "$tmp"/*.log "${statedir:-/nonexistent}"/*.log >&2 2>/dev/null
  exit 1
fi
echo "all slurm checks passed"
