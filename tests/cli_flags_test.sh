#!/usr/bin/env bash
# Process-level test of the command lines of aq and the daemons: every aq
# subcommand answers --help and -h with its usage and flags (exit 0), aq and
# both daemons print their version and build, unknown flags exit 2 naming
# the flag, and writes to a directory that does not exist fail naming the
# path. Needs no coordinator.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# Subcommand and the flags its help must list.
declare -A flags=(
  [train-local]="--max_steps --epochs --threads --init_weights --save_weights --checkpoint_dir --checkpoint_every --resume --output --log_level"
  [profile]="--output_file --format --output --warmup --iterations --threads"
  [plan]="--profile --format --workers --bandwidth --cost_model --straight --use_fewer_machines --memory_limit --worker_speeds --schedule --allreduce_overlap --coordinator --output"
  [submit]="--wait --profile --resume --checkpoint_dir --checkpoint_every --coordinator --output"
  [status]="--coordinator --output"
  [watch]="--coordinator --output"
  [jobs]="--coordinator --output"
  [workers]="--coordinator --output"
  [cancel]="--coordinator --output"
  [trace]="--output_file --svg --window_ms --start_ms --coordinator --output"
  [logs]="--follow --stage --since_seq --coordinator --output"
  [weights]="--output_file --coordinator --output"
  [checkpoints]="--coordinator --output"
  [verify-checkpoint]="--output"
)

"$AQ" --help >"$tmp/help" 2>"$tmp/err"; rc=$?
[ "$rc" -eq 0 ] || fail "aq --help: exit $rc"
for cmd in "${!flags[@]}" help; do
  grep -q "^  $cmd " "$tmp/help" || fail "aq --help does not list $cmd: $(cat "$tmp/help")"
done

for cmd in "${!flags[@]}"; do
  for h in --help -h; do
    "$AQ" "$cmd" "$h" >"$tmp/out" 2>"$tmp/err"; rc=$?
    [ "$rc" -eq 0 ] || fail "aq $cmd $h: exit $rc: $(cat "$tmp/err")"
    grep -q "^usage: aq $cmd " "$tmp/out" || fail "aq $cmd $h: no usage line: $(head -3 "$tmp/out")"
    for f in ${flags[$cmd]} --help; do
      grep -q -- "$f\b" "$tmp/out" || fail "aq $cmd $h does not list $f"
    done
  done
  "$AQ" help "$cmd" >"$tmp/out2" 2>&1 || fail "aq help $cmd: exit $?"
  cmp -s "$tmp/out" "$tmp/out2" || fail "aq help $cmd differs from aq $cmd -h"
  # Unknown flags are usage errors that name the flag.
  "$AQ" "$cmd" --bogus-flag >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "aq $cmd --bogus-flag: exit $rc"
  grep -q "aq $cmd: unknown flag '--bogus-flag'" "$tmp/err" ||
    fail "aq $cmd --bogus-flag message: $(cat "$tmp/err")"
done

# A flag of another subcommand is unknown here too.
"$AQ" jobs --wait >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "aq jobs --wait: exit $rc"
grep -q "unknown flag '--wait'" "$tmp/err" || fail "aq jobs --wait message: $(cat "$tmp/err")"
"$AQ" frobnicate >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "unknown command: exit $rc"
grep -q "unknown command 'frobnicate'" "$tmp/err" || fail "unknown command message: $(cat "$tmp/err")"
"$AQ" --output=yaml jobs >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "--output yaml: exit $rc"
grep -q "output must be text or json, got 'yaml'" "$tmp/err" || fail "--output yaml message: $(cat "$tmp/err")"

# Versions: the version, the protocol and the build.
for bin in "$AQ" "$COORDINATOR" "$WORKER"; do
  name=$(basename "$bin")
  "$bin" --version >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 0 ] || fail "$name --version: exit $rc: $(cat "$tmp/err")"
  grep -Eq "^$name [0-9]+\.[0-9]+\.[0-9]+$" "$tmp/out" || fail "$name --version: $(cat "$tmp/out")"
  grep -q "^protocol aqueduct.v1/" "$tmp/out" || fail "$name --version lacks the protocol"
  grep -q "^build: " "$tmp/out" || fail "$name --version lacks the build"
done
"$AQ" version >"$tmp/out2" 2>&1 || fail "aq version: exit $?"

# The daemons' --help lists their flags; unknown flags and stray arguments
# exit 2 naming them.
declare -A daemon_flags=(
  [coordinator]="--listen --port_file --state_dir --checkpoint_root --max_model_bytes --heartbeat_interval_ms --dead_after_ms --log_level --log_format"
  [worker]="--coordinator --listen --advertise_host --worker_id --data_root --checkpoint_root --max_text_bytes --device --gemm_precision --threads --port_file --measure_gemm --slowdown --model_upload_deadline_ms"
)
for bin in "$COORDINATOR" "$WORKER"; do
  name=$(basename "$bin")
  "$bin" --help >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 0 ] || fail "$name --help: exit $rc"
  grep -q "No flags matched" "$tmp/out" && fail "$name --help: No flags matched"
  grep -q "^usage: $name " "$tmp/out" || fail "$name --help: no usage line: $(head -3 "$tmp/out")"
  for f in ${daemon_flags[$name]} --version; do
    grep -q -- "$f\b" "$tmp/out" || fail "$name --help does not list $f"
  done
  timeout 10 "$bin" --no_such_flag=1 >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "$name --no_such_flag: exit $rc"
  grep -q "$name: unknown flag '--no_such_flag'" "$tmp/err" || fail "$name unknown flag message: $(cat "$tmp/err")"
  timeout 10 "$bin" stray >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "$name stray: exit $rc"
  grep -q "unexpected argument 'stray'" "$tmp/err" || fail "$name stray message: $(cat "$tmp/err")"
