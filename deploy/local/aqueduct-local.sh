#!/usr/bin/env bash
# Starts and stops a local Aqueduct cluster: one coordinator and N workers on
# this machine, with logs and pid files in a state directory.
#
#   deploy/local/aqueduct-local.sh start [--workers N] [--port P] [--state-dir DIR]
#                                        [--threads T] [--bin DIR] [--data-root DIR]
#                                        [--http-port P] [--no-tls]
#   deploy/local/aqueduct-local.sh add-worker [--state-dir DIR] [--threads T]
#                                        [--bin DIR] [--data-root DIR]
#   deploy/local/aqueduct-local.sh stop   [--state-dir DIR]
#   deploy/local/aqueduct-local.sh status [--state-dir DIR]
#
# Jobs checkpoint under <state-dir>/checkpoints only (the daemons'
# --checkpoint_root); workers read data under the example datasets'
# directories that exist (/usr/share/games/fortunes,
# /usr/share/datasets/fashion-mnist) and under each --data-root given
# (repeatable). add-worker starts one more worker in a running cluster (up
# to 8 more than start made: their credentials are made at start).
#
# TLS and tokens are on unless --no-tls: start makes a development CA,
# certificates and tokens in <state-dir>/tls (deploy/tls/make-dev-ca.sh;
# workers local-1 ... local-N, user admin) and writes <state-dir>/aq.env,
# which sets AQ_COORDINATOR, AQ_TLS_CA and AQ_TOKEN_FILE for aq:
#   source <state-dir>/aq.env && aq jobs
#
# The coordinator serves its dashboard and /metrics on 127.0.0.1:P
# (--http-port; 0, the default, picks a free port) and each worker its
# /metrics on a free port, with the same tokens; start writes the
# dashboard's address to <state-dir>/dashboard.url (open it once with
# ?token=<the token in <state-dir>/tls/token.admin>).
#
# start waits (at most 60 s) until every worker is registered and HEALTHY,
# then prints the coordinator's address. Port 0 (the default) picks a free
# port. Binaries come from --bin: a bazel-bin (coordinator/coordinator,
# worker/worker, client/aq) or a flat directory (coordinator, worker and aq,
# or aqueduct-coordinator, aqueduct-worker and aq); default: Bazel's
# bazel-bin of the opt build. start prints the dashboard's login URL on
# stderr.
set -euo pipefail
# The state directory holds the journal, logs, models, TLS keys and tokens:
# everything this script and the daemons make there is the user's alone.
umask 077
cmd="${1:-}"
[ -n "$cmd" ] && shift
workers=1 port=0 http_port=0 threads=1 bin="" state="${AQ_STATE_DIR:-/tmp/aqueduct-local}"
data_roots=() tls=1
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --http-port) http_port="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --state-dir) state="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --data-root) data_roots+=("$2"); shift 2 ;;
    --no-tls) tls=0; shift ;;
    *) echo "aqueduct-local: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  root="$(cd "$(dirname "$0")/../.." && pwd)"
  bin="$(cd "$root" && bazel info --config=opt bazel-bin 2>/dev/null)"
fi
# A binary of --bin: its bazel-bin path, or a flat directory's file.
binary() {
  local name
  for name in "$@"; do
    [ -x "$bin/$name" ] && [ -f "$bin/$name" ] && { echo "$bin/$name"; return; }
  done
  echo "aqueduct-local: none of $* in $bin" >&2
  exit 1
}
# Default data roots, then the ones given: --data-root adds to them.
roots=()
for d in /usr/share/games/fortunes /usr/share/datasets/fashion-mnist; do
  [ -d "$d" ] && roots+=(--data_root "$d")
done
for d in ${data_roots[@]+"${data_roots[@]}"}; do roots+=(--data_root "$d"); done

# Worker i of the cluster at `address` (TLS when the cluster has it).
start_worker() {
  local i=$1 address=$2 worker_tls=()
  if [ -s "$state/tls/token.local-$i" ]; then
    worker_tls=(--tls_ca "$state/tls/ca.pem" --tls_cert "$state/tls/worker.pem"
      --tls_key "$state/tls/worker.key" --http_tokens_file "$state/tls/tokens"
      --token_file "$state/tls/token.local-$i")
  elif [ -d "$state/tls" ]; then
    echo "aqueduct-local: no credential for worker local-$i (start made $((i - 1)))" >&2
    return 1
  fi
  "$(binary worker/worker worker aqueduct-worker)" --coordinator "$address" \
    --worker_id "local-$i" --checkpoint_root "$state/checkpoints" \
    ${roots[@]+"${roots[@]}"} ${worker_tls[@]+"${worker_tls[@]}"} \
    --threads "$threads" --listen 127.0.0.1:0 --http_listen 127.0.0.1:0 \
    >"$state/worker-$i.log" 2>&1 &
  echo $! >"$state/worker-$i.pid"
}

