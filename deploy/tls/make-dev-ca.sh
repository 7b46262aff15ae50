#!/usr/bin/env bash
# Makes a development certificate authority, certificates and bearer tokens
# for a local or test Aqueduct cluster with Debian's openssl. NOT for
# production: the CA key sits beside the certificates (docs/security.md says
# what to do instead).
#
#   deploy/tls/make-dev-ca.sh DIR [--hosts IP,IP,...] [--workers N]
#                                 [--worker-prefix P] [--first K]
#                                 [--users NAME,NAME,...] [--admins NAME,...]
#                                 [--days D]
#
# Writes into DIR (created, mode 700):
#   ca.pem ca.key                 the CA (key mode 600)
#   coordinator.pem/.key          server + client certificate for the
#                                 coordinator (it calls workers over mutual
#                                 TLS); SANs: 127.0.0.1, ::1, localhost and
#                                 every --hosts address
#   worker.pem/.key               one server + client certificate the local
#                                 workers share (same SANs)
#   tokens                        the coordinator's --tokens_file: one line
#                                 per worker (P<K> ... P<K+N-1>, default
#                                 worker-0 ... worker-N-1: each worker's
#                                 --worker_id), per user (role user) and per
#                                 admin (role admin: any job priority;
#                                 default: one named admin when --users is
#                                 not given)
#   token.<name>                  each credential's token alone, for a
#                                 daemon's or aq's --token_file
# Existing files in DIR are replaced.
set -euo pipefail
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
dir="${1:-}"
[ -z "$dir" ] || [ "${dir:0:1}" = "-" ] && { usage >&2; exit 2; }
shift
hosts="" workers=4 users="" admins="admin" days=30 prefix="worker-" first=0
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --users) users="$2"; [ -n "${admins_given:-}" ] || admins=""; shift 2 ;;
    --admins) admins="$2"; admins_given=1; shift 2 ;;
    --worker-prefix) prefix="$2"; shift 2 ;;
    --first) first="$2"; shift 2 ;;
    --days) days="$2"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "make-dev-ca: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || {
  echo "make-dev-ca: openssl is missing (apt-get install openssl)" >&2; exit 1; }
umask 077
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"

san="IP:127.0.0.1,IP:::1,DNS:localhost"
IFS=',' read -ra extra <<< "$hosts"
for h in "${extra[@]}"; do
  [ -z "$h" ] && continue
  if [[ "$h" =~ ^[0-9.]+$ || "$h" == *:* ]]; then san="$san,IP:$h"; else san="$san,DNS:$h"; fi
done

openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -nodes -keyout ca.key -out ca.pem -days "$days" -subj "/CN=Aqueduct dev CA" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

# leaf NAME: NAME.pem / NAME.key signed by the CA, for servers and clients.
leaf() {
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.csr" -subj "/CN=aqueduct-$1" 2>/dev/null
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' \
    "$san" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out "$1.pem" -days "$days" -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
leaf coordinator
leaf worker
rm -f ca.srl

# Tokens: 256 bits each.
: > tokens
add_token() {
  local token
  token="$(openssl rand -hex 32)"
  printf '%s %s %s\n' "$token" "$1" "$2" >> tokens
  printf '%s\n' "$token" > "token.$2"
}
for ((i = first; i < first + workers; i++)); do add_token worker "$prefix$i"; done
IFS=',' read -ra names <<< "$users"
for u in "${names[@]}"; do [ -n "$u" ] && add_token user "$u"; done
IFS=',' read -ra names <<< "$admins"
for u in "${names[@]}"; do [ -n "$u" ] && add_token admin "$u"; done
chmod 600 ./*.key tokens token.*
echo "make-dev-ca: CA, certificates and tokens for $workers workers, users '$users' and admins '$admins' in $(pwd)"
