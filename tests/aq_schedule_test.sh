#!/usr/bin/env bash
# Process-level test of `aq schedule` as a user runs it: every schedule's
# bubble at p = 4, m = 8 (PARALLELISM.md's table), a schedule file written
# with -o, edited by hand and read back (the validator names the rank and
# the action), a compute-only file of one's own, and bad input refused.
set -uo pipefail
AQ="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
json() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }

"$AQ" schedule all --ranks 4 --microbatches 8 --costs 1,2,1,1 --output json \
  >"$tmp/all.json" 2>"$tmp/err" || fail "schedule all: $(cat "$tmp/err")"
for want in gpipe:0.375 1f1b_flush:0.375 interleaved_1f1b:0.1875 zb_h1:0.125 \
  zb_h2:0 zb_v:0; do
  name=${want%%:*} bubble=${want##*:}
  got=$(json "[s['bubble'] for s in d['schedules'] if s['schedule'] == '$name'][0]" <"$tmp/all.json")
  python3 -c "import sys; sys.exit(abs($got - $bubble) > 0.03)" ||
    fail "$name: bubble $got, want $bubble"
done

# A file written with -o reads back to the same figures.
"$AQ" schedule zb_h1 --ranks 3 --microbatches 4 -o "$tmp/zb.txt" --output json \
  >"$tmp/zb.json" 2>"$tmp/err" || fail "schedule -o: $(cat "$tmp/err")"
"$AQ" schedule "$tmp/zb.txt" --output json >"$tmp/back.json" 2>"$tmp/err" ||
  fail "schedule FILE: $(cat "$tmp/err")"
[ "$(json 'd["step_time"]' <"$tmp/zb.json")" = "$(json 'd["step_time"]' <"$tmp/back.json")" ] ||
  fail "the file's step time differs: $(cat "$tmp/zb.json") / $(cat "$tmp/back.json")"

# Broken by hand: the validator names the rank and the action.
sed -E 's/ 2I1 / 2W1 2I1 /' "$tmp/zb.txt" >"$tmp/broken.txt"
"$AQ" schedule "$tmp/broken.txt" >"$tmp/out" 2>"$tmp/err" && fail "a broken file was accepted"
grep -q "rank 2, action [0-9]* (2W1): W before its I" "$tmp/err" || fail "broken file: $(cat "$tmp/err")"

# One's own compute-only schedule (2 ranks, GPipe-like) is lowered and run.
cat >"$tmp/mine.txt" <<'SCHEDULE'
# aqueduct schedule: ranks=2 stages_per_rank=1 placement=loop microbatches=2
0: 0F0 0F1 0B1 0B0
1: 1F0 1F1 1B1 1B0
SCHEDULE
"$AQ" schedule "$tmp/mine.txt" --costs 1,1,1,1 >"$tmp/out" 2>"$tmp/err" ||
  fail "own schedule: $(cat "$tmp/err")"
grep -q "^step time 6, bubble 50.00%, peak activations per rank 2 2" "$tmp/out" || fail "own schedule: $(cat "$tmp/out")"
grep -q "^rank 1 | \. *1F0 1F1 1B1 1B0" "$tmp/out" || fail "own schedule's grid: $(cat "$tmp/out")"

# Bad input: exit 1 with the rule, or 2 for usage.
"$AQ" schedule interleaved_1f1b --ranks 4 --microbatches 6 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "multiple of the ranks" "$tmp/err" || fail "interleaved 4x6: $(cat "$tmp/err")"
"$AQ" schedule zb_h9 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q 'unknown schedule "zb_h9"' "$tmp/err" || fail "zb_h9: $(cat "$tmp/err")"
"$AQ" schedule 1f1b_flush --costs 1,2 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "costs needs 4 numbers" "$tmp/err" || fail "--costs 1,2: $(cat "$tmp/err")"
printf '# aqueduct schedule: ranks=2 stages_per_rank=1 placement=loop microbatches=1\n5: 0F0\n' >"$tmp/bad.txt"
"$AQ" schedule "$tmp/bad.txt" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "line 2" "$tmp/err" || fail "bad rank line: $(cat "$tmp/err")"

[ "$fails" -eq 0 ] && echo "aq_schedule_test: passed"
exit $((fails > 0))
