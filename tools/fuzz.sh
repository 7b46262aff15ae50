#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (--config=fuzz: Debian's clang,
# ASan + UBSan) and runs each for N seconds over a copy of its corpus
# (tests/fuzz/corpus/<target>/), one after the other, one process each.
# Prints one line per target: executions, executions per second, the
# corpus at the end (files, bytes), new inputs found and crashes.
#
# Usage: tools/fuzz.sh [--seconds N] [--merge] [--output_base DIR]
#                      [--keep DIR] [target...] [-- LIBFUZZER_ARGS]
#   targets   spec frame journal safetensors profile (default: all)
#   N         seconds per target (default 60)
#   --merge   merge the inputs that add coverage back into
#             tests/fuzz/corpus/<target>/ (libFuzzer's -merge=1)
#   DIR       output base, default $AQ_FUZZ_OUTPUT_BASE, else
#             ~/.cache/aqueduct-fuzz (the clang toolchain would otherwise
#             replace gcc's in the default one)
#   --keep    where crashing inputs are kept (default
#             /tmp/aqueduct-fuzz-crashes/<target>/)
# A crash, a sanitizer report, a broken invariant, a leak, a timeout or an
# out-of-memory stops that target; its input is kept and named. Exit
# status: 0 when every target built and ran without one, 1 otherwise, 2 for
# bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }

# The value of libFuzzer's final "stat::NAME: VALUE" line in log $1.
fuzz_stat() { sed -n "s/^stat::$2: *//p" "$1" | tail -1; }

# Field names of the messages in proto file $1, one per line.
proto_fields() {
  grep -oE '^\s*(repeated |optional )?[A-Za-z0-9_.]+ [a-z_0-9]+ = [0-9]+' "$1" |
    awk '{print $(NF-2)}' | sort -u
}

# Writes target $1's libFuzzer dictionary to file $2 (nothing for targets
# that need none): the words a text parser looks for, which the fuzzer
# cannot learn from comparisons made inside Debian's uninstrumented
# protobuf. Made from the sources, so a new field is in it at once.
make_dict() {
  case "$1" in
    spec)
      proto_fields proto/job.proto | sed 's/.*/"&"/'
      grep -ohE '"[a-z0-9_]+"' pipeline/policy.cc | sort -u
      printf '"%s"\n' '{' '}' ': ' '[' ']' 'true' 'false' 'nan' 'inf' '-1' \
        '9223372036854775807' '4294967296' '2147483647' '-2147483648' '1e308'
      ;;
    profile)
      proto_fields proto/plan.proto | sed 's/.*/"\\"&\\""/'
      printf '"%s"\n' 'forward_compute_time=' 'backward_compute_time=' \
        'activation_size=' 'parameter_size=' ' -- stage_id=' ' -- ' ', ' \
        '; ' 'Input' '__getitem__' 'nan' 'inf' '1e308' '-0' '2147483647' \
        '-2147483648' '4294967296'
      printf '"\\x09node"\n"\\x0a"\n'
      ;;
    safetensors)
      printf '"\\"%s\\""\n' dtype shape data_offsets __metadata__ F32 I32 \
        BF16 F16
      printf '"%s"\n' 9007199254740992 4503599627370496 4294967296 65536
      ;;
  esac >"$2"
}