done
timeout 10 "$WORKER" --threads many >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "worker --threads many: exit $rc"
grep -q "bad value 'many' for --threads" "$tmp/err" || fail "worker --threads message: $(cat "$tmp/err")"
# A file root that is not a directory stops either daemon naming the flag.
timeout 10 "$WORKER" --data_root "$tmp/no-such-root" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "worker --data_root missing: exit $rc"
grep -q -- "--data_root: '$tmp/no-such-root'" "$tmp/err" || fail "worker --data_root message: $(cat "$tmp/err")"
timeout 10 "$COORDINATOR" --listen 127.0.0.1:0 --checkpoint_root "$tmp/no-such-root" \
  >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "coordinator --checkpoint_root missing: exit $rc"
grep -q -- "--checkpoint_root: '$tmp/no-such-root'" "$tmp/err" ||
  fail "coordinator --checkpoint_root message: $(cat "$tmp/err")"

# Integer flags out of their range exit 2 naming the flag and the range
# (issue 22, item 12): --max_message_bytes -1 would have lifted gRPC's
# message limit.
check_range() {  # binary, flag, value, the range's text
  local name; name=$(basename "$1")
  timeout 10 "$1" --listen 127.0.0.1:0 "--$2" "$3" >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "$name --$2 $3: exit $rc, want 2"
  grep -qF -- "--$2 must be between $4, got $3" "$tmp/err" ||
    fail "$name --$2 $3 message: $(cat "$tmp/err")"
}
check_range "$COORDINATOR" max_message_bytes -1 "1048576 and 2147483647"
check_range "$COORDINATOR" max_message_bytes 0 "1048576 and 2147483647"
check_range "$COORDINATOR" max_connections 0 "16 and 1048576"
check_range "$COORDINATOR" max_server_threads 8 "16 and 65536"
check_range "$COORDINATOR" heartbeat_interval_ms 0 "1 and 3600000"
check_range "$COORDINATOR" worker_rpc_timeout_ms -1 "1 and 86400000"
check_range "$COORDINATOR" profile_timeout_ms 0 "1 and 86400000"
check_range "$COORDINATOR" wait_for_workers_ms -5 "0 and 604800000"
check_range "$COORDINATOR" max_store_value_bytes 0 "1 and 1073741824"
check_range "$COORDINATOR" forget_workers_after_ms -1 "0 and 2592000000"
check_range "$WORKER" threads -1 "0 and 4096"
check_range "$WORKER" peer_timeout_ms 0 "1 and 86400000"
check_range "$WORKER" max_text_bytes 0 "1 and 1099511627776"
check_range "$WORKER" model_upload_deadline_ms -1 "0 and 604800000"
# --slowdown (tests and benchmarks of unequal workers) is at least 1.
for bad in 0.5 0 -2 nan; do
  timeout 10 "$WORKER" --listen 127.0.0.1:0 --slowdown "$bad" >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "worker --slowdown $bad: exit $rc, want 2"
  grep -qF -- "--slowdown must be a number >= 1" "$tmp/err" ||
    fail "worker --slowdown $bad message: $(cat "$tmp/err")"
done
# And the rules between flags, naming both.
timeout 10 "$COORDINATOR" --listen 127.0.0.1:0 --max_waiting_calls 300 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "coordinator --max_waiting_calls 300: exit $rc"
grep -qF -- "--max_waiting_calls must be at most half --max_server_threads" "$tmp/err" ||
  fail "coordinator --max_waiting_calls 300 message: $(cat "$tmp/err")"

# A TLS key that is not its certificate's stops either daemon at once (exit
# 2), saying so, rather than "cannot listen" (issue 22, item 12).
for n in 1 2; do
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=127.0.0.1" -keyout "$tmp/key$n.pem" -out "$tmp/cert$n.pem" >/dev/null 2>&1 ||
    fail "openssl could not make a certificate"
done
printf 'not a key\n' >"$tmp/garbage.pem"
for bin in "$COORDINATOR" "$WORKER"; do
  name=$(basename "$bin")
  timeout 10 "$bin" --listen 127.0.0.1:0 --tls_ca "$tmp/cert1.pem" --tls_cert "$tmp/cert1.pem" \
    --tls_key "$tmp/key2.pem" >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "$name with another certificate's key: exit $rc, want 2"
  grep -q -- "--tls_key does not match --tls_cert" "$tmp/err" ||
    fail "$name with another certificate's key: $(cat "$tmp/err")"
  grep -q "cannot listen" "$tmp/err" && fail "$name with another certificate's key: $(cat "$tmp/err")"
  timeout 10 "$bin" --listen 127.0.0.1:0 --tls_ca "$tmp/cert1.pem" --tls_cert "$tmp/cert1.pem" \
    --tls_key "$tmp/garbage.pem" >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "$name with a key that is not PEM: exit $rc, want 2"
  grep -q -- "--tls_key: no unencrypted PEM private key could be read" "$tmp/err" ||
    fail "$name with a key that is not PEM: $(cat "$tmp/err")"
