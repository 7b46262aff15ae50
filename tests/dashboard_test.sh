#!/usr/bin/env bash
# The coordinator's dashboard end to end, in Debian's headless Chromium: a
# coordinator with bearer tokens and its HTTP server (--http_listen), two
# workers, a 2-stage pipeline job that trains for a while; while it is
# RUNNING the page is loaded with ?token=...&job=ID, its scripts run, and
# the DOM they built is checked: both workers listed HEALTHY, the job
# RUNNING, a loss curve with points, the plan as 2 stages on the 2 workers,
# the timeline with forward and backward bars and no error shown. The APIs
# refuse a request without a token (401) and /api/jobs is JSON.
#
#   dashboard_test.sh AQ COORDINATOR WORKER MAKE_CA [--screenshot PNG]
#
# --screenshot also saves the page as PNG (1400x1000) while the job runs:
# tests/dashboard_screenshot.sh makes docs/images/dashboard.png with it.
# Skips, saying why, when no Chromium is installed. Bounded in time;
# everything is cleaned up.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3" MAKE_CA="$4"
shift 4
screenshot=""
if [ "${1:-}" = "--screenshot" ]; then screenshot="$2"; fi
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"
# Debian's python, whatever python3 is first on PATH.
PY=/usr/bin/python3

skip() {
  echo "SKIPPED: $1"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="dashboard_test" tests="1" failures="0" skipped="1">
<testcase name="DashboardInChromium"><skipped message="$1"/></testcase>
</testsuite></testsuites>
XML
  fi
  exit 0
}

# Debian's chromium-headless-shell (or chromium itself, headless).
browser=""
for b in chromium-headless-shell /usr/lib/chromium/chromium-headless-shell chromium; do
  if command -v "$b" >/dev/null 2>&1; then browser=$(command -v "$b"); break; fi
done
[ -n "$browser" ] || skip "no Chromium (apt-get install chromium-headless-shell); the dashboard was not loaded in a browser"
[ -x "$PY" ] || skip "no $PY (Debian's python3) to read the page's DOM"
command -v curl >/dev/null || skip "no curl to call the dashboard's API"
extra=()
case "$(basename "$browser")" in chromium) extra=(--headless) ;; esac
# A browser run: its own profile, no sandbox (tests may run as root), no
# GPU; the scripts get $1 ms of virtual time (timers fast-forwarded, the
# fetches real); at most 60 s of wall time.
chrome() {
  local budget=$1; shift
  timeout 60 "$browser" "${extra[@]}" --no-sandbox --disable-gpu \
    --user-data-dir="$tmp/chrome-profile" --no-first-run \
    --virtual-time-budget="$budget" "$@" 2>>"$tmp/chrome.log"
}

ca="$tmp/ca"
"$MAKE_CA" "$ca" --workers 2 --users admin >/dev/null || { echo "make-dev-ca failed"; exit 1; }
token=$(cat "$ca/token.admin")
# Plain HTTP with tokens on loopback: with --tls_* the server is HTTPS
# under the dev CA, which this Chromium profile does not trust.
"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$tmp/state" \
  --tokens_file "$ca/tokens" --http_listen 127.0.0.1:0 \
  >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 20 test -s "$tmp/port" || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
# The HTTP port it picked, from its log ("metrics on http://HOST:PORT/metrics").
http_port() { grep -oE 'metrics on http://127\.0\.0\.1:[0-9]+/' "$tmp/coordinator.log" | grep -oE '[0-9]+/$' | tr -d /; }
wait_until 10 http_port >/dev/null || { echo "no HTTP server in the coordinator's log"; cat "$tmp/coordinator.log"; exit 1; }
base="http://127.0.0.1:$(http_port)"
aq() { AQ_TOKEN_FILE="$ca/token.admin" "$AQ" "$@" --coordinator "$addr"; }
for i in 0 1; do
  "$WORKER" --coordinator "$addr" --worker_id "worker-$i" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --token_file "$ca/token.worker-$i" \
    >"$tmp/worker-$i.log" 2>&1 &
  pids+=("$!")
done
two_healthy() { [ "$(healthy_count)" -eq 2 ]; }
wait_until 30 two_healthy || { echo "workers not HEALTHY: $(aq workers)"; cat "$tmp/coordinator.log"; exit 1; }

