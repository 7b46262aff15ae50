#!/usr/bin/env bash
# Process-level test of the file roots (issue 14, "Files"): a coordinator
# with --checkpoint_root and a worker with --data_root, --checkpoint_root
# and --max_text_bytes, as users run them. Jobs naming a file outside the
# roots (absolute, through "..", through a symbolic link), a FIFO, a text
# over the cap, a safetensors file whose header claims more than it holds,
# a checkpoint.dir or a --resume outside the coordinator's root: each fails
# promptly with an error naming the field, the path and the flag, quoting
# nothing of the file; the daemons stay up and then train a job whose files
# are where they may be, checkpointing and resuming inside the root.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

mkdir -p "$tmp/data" "$tmp/ck"
"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$tmp/cstate" \
  --checkpoint_root "$tmp/ck" >"$tmp/coordinator.log" 2>&1 &
cpid=$!; pids+=("$cpid")
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
"$WORKER" --coordinator "$addr" --worker_id w1 --listen 127.0.0.1:0 --threads 1 \
  --measure_gemm=false --data_root "$tmp/data" --checkpoint_root "$tmp/ck" \
  --max_text_bytes 20000 >"$tmp/w1.log" 2>&1 &
wpid=$!; pids+=("$wpid")
one_healthy() { [ "$(healthy_count)" -eq 1 ]; }
wait_until 15 one_healthy || { fail "worker never HEALTHY: $(aq workers)"; exit 1; }

for _ in $(seq 200); do printf 'the cat sat on the mat. '; done >"$tmp/data/ok.txt"
echo "SECRET-CONTENT root:\$6\$hash:19000" >"$tmp/secret.txt"
ln -sfn "$tmp/secret.txt" "$tmp/data/link.txt"
mkfifo "$tmp/data/fifo.txt"
head -c 30000 /dev/zero | tr '\0' 'a' >"$tmp/data/big.txt"
printf '\000\000\000\000\000\001\000\000{}      ' >"$tmp/data/claims.safetensors"

# A one-stage GPT on the text files $1 (quoted, comma-separated), plus the
# text-format lines $2.
spec() {
  cat <<SPEC
model {
  layers { token_embedding { vocab_size: 16 dim: 16 } }
  layers { position_embedding { context: 8 dim: 16 } }
  layers { transformer_block { dim: 16 heads: 2 } }
  layers { layer_norm { normalized_shape: 16 } }
  layers { linear { in_features: 16 out_features: 16 bias: false } tie_weight_to: 0 }
}
data { text { files: [$1] context: 8 } }
optimizer { adam { lr: 0.01 } }
batch_size: 8
max_steps: 20
$2
SPEC
}

# Submits spec $1 (a name) and expects it refused or FAILED within 60 s,
# the output holding $2 and not the secret file's content.
refused() {
  local name=$1 want=$2 start=$SECONDS
  timeout 60 "$AQ" submit "$tmp/$name.textproto" --wait --coordinator "$addr" \
    >"$tmp/$name.out" 2>&1
  local rc=$?
  [ "$rc" -ne 0 ] || fail "$name: the job succeeded"
  [ "$rc" -ne 124 ] || fail "$name: still waiting after 60 s"
  grep -qF -- "$want" "$tmp/$name.out" || fail "$name: '$want' not in: $(cat "$tmp/$name.out")"
  grep -q "SECRET\|root:" "$tmp/$name.out" && fail "$name: the error quotes the file: $(cat "$tmp/$name.out")"
  [ $((SECONDS - start)) -lt 30 ] || fail "$name: took $((SECONDS - start)) s"
}

spec "\"$tmp/data/ok.txt\", \"/etc/shadow\"" "" >"$tmp/shadow.textproto"
refused shadow "data.text.files[1]: '/etc/shadow' is outside --data_root ($tmp/data)"
spec "\"$tmp/data/../secret.txt\"" "" >"$tmp/dots.textproto"
refused dots "data.text.files[0]: '$tmp/data/../secret.txt' is outside --data_root"
spec "\"$tmp/data/link.txt\"" "" >"$tmp/link.textproto"
refused link "data.text.files[0]: '$tmp/data/link.txt' is outside --data_root"
spec "\"$tmp/data/fifo.txt\"" "" >"$tmp/fifo.textproto"
refused fifo "data.text.files[0]: '$tmp/data/fifo.txt' is a FIFO, not a regular file"
spec "\"$tmp/data/ok.txt\", \"$tmp/data/big.txt\"" "" >"$tmp/big.textproto"
refused big "data.text.files[1]: '$tmp/data/big.txt' holds 30000 bytes; the text files of a job may hold 20000 bytes in all (--max_text_bytes)"
spec "\"$tmp/data/ok.txt\"" 'init_weights: "/dev/zero"' >"$tmp/zero.textproto"
refused zero "init_weights: '/dev/zero' is outside --data_root"
spec "\"$tmp/data/ok.txt\"" "init_weights: \"$tmp/data/claims.safetensors\"" >"$tmp/claims.textproto"
refused claims "is not a safetensors file: its header length does not fit its 16 bytes"
spec "\"$tmp/data/ok.txt\"" 'checkpoint { dir: "/etc/ck" every_steps: 10 }' >"$tmp/ckout.textproto"
refused ckout "checkpoint.dir: '/etc/ck' is outside the coordinator's --checkpoint_root ($tmp/ck)"
spec "\"$tmp/data/ok.txt\"" "" >"$tmp/good.textproto"
aq submit "$tmp/good.textproto" --resume /etc >"$tmp/resume.out" 2>&1 &&
  fail "--resume /etc accepted"
grep -qF "'/etc/manifest.json' is outside the coordinator's --checkpoint_root" "$tmp/resume.out" ||
  fail "--resume /etc: $(cat "$tmp/resume.out")"

kill -0 "$wpid" 2>/dev/null || fail "the worker died"
kill -0 "$cpid" 2>/dev/null || fail "the coordinator died"
one_healthy || fail "the worker is not HEALTHY: $(aq workers)"

# Files where they may be: the job trains, checkpoints and resumes.
spec "\"$tmp/data/ok.txt\"" "checkpoint { dir: \"$tmp/ck\" every_steps: 10 }" >"$tmp/ck.textproto"
aq submit "$tmp/ck.textproto" --wait --output json >"$tmp/ck.json" 2>"$tmp/ck.err" ||
  fail "the job inside the roots: $(cat "$tmp/ck.err") $(tail -5 "$tmp/w1.log")"
grep -q '"state":"JOB_SUCCEEDED"' "$tmp/ck.json" || fail "not SUCCEEDED: $(cat "$tmp/ck.json")"
id=$(sed -E 's/.*"job_id":"([^"]+)".*/\1/' "$tmp/ck.json")
[ -f "$tmp/ck/$id/v00000010/manifest.json" ] || fail "no checkpoint in $tmp/ck/$id: $(ls -R "$tmp/ck")"
sed 's/^max_steps: 20$/max_steps: 30/' "$tmp/ck.textproto" >"$tmp/more.textproto"
aq submit "$tmp/more.textproto" --resume "$tmp/ck/$id/v00000010" --wait >"$tmp/more.out" 2>&1 ||
  fail "resume inside the root: $(cat "$tmp/more.out")"

if [ "$fails" -gt 0 ]; then
  echo "worker log:"; tail -20 "$tmp/w1.log"
  echo "$fails failure(s)"; exit 1
fi
echo "PASS"
