#!/usr/bin/env bash
# Issue 22, item 7: the coordinator's resident memory under a flood of
# 60 MB SubmitJob calls (refused: the name is over its bound), and 10 s
# after it. Prints one line per phase: VmRSS in MB at start, the peak
# during the flood and 10 s after.
#
#   tests/bench/big_message_memory.sh [COORDINATOR [HOSTILE_CLIENT]] [-- COUNT THREADS]
#
# Defaults: the binaries of `bazel build //coordinator:coordinator
# //tests:hostile_client`, 40 calls, 4 at a time.
set -uo pipefail
cd "$(dirname "$0")/../.."
COORDINATOR="${1:-bazel-bin/coordinator/coordinator}"
HOSTILE="${2:-bazel-bin/tests/hostile_client}"
count="${4:-40}" threads="${5:-4}"
tmp=$(mktemp -d)
"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$tmp/state" \
  --http_listen "" >"$tmp/coordinator.log" 2>&1 &
pid=$!
trap 'kill -KILL $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
rss() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status"; }
echo "start: $(rss) MB"
"$HOSTILE" --coordinator "127.0.0.1:$(cat "$tmp/port")" --attack big_messages \
  --count "$count" --threads "$threads" >"$tmp/attack.json" 2>&1 &
attack=$!
peak=0
while kill -0 "$attack" 2>/dev/null; do
  now=$(rss)
  peak=$(awk -v a="$now" -v b="$peak" 'BEGIN {print (a > b) ? a : b}')
  sleep 0.2
done
echo "peak during $count calls of 60 MB, $threads at a time: $peak MB ($(cat "$tmp/attack.json"))"
sleep 10
echo "10 s after: $(rss) MB"