# Two stages with known compute (Delay sleeps 4 ms forward, 8 ms backward
# per stage and microbatch): about 10 steps a second, so its 600 steps keep
# it RUNNING for a minute at least; cancelled once checked. Wide layers
# inside each half and a narrow cut between them, planned for a slow
# network: the planner's best plan is the 2-stage pipeline (with small
# weights it may prefer one stage replicated, data parallel).
cat >"$tmp/job.textproto" <<'SPEC'
name: "dashboard-demo"
model { layers { flatten {} }
  layers { linear { in_features: 32 out_features: 512 } } layers { relu {} }
  layers { linear { in_features: 512 out_features: 16 } }
  layers { delay { forward_ms: 4 backward_ms: 8 } }
  layers { linear { in_features: 16 out_features: 512 } } layers { relu {} }
  layers { linear { in_features: 512 out_features: 10 } }
  layers { delay { forward_ms: 4 backward_ms: 8 } } }
data { synthetic { sample_shape: [32] num_classes: 10 train_samples: 8192 test_samples: 256 seed: 5 } }
optimizer { sgd { lr: 0.05 momentum: 0.9 } }
batch_size: 32
max_steps: 600
eval_every: 50
pipeline { workers: 2 schedule: "1f1b_flush" microbatches: 4 bandwidth_bytes_per_s: 1e7 }
SPEC
aq submit "$tmp/job.textproto" --output json >"$tmp/submit.json" 2>"$tmp/submit.err" ||
  { echo "submit failed: $(cat "$tmp/submit.err")"; exit 1; }
job=$(json 'd["job_id"]' <"$tmp/submit.json")
field() { aq status "$job" --output json 2>/dev/null | json "$1"; }
# RUNNING with losses reported (so the curve has points) and past the
# first evaluation.
trained_a_while() {
  [ "$(field 'd["state"]')" = JOB_RUNNING ] && [ "$(field 'd.get("step", 0)')" -ge 60 ]
}
wait_until 60 trained_a_while || { echo "job never trained 60 steps: $(aq status "$job")"; exit 1; }

# The API: refused without a token, JSON with one.
code=$(curl -s -o "$tmp/noauth" -w '%{http_code}' "$base/api/jobs")
[ "$code" = 401 ] || fail "/api/jobs without a token: HTTP $code: $(head -c 200 "$tmp/noauth")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/")
[ "$code" = 401 ] || fail "the page without a token: HTTP $code"
code=$(curl -s -o "$tmp/jobs.json" -w '%{http_code}' -H "Authorization: Bearer $token" "$base/api/jobs")
[ "$code" = 200 ] || fail "/api/jobs with the token: HTTP $code: $(head -c 200 "$tmp/jobs.json")"
$PY - "$tmp/jobs.json" "$job" <<'PY' || fail "/api/jobs: $(head -c 400 "$tmp/jobs.json")"
import json, sys
d = json.load(open(sys.argv[1]))
[j] = [j for j in d["jobs"] if j["id"] == sys.argv[2]]
assert j["state"] == "RUNNING", j
assert j["step"] > 0 and j["total_steps"] == 600, j
PY

# What a poll costs the coordinator now (seconds per request, printed).
for api in "jobs" "workers" "job?id=$job" "timeline?id=$job"; do
  curl -s -o "$tmp/api.out" -w "/api/$api: HTTP %{http_code}, %{size_download} bytes, %{time_total} s\n" \
    -H "Authorization: Bearer $token" "$base/api/$api" | sed "s/$job/JOB/"
done

# The page in the browser, while the job trains: 4 s of virtual time is
# a few polls.
page="$base/?token=$token&job=$job"
start=$SECONDS
chrome 4000 --dump-dom "$page" >"$tmp/dom.html"
echo "dump-dom took $((SECONDS - start)) s; DOM $(wc -c <"$tmp/dom.html") bytes"
[ -s "$tmp/dom.html" ] || { fail "Chromium dumped no DOM"; tail -20 "$tmp/chrome.log" >&2; }
$PY - "$tmp/dom.html" "$job" <<'PY' || fail "the page's DOM (saved as $tmp/dom.html) is not as expected"
import sys
from html.parser import HTMLParser