# Waits (at most 60 s) until `want` workers are HEALTHY.
wait_healthy() {
  local want=$1 address=$2 healthy=0
  for _ in $(seq 600); do
    healthy=$("$(binary client/aq aq)" workers --coordinator "$address" --output json 2>/dev/null |
      grep -o '"state":"WORKER_HEALTHY"' | wc -l || true)
    [ "$healthy" -ge "$want" ] && return 0
    sleep 0.1
  done
  echo "aqueduct-local: only $healthy of $want workers registered; logs in $state" >&2
  return 1
}

stop() {
  for f in "$state"/worker-*.pid "$state"/coordinator.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

case "$cmd" in
  start)
    mkdir -p "$state" "$state/checkpoints"
    # Also when an older version of this script left them 0755.
    chmod 700 "$state" "$state/checkpoints"
    stop
    rm -rf "$state"/coordinator.port "$state"/aq.env "$state/tls"
    coordinator_tls=()
    if [ "$tls" = 1 ]; then
      # Credentials for 8 workers more than start runs, for add-worker.
      "$(dirname "$0")/../tls/make-dev-ca.sh" "$state/tls" --workers $((workers + 8)) \
        --worker-prefix local- --first 1 --admins admin >/dev/null
      coordinator_tls=(--tls_ca "$state/tls/ca.pem" --tls_cert "$state/tls/coordinator.pem"
        --tls_key "$state/tls/coordinator.key" --tokens_file "$state/tls/tokens")
      export AQ_TLS_CA="$state/tls/ca.pem" AQ_TOKEN_FILE="$state/tls/token.admin"
    fi
    "$(binary coordinator/coordinator coordinator aqueduct-coordinator)" \
      --listen "127.0.0.1:$port" --http_listen "127.0.0.1:$http_port" \
      --checkpoint_root "$state/checkpoints" ${coordinator_tls[@]+"${coordinator_tls[@]}"} \
      --state_dir "$state" >"$state/coordinator.log" 2>&1 &
    echo $! >"$state/coordinator.pid"
    for _ in $(seq 100); do [ -s "$state/coordinator.port" ] && break; sleep 0.1; done
    if [ ! -s "$state/coordinator.port" ]; then
      echo "aqueduct-local: the coordinator did not start; see $state/coordinator.log" >&2
      stop; exit 1
    fi
    address="127.0.0.1:$(cat "$state/coordinator.port")"
    echo "$address" >"$state/coordinator.address"
    sed -n 's|.*metrics on \(https*://[^ ]*\)/metrics.*|\1/|p' \
      "$state/coordinator.log" | head -1 >"$state/dashboard.url"
    {
      echo "export AQ_COORDINATOR=$address"
      [ "$tls" = 1 ] && echo "export AQ_TLS_CA=$AQ_TLS_CA AQ_TOKEN_FILE=$AQ_TOKEN_FILE"
    } >"$state/aq.env"
    : >"$state/data-roots"
    for d in ${data_roots[@]+"${data_roots[@]}"}; do printf '%s\n' "$d" >>"$state/data-roots"; done
    for i in $(seq "$workers"); do start_worker "$i" "$address" || { stop; exit 1; }; done
    wait_healthy "$workers" "$address" || { stop; exit 1; }
    if [ -s "$state/dashboard.url" ]; then
      login="$(cat "$state/dashboard.url")"
      [ -s "$state/tls/token.admin" ] && login="${login}?token=$(cat "$state/tls/token.admin")"
      echo "aqueduct-local: dashboard at $login" >&2
    fi
    echo "$address"
    ;;
  add-worker)
    [ -s "$state/coordinator.address" ] || { echo "no local cluster in $state" >&2; exit 1; }
    address="$(cat "$state/coordinator.address")"
    # shellcheck source=/dev/null
    [ -s "$state/aq.env" ] && source "$state/aq.env"
    # The data roots start was given, unless others are.
    if [ ${#data_roots[@]} -eq 0 ] && [ -s "$state/data-roots" ]; then
      while IFS= read -r d; do
        [ -n "$d" ] && roots+=(--data_root "$d")
      done <"$state/data-roots"
    fi
    i=1
    while [ -e "$state/worker-$i.pid" ]; do i=$((i + 1)); done
    start_worker "$i" "$address" || exit 1
    wait_healthy "$i" "$address" || exit 1
    echo "local-$i"
    ;;
  stop) stop ;;
  status)
    # shellcheck source=/dev/null
    [ -s "$state/aq.env" ] && source "$state/aq.env"
    if [ -s "$state/coordinator.address" ]; then
      "$(binary client/aq aq)" workers --coordinator "$(cat "$state/coordinator.address")"
    else
      echo "no local cluster in $state"
    fi
    ;;
  *) echo "usage: aqueduct-local.sh start|add-worker|stop|status [flags]" >&2; exit 2 ;;
esac
