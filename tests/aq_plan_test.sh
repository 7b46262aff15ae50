#!/usr/bin/env bash
# Process-level test of `aq profile` and `aq plan` as a user runs them.
set -uo pipefail
AQ="$1"
SPEC="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# A PipeDream profile: input, a diamond, a __getitem__ sink.
cat >"$tmp/dag.txt" <<'PROFILE'
node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=602112.0, parameter_size=0.000
node2 -- Conv2d -- forward_compute_time=1.5, backward_compute_time=3.0, activation_size=[1000.0; 24.0], parameter_size=7000.0
node3 -- ReLU -- forward_compute_time=0.25, backward_compute_time=0.5, activation_size=1024.0, parameter_size=0.0
node4 -- Conv2d -- forward_compute_time=2.0, backward_compute_time=4.0, activation_size=1024.0, parameter_size=36000.0
node5 -- Add -- forward_compute_time=0.1, backward_compute_time=0.1, activation_size=1024.0, parameter_size=0.0
node6 -- Linear -- forward_compute_time=3.0, backward_compute_time=6.0, activation_size=40.0, parameter_size=40000.0
	node1 -- node2
	node2 -- node3
	node2 -- node4
	node3 -- node5
	node4 -- node5
	node5 -- node6
PROFILE

"$AQ" plan --profile "$tmp/dag.txt" --workers 2 --output json >"$tmp/plan.json" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || fail "plan dag: exit $rc: $(cat "$tmp/err")"
grep -q '"time_per_minibatch_s":' "$tmp/plan.json" || fail "json lacks time_per_minibatch_s"
grep -q '"stages":\[{"start":0,"end":' "$tmp/plan.json" || fail "json stages: $(cat "$tmp/plan.json")"
grep -q '"replicas":' "$tmp/plan.json" || fail "json lacks replicas"

python3 -c 'import json,sys; json.load(sys.stdin)' <"$tmp/plan.json" 2>/dev/null ||
  fail "plan --output json is not one JSON document: $(cat "$tmp/plan.json")"
# The profile as the argument (an existing file) is the same as --profile.
"$AQ" plan "$tmp/dag.txt" --workers 2 --output json >"$tmp/plan2.json" 2>"$tmp/err" ||
  fail "plan PROFILE: $(cat "$tmp/err")"
cmp -s "$tmp/plan.json" "$tmp/plan2.json" || fail "plan PROFILE differs from plan --profile PROFILE"
"$AQ" plan "$tmp/dag.txt" --profile "$tmp/dag.txt" --workers 2 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "profile given twice: exit $rc"
"$AQ" plan "$SPEC" --workers 2 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "plan of a job spec: exit $rc"
grep -q "is a job spec, not a profile" "$tmp/err" || fail "plan of a job spec: $(cat "$tmp/err")"

"$AQ" plan --profile "$tmp/dag.txt" --workers 2 2 --bandwidth 1e10 1e9 >"$tmp/plan.txt" 2>&1 ||
  fail "hierarchical text plan: $(cat "$tmp/plan.txt")"
grep -q "^time per minibatch" "$tmp/plan.txt" || fail "text plan: $(cat "$tmp/plan.txt")"

# Errors name the problem and exit 2.
"$AQ" plan --profile "$tmp/dag.txt" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "no workers: exit $rc"
grep -q -- "--workers is required" "$tmp/err" || fail "no workers message"
"$AQ" plan --profile "$tmp/dag.txt" --workers 2 2 --bandwidth 1e9 >/dev/null 2>"$tmp/err"
grep -q "bandwidth has 1 values for 2 levels" "$tmp/err" || fail "bandwidth count: $(cat "$tmp/err")"
printf 'node1 -- A -- forward_compute_time=oops, backward_compute_time=1, activation_size=1, parameter_size=1\n' >"$tmp/bad.txt"
"$AQ" plan --profile "$tmp/bad.txt" --workers 2 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "bad profile: exit $rc"
grep -q "bad.txt: line 1: 'oops' is not a number" "$tmp/err" || fail "bad profile message: $(cat "$tmp/err")"
"$AQ" plan --profile "$tmp/dag.txt" --workers 9 --straight >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "too many stages: exit $rc"
grep -q "needs at least 9 stages" "$tmp/err" || fail "too many stages message: $(cat "$tmp/err")"
"$AQ" plan --profile "$tmp/dag.txt" --workers 2 --cost-model aqueduct >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "aqueduct on a DAG: exit $rc"
grep -q "plans chains" "$tmp/err" || fail "aqueduct DAG message: $(cat "$tmp/err")"

# Profile a real job spec, then plan it with both cost models.
"$AQ" profile "$SPEC" --iterations 2 --warmup 1 --threads 1 --output "$tmp/p.json" 2>"$tmp/err" ||
  fail "profile: $(cat "$tmp/err")"
grep -q '"forwardMs"' "$tmp/p.json" || fail "profile json: $(head -c 300 "$tmp/p.json")"
"$AQ" profile "$SPEC" --iterations 1 --warmup 0 --threads 1 --format pipedream --output "$tmp/p.txt" 2>/dev/null ||
  fail "profile pipedream"
grep -q "^layer1 -- .* -- forward_compute_time=" "$tmp/p.txt" || fail "pipedream profile: $(head -3 "$tmp/p.txt")"
for model in pipedream aqueduct; do
  "$AQ" plan --profile "$tmp/p.json" --workers 3 --cost-model "$model" \
    --output json >"$tmp/plan-$model.json" 2>"$tmp/err" || fail "plan $model: $(cat "$tmp/err")"
  grep -q "\"cost_model\":\"$model\"" "$tmp/plan-$model.json" || fail "plan $model json"
  grep -q '"first_layer":0' "$tmp/plan-$model.json" || fail "plan $model layers: $(cat "$tmp/plan-$model.json")"
done

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "all aq plan/profile checks passed"
