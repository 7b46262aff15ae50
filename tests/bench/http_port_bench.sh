#!/usr/bin/env bash
# The HTTP port against slow and flooding clients (issue 22, item 15):
# builds tests/bench:http_port_server, the daemons' HTTP server alone with
# their options, and runs tests/bench/http_port_bench.py against it (1,000
# slow connections while scraping /metrics, then a 200 MB header flood; the
# scrape latencies and the server's resident memory). docs/benchmarks.md
# has the figures.
#
#   tests/bench/http_port_bench.sh [--rev REV] [http_port_bench.py flags]
#
# --rev REV: the server built instead from REV's common/http_server.{h,cc}
# (with g++ and the Debian libraries, outside Bazel), e.g. --rev 506d355 for
# the cpp-httplib server this replaced.
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/setup.sh
rev=""
if [ "${1:-}" = "--rev" ]; then rev="$2"; shift 2; fi

# The -l options of third_party/systemlibs' targets named in "$@".
linkopts() {
  python3 - "$@" <<'PY'
import re, sys
text = open("third_party/systemlibs/BUILD").read()
absl = re.search(r"ABSL_LINKOPTS = \[(.*?)\]", text, re.S).group(1)
out = re.findall(r'"(-[^"]+)"', absl)
for name in sys.argv[1:]:
    block = re.search(r'name = "%s",.*?linkopts = \[(.*?)\]' % name, text,
                      re.S).group(1)
    out += re.findall(r'"(-[^"]+)"', block)
print(" ".join(out))
PY
}

if [ -z "$rev" ]; then
  bazel build //tests/bench:http_port_server >/dev/null 2>&1 ||
    bazel build //tests/bench:http_port_server
  server="$(bazel info bazel-bin 2>/dev/null)/tests/bench/http_port_server"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  mkdir -p "$dir/common"
  for f in http_server auth file_system logging; do
    for ext in h cc; do
      git show "$rev:common/$f.$ext" >"$dir/common/$f.$ext"
    done
  done
  libs="microhttpd"
  git show "$rev:common/http_server.cc" | grep -q '<httplib.h>' &&
    libs="httplib"
  # shellcheck disable=SC2046
  g++ -std=c++17 -O3 -I"$dir" \
    -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL \
    -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT \
    -DCPPHTTPLIB_BROTLI_SUPPORT \
    -o "$dir/http_port_server" tests/bench/http_port_server.cc \
    "$dir"/common/*.cc \
    $(linkopts absl_flags "$libs" crypto spdlog)
  server="$dir/http_port_server"
fi
python3 tests/bench/http_port_bench.py "$server" "$@"
