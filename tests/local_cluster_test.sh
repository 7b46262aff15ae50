#!/usr/bin/env bash
# deploy/local/aqueduct-local.sh as a new user runs it: a flat directory of
# binaries as --bin, a --data-root that adds to the default roots, start
# with TLS and tokens (the dashboard's login URL printed), add-worker, aq
# through <state-dir>/aq.env, status and stop.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3" LOCAL="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"
mkdir -p "$tmp/bin" "$tmp/data"
ln -s "$(realpath "$COORDINATOR")" "$tmp/bin/aqueduct-coordinator"
ln -s "$(realpath "$WORKER")" "$tmp/bin/aqueduct-worker"
ln -s "$(realpath "$AQ")" "$tmp/bin/aq"
state="$tmp/state"
local_sh() { "$LOCAL" "$@" --state-dir "$state" --bin "$tmp/bin"; }
trap 'local_sh stop >/dev/null 2>&1' EXIT
address=$(local_sh start --workers 1 --data-root "$tmp/data" 2>"$tmp/start.err") ||
  { fail "start: $(cat "$tmp/start.err")"; exit 1; }
grep -q "^aqueduct-local: dashboard at https://127.0.0.1:[0-9]*/?token=[0-9a-f]\{64\}$" "$tmp/start.err" ||
  fail "no dashboard login URL: $(cat "$tmp/start.err")"
[[ "$address" =~ ^127\.0\.0\.1:[0-9]+$ ]] || fail "start printed '$address'"
# shellcheck source=/dev/null
source "$state/aq.env"
[ "$(local_sh add-worker 2>"$tmp/add.err")" = "local-2" ] || fail "add-worker: $(cat "$tmp/add.err")"
"$tmp/bin/aq" workers >"$tmp/workers.out" || fail "aq workers through aq.env"
[ "$(grep -c HEALTHY "$tmp/workers.out")" -eq 2 ] || fail "workers: $(cat "$tmp/workers.out")"
# A named context (aq config) in place of aq.env: the current one, one
# named by --context, and a flag over the context.
(
  unset AQ_COORDINATOR AQ_TLS_CA AQ_TOKEN_FILE
  export AQ_CONFIG="$tmp/aq-config"
  aq_() { "$tmp/bin/aq" "$@"; }
  aq_ config set-context local --coordinator "$address" --tls_ca "$state/tls/ca.pem" \
    --token_file "$state/tls/token.admin" 2>/dev/null || fail "set-context"
  aq_ config set-context elsewhere --coordinator 127.0.0.1:1 2>/dev/null || fail "set-context elsewhere"
  aq_ workers | grep -q HEALTHY || fail "aq workers through the current context"
  aq_ config use-context elsewhere || fail "use-context"
  aq_ workers >/dev/null 2>"$tmp/ctx.err"
  [ $? -eq 3 ] && grep -q "(context elsewhere)" "$tmp/ctx.err" || fail "unreachable context: $(cat "$tmp/ctx.err")"
  aq_ --context local workers | grep -q HEALTHY || fail "aq --context local"
  # Flags win over the current context's settings.
  aq_ workers --coordinator "$address" --tls_ca "$state/tls/ca.pem" \
    --token_file "$state/tls/token.admin" | grep -q HEALTHY || fail "flags over the context"
  exit "$fails"
) || fails=$((fails + 1))
# The worker reads the defaults and the root given.
roots=$(tr '\0' ' ' <"/proc/$(cat "$state/worker-2.pid")/cmdline")
[[ "$roots" == *"--data_root $tmp/data"* ]] || fail "the given root: $roots"
if [ -d /usr/share/games/fortunes ]; then
  [[ "$roots" == *"--data_root /usr/share/games/fortunes"* ]] || fail "the default root: $roots"
fi
local_sh status | grep -q "^local-2 .*HEALTHY" || fail "status: $(local_sh status)"
local_sh stop
[ -e "$state/worker-1.pid" ] && fail "stop left a pid file"
[ "$fails" -eq 0 ] && echo "local_cluster_test: passed"
exit $((fails > 0))