# Runs target $1; appends its line to rows; returns non-zero on a crash.
run_target() {
  local t=$1 work corpus log rc files bytes execs rate found crashes
  work=$(mktemp -d)
  corpus="$work/corpus"
  mkdir -p "$corpus" "$work/artifacts"
  # The journal target rewrites and syncs a file per input: on tmpfs when
  # there is one (4x the executions per second of /tmp on this disk).
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    ln -s "$(mktemp -d -p /dev/shm aqueduct-fuzz.XXXXXX)" "$work/tmp"
  else
    mkdir -p "$work/tmp"
  fi
  cp tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null
  log="$work/fuzz.log"
  echo "=== $t: ${seconds} s over $(ls "$corpus" | wc -l) corpus files (log $log)" >&2
  local dict=()
  make_dict "$t" "$work/dict"
  [ -s "$work/dict" ] && dict=(-dict="$work/dict")
  # TMPDIR: the journal target's state directory lives and dies with $work.
  TMPDIR="$work/tmp" "$bin/${t}_fuzzer" -max_total_time="$seconds" \
    -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "${dict[@]}" "${extra[@]}" \
    "$corpus" >"$log" 2>&1
  rc=$?
  files=$(find "$corpus" -type f | wc -l)
  bytes=$(du -sb "$corpus" | cut -f1)
  execs=$(fuzz_stat "$log" number_of_executed_units)
  rate=$(fuzz_stat "$log" average_exec_per_sec)
  found=$(fuzz_stat "$log" new_units_added)
  crashes=$(find "$work/artifacts" -type f | wc -l)
  if [ "$crashes" -gt 0 ] || [ "$rc" -ne 0 ]; then
    mkdir -p "$keep/$t"
    cp "$work"/artifacts/* "$keep/$t"/ 2>/dev/null
    cp "$log" "$keep/$t/fuzz.log"
    grep -m1 -E "==[0-9]+== ?ERROR|runtime error|check failed|deadly signal" "$log" >&2
    echo "$t: kept in $keep/$t/: $(ls "$work/artifacts" | tr '\n' ' ')(log: fuzz.log)" >&2
    [ "$crashes" -eq 0 ] && crashes=1  # The fuzzer itself failed.
  fi
  if [ "$merge" -eq 1 ] && [ "$crashes" -eq 0 ]; then
    local before after
    before=$(ls tests/fuzz/corpus/"$t" | wc -l)
    TMPDIR="$work/tmp" "$bin/${t}_fuzzer" -merge=1 tests/fuzz/corpus/"$t" \
      "$corpus" >"$work/merge.log" 2>&1 ||
      echo "$t: merge failed (log $work/merge.log)" >&2
    after=$(ls tests/fuzz/corpus/"$t" | wc -l)
    echo "$t: merged $((after - before)) input(s) into tests/fuzz/corpus/$t" >&2
  fi
  rows+=("$(printf '%-12s %5d s  %10s execs  %7s/s  corpus %5d files %8d bytes  new %5s  crashes %d' \
    "$t" "$seconds" "${execs:-?}" "${rate:-?}" "$files" "$bytes" "${found:-?}" "$crashes")")
  rm -rf "$(readlink -f "$work/tmp")" "$work"
  [ "$crashes" -eq 0 ]
}

# The whole run as one function, so that bash has read all of it before
# it starts: editing this file during a run does not change that run.
main() {
  all_targets=(spec frame journal safetensors profile)
  seconds=60
  merge=0
  output_base="${AQ_FUZZ_OUTPUT_BASE:-$HOME/.cache/aqueduct-fuzz}"
  keep="/tmp/aqueduct-fuzz-crashes"
  targets=()
  extra=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --seconds) seconds="${2:?--seconds needs a number}"; shift 2 ;;
      --seconds=*) seconds="${1#*=}"; shift ;;
      --merge) merge=1; shift ;;
      --output_base) output_base="${2:?--output_base needs a directory}"; shift 2 ;;
      --output_base=*) output_base="${1#*=}"; shift ;;
      --keep) keep="${2:?--keep needs a directory}"; shift 2 ;;
      --keep=*) keep="${1#*=}"; shift ;;
      spec | frame | journal | safetensors | profile) targets+=("$1"); shift ;;
      --) shift; extra=("$@"); break ;;
      -h | --help) usage; exit 0 ;;
      *) echo "fuzz.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
  done
  case "$seconds" in
    '' | *[!0-9]* | 0) # libFuzzer reads 0 as "no limit".
      echo "fuzz.sh: --seconds '$seconds' is not a positive whole number" >&2; exit 2 ;;
  esac
  [ "${#targets[@]}" -eq 0 ] && targets=("${all_targets[@]}")

  # Debian's clang with its sanitizer and libFuzzer runtimes, and lld.
  AQ_SETUP_EXTRA="${AQ_SETUP_EXTRA:-} clang libclang-rt-14-dev lld" deploy/setup.sh || exit 1

  bazel=(bazel "--output_base=$output_base")
  labels=()
  for t in "${targets[@]}"; do labels+=("//tests/fuzz:${t}_fuzzer"); done
  echo "=== bazel build --config=fuzz ${labels[*]} (output base $output_base)" >&2
  "${bazel[@]}" build --config=fuzz --symlink_prefix=/ "${labels[@]}" || exit 1
  bin=$("${bazel[@]}" info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz

  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

  rows=()
  status=0
  for t in "${targets[@]}"; do
    run_target "$t" || status=1
  done
  echo
  echo "fuzz.sh: summary (ASan+UBSan, libFuzzer, one process per target)"
  for row in "${rows[@]}"; do echo "  $row"; done
  exit "$status"
}

main "$@"
exit
