#!/usr/bin/env bash
# Issue 22, item 1: idle connections cannot silence the coordinator's gRPC
# port. The coordinator runs with 256 descriptors (ulimit -n 256 in its
# subshell, hard and soft, so it cannot raise them); 1,000 idle TCP
# connections are opened to its port and held: it keeps running and says
# it refuses those beyond its cap. Once they are closed, `aq jobs` must
# succeed within 5 s. (gRPC 1.51 alone stops accepting for good at the
# first "accept4: Too many open files".)
# Arguments: aq coordinator
set -uo pipefail
AQ="$1" COORDINATOR="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

(ulimit -n 256 && exec "$COORDINATOR" --listen 127.0.0.1:0 --http_listen "" \
  --port_file "$tmp/port" --state_dir "$tmp/state") >"$tmp/coordinator.log" 2>&1 &
cpid=$!; pids+=("$cpid")
wait_until 10 test -s "$tmp/port" || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
port=$(cat "$tmp/port")
aq() { "$AQ" "$@" --coordinator "127.0.0.1:$port"; }
grep -Eq '^Max open files +256 +256 ' "/proc/$cpid/limits" ||
  fail "the coordinator's descriptor limits: $(grep 'Max open files' "/proc/$cpid/limits")"
aq jobs >/dev/null 2>&1 || fail "aq jobs before the connections"

# Opens $2 connections to port $1 and holds them until the file $3
# exists, then closes them.
cat >"$tmp/idle.py" <<'EOF'
import os, resource, socket, sys, time
port, count, release = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = count + 64 if hard == resource.RLIM_INFINITY else min(hard, count + 64)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
held = []
for _ in range(count):
    s = socket.socket()
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    held.append(s)
print("opened", len(held), flush=True)
while not os.path.exists(release):
    time.sleep(0.05)
for s in held:
    s.close()
print("closed", flush=True)
EOF
python3 "$tmp/idle.py" "$port" 1000 "$tmp/release" >"$tmp/idle.out" 2>&1 &
idle=$!; pids+=("$idle")
opened() { grep -q "opened 1000" "$tmp/idle.out"; }
wait_until 30 opened || fail "the 1,000 connections were not all opened: $(cat "$tmp/idle.out")"
refused() { grep -q "refused [0-9]* connection" "$tmp/coordinator.log"; }
wait_until 15 refused || fail "the coordinator never said it refused connections: $(tail -5 "$tmp/coordinator.log")"
kill -0 "$cpid" 2>/dev/null || fail "the coordinator died while the connections were open"
open_fds=$(ls "/proc/$cpid/fd" 2>/dev/null | wc -l)
[ "$open_fds" -le 256 ] || fail "the coordinator holds $open_fds descriptors"

touch "$tmp/release"
closed() { grep -q closed "$tmp/idle.out"; }
wait_until 30 closed || fail "the connections were not closed: $(cat "$tmp/idle.out")"
wait "$idle"; forget "$idle"
answers() { aq jobs >"$tmp/out" 2>&1; }
wait_until 5 answers || fail "aq jobs 5 s after the idle connections closed: $(cat "$tmp/out")"
kill -0 "$cpid" 2>/dev/null || fail "the coordinator died"
grep -q "Failed accept4" "$tmp/coordinator.log" &&
  fail "gRPC's listener failed: $(grep -m1 'Failed accept4' "$tmp/coordinator.log")"

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "1,000 idle connections: the coordinator kept serving"