class Dom(HTMLParser):
    """Elements as (tag, attrs, ids of enclosing elements)."""
    def __init__(self):
        super().__init__()
        self.stack, self.elements = [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        within = [i for _, i in self.stack if i]
        self.elements.append((tag, a, within))
        if tag not in ("br", "img", "meta", "input", "link", "hr"):
            self.stack.append((tag, a.get("id")))
    def handle_startendtag(self, tag, attrs):
        a = dict(attrs)
        self.elements.append((tag, a, [i for _, i in self.stack if i]))
    def handle_endtag(self, tag):
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                del self.stack[k:]
                break

dom = Dom()
dom.feed(open(sys.argv[1]).read())
job = sys.argv[2]
def find(inside, tag=None, **want):
    return [a for t, a, w in dom.elements if inside in w and (tag is None or t == tag)
            and all(a.get(k.replace("_", "-")) == v if v is not True else k.replace("_", "-") in a
                    for k, v in want.items())]
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)
        print("DOM check failed:", what, file=sys.stderr)

workers = find("workers", "tr", data_worker=True)
check(sorted(a["data-worker"] for a in workers) == ["worker-0", "worker-1"],
      "workers listed: %s" % [a.get("data-worker") for a in workers])
check(all(a["data-state"] == "HEALTHY" for a in workers),
      "workers' states: %s" % [a.get("data-state") for a in workers])
rows = find("jobs", "tr", data_job=job)
check(len(rows) == 1 and rows[0]["data-state"] == "RUNNING",
      "job row: %s" % rows)
paths = find("loss-curve", "path")
check(len(paths) == 1 and int(paths[0].get("data-points", 0)) >= 2,
      "loss curve path: %s" % paths)
evals = find("loss-curve", "circle")
check(len(evals) >= 1, "evaluation marks on the loss curve: %d" % len(evals))
ticks = find("loss-curve", "text", **{"class": "tick y"})
check(len(ticks) >= 2, "loss curve y ticks: %d" % len(ticks))
stages = find("plan", "div", data_stage=True)
check(sorted(a["data-stage"] for a in stages) == ["0", "1"], "plan stages: %s" % stages)
on = sorted(a.get("data-workers", "") for a in stages)
check(sorted(on) == ["worker-0", "worker-1"], "workers of the plan's stages: %s" % on)
for kind in ("forward", "backward"):
    bars = find("timeline", "rect", data_kind=kind)
    check(len(bars) >= 4, "timeline %s bars: %d" % (kind, len(bars)))
axis = find("timeline", "text", **{"class": "tick x"})
check(len(axis) >= 3, "timeline time-axis ticks: %d" % len(axis))
errors = [a for t, a, w in dom.elements if a.get("id") == "error"]
check(len(errors) == 1 and "hidden" in errors[0], "the error box is shown")
print("DOM: %d workers, job RUNNING, %s loss points, %d evaluation marks, %d stages, "
      "%d forward and %d backward bars" % (
          len(workers), paths[0].get("data-points") if paths else 0, len(evals), len(stages),
          len(find("timeline", "rect", data_kind="forward")),
          len(find("timeline", "rect", data_kind="backward"))))
sys.exit(1 if problems else 0)
PY
# An error is shown, not swallowed: a job that does not exist.
chrome 2000 --dump-dom "$base/?token=$token&job=job-nope" >"$tmp/dom-nope.html"
grep -q "/api/job?id=job-nope: HTTP 404: job 'job-nope' does not exist" "$tmp/dom-nope.html" ||
  fail "the page does not show the API's error for an unknown job: $(grep -o '<div id="error"[^<]*' "$tmp/dom-nope.html")"

if [ -n "$screenshot" ]; then
  # A few more seconds of polls so the throughput history has points.
  chrome 6000 --hide-scrollbars --window-size=1400,1000 --screenshot="$screenshot" "$page" >/dev/null
  if [ -s "$screenshot" ]; then echo "wrote $screenshot"; else fail "no screenshot at $screenshot"; fi
fi

aq cancel "$job" >/dev/null || fail "cancel $job"
if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed; the coordinator's log:" >&2
  tail -40 "$tmp/coordinator.log" >&2
  exit 1
fi
echo "PASS"