done

# A --state_dir that cannot be created stops the coordinator naming it.
touch "$tmp/a-file"
timeout 10 "$COORDINATOR" --listen 127.0.0.1:0 --state_dir "$tmp/a-file/state" \
  >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "uncreatable --state_dir: exit $rc"
grep -q "$tmp/a-file" "$tmp/err" || fail "uncreatable --state_dir message: $(cat "$tmp/err")"

# Writes into a directory that does not exist fail, naming the path, before
# any work or call (nothing listens on port 1).
missing="$tmp/nonexistent/dir"
"$AQ" trace job-1 -o "$missing/t.json" --coordinator 127.0.0.1:1 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" -ne 0 ] || fail "trace -o into a missing directory: exit 0"
grep -q "$missing/t.json" "$tmp/err" || fail "trace -o message: $(cat "$tmp/err")"
grep -q "wrote" "$tmp/out" && fail "trace claims to have written: $(cat "$tmp/out")"
: >"$tmp/t.json"
"$AQ" trace job-1 -o "$tmp/t.json" --svg "$missing/t.svg" --coordinator 127.0.0.1:1 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -ne 0 ] || fail "trace --svg into a missing directory: exit 0"
grep -q "$missing/t.svg" "$tmp/err" || fail "trace --svg message: $(cat "$tmp/err")"
"$AQ" weights job-1 -o "$missing/m.safetensors" --coordinator 127.0.0.1:1 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "weights -o into a missing directory: exit $rc"
grep -q "$missing/m.safetensors" "$tmp/err" || fail "weights -o message: $(cat "$tmp/err")"
grep -q "wrote" "$tmp/out" && fail "weights claims to have written: $(cat "$tmp/out")"
# weights needs -o; checkpoints and weights need the job.
"$AQ" weights job-1 --coordinator 127.0.0.1:1 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "weights without -o: exit $rc"
grep -q "weights needs -o FILE" "$tmp/err" || fail "weights without -o message: $(cat "$tmp/err")"
for cmd in weights checkpoints; do
  "$AQ" "$cmd" >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "$cmd without a job: exit $rc"
done
# verify-checkpoint is offline: one PATH (exit 2 without, or with two);
# a path with no manifest fails (exit 1) naming the manifest it looked for.
"$AQ" verify-checkpoint >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "verify-checkpoint without a path: exit $rc"
"$AQ" verify-checkpoint "$tmp" "$tmp" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "verify-checkpoint with two paths: exit $rc"
"$AQ" verify-checkpoint "$missing/v00000004" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "verify-checkpoint of a missing checkpoint: exit $rc"
grep -qF "$missing/v00000004/manifest.json" "$tmp/err" ||
  fail "verify-checkpoint of a missing checkpoint: $(cat "$tmp/err")"
grep -q "OK" "$tmp/out" && fail "verify-checkpoint of a missing checkpoint: $(cat "$tmp/out")"
# Unreachable: exit 3, and no file is left behind.
"$AQ" weights job-1 -o "$tmp/m.safetensors" --coordinator 127.0.0.1:1 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 3 ] || fail "weights from an unreachable coordinator: exit $rc: $(cat "$tmp/err")"
ls "$tmp"/m.safetensors* >/dev/null 2>&1 && fail "weights left a file: $(ls "$tmp"/m.safetensors*)"
printf 'model { layers { flatten {} } layers { linear { in_features: 4 out_features: 2 } } }\ndata { synthetic { sample_shape: [4] num_classes: 2 train_samples: 32 seed: 1 } }\noptimizer { sgd { lr: 0.1 } }\nbatch_size: 8\nmax_steps: 4\n' >"$tmp/job.textproto"
for spelling in -o --output_file --output-file --output; do
  "$AQ" profile "$tmp/job.textproto" --iterations 1 --warmup 0 --threads 1 \
    "$spelling" "$missing/p.json" >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -ne 0 ] || fail "profile $spelling into a missing directory: exit 0"
  grep -q "$missing/p.json" "$tmp/err" || fail "profile $spelling message: $(cat "$tmp/err")"
done
# aq profile --output json prints one JSON document.
"$AQ" profile "$tmp/job.textproto" --iterations 1 --warmup 0 --threads 1 \
  --output json >"$tmp/p.json" 2>"$tmp/err" || fail "profile --output json: $(cat "$tmp/err")"
python3 -c 'import json,sys; json.load(sys.stdin)' <"$tmp/p.json" 2>/dev/null ||
  fail "profile --output json is not one JSON document: $(head -c 300 "$tmp/p.json")"

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "all command-line checks passed"
