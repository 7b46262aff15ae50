#!/usr/bin/env bash
# Runs the whole suite under the configurations of .bazelrc that CI's plain
# gcc build does not cover, and prints each one's summary:
#   clang  Debian's clang, -Wthread-safety -Werror (ABSL_GUARDED_BY checked)
#   asan   AddressSanitizer + UndefinedBehaviorSanitizer
#   tsan   ThreadSanitizer
# Tests tagged "preload" LD_PRELOAD a library into a daemon (libfaketime),
# which does not mix with the sanitizers' runtimes: gcc suite only.
# Each is `bazel test --config=X //...` in an output base of its own (the
# clang toolchain would otherwise replace gcc's in the default one), without
# bazel-* symlinks of its own in the tree. Tests tagged "multihost" or
# "deploy" (network namespaces, Slurm: the same daemons deployed another
# way, minutes each) run in the gcc suite only, unless ARGS name
# --test_tag_filters themselves. Under clang (no sanitizer: its check, the
# thread-safety analysis, is the build's) only the C++ tests run; the
# process tests (sh_test) run the programs the gcc suite runs, unless ARGS
# name --test_lang_filters.
#
# Usage: tools/sanitizers.sh [--output_base DIR] [clang|asan|tsan ...] [-- ARGS]
#   DIR   default $AQ_SANITIZERS_OUTPUT_BASE, else ~/.cache/aqueduct-sanitizers
#   ARGS  passed to every `bazel test` (e.g. --test_tag_filters=-gpu)
# With no configuration named, runs all three. Exit status: 0 when every
# configuration built and passed.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }

output_base="${AQ_SANITIZERS_OUTPUT_BASE:-$HOME/.cache/aqueduct-sanitizers}"
configs=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --output_base) output_base="${2:?--output_base needs a directory}"; shift 2 ;;
    --output_base=*) output_base="${1#*=}"; shift ;;
    clang | asan | tsan) configs+=("$1"); shift ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) usage; exit 0 ;;
    *) echo "sanitizers.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[ "${#configs[@]}" -eq 0 ] && configs=(clang asan tsan)

# The usual packages, plus Debian's clang (with its sanitizer runtimes) and
# lld, which the sanitizer configurations link with.
AQ_SETUP_EXTRA="${AQ_SETUP_EXTRA:-} clang libclang-rt-14-dev lld" deploy/setup.sh || exit 1

# tests/summarize.sh over this configuration's test.xml files, counting only
# the test targets that exist now ($labels); results of earlier
# --runs_per_test runs (run_N_of_M/) count only when this run asked for
# repeated runs too.
summarize() {
  local runs="--no_runs"
  case " ${extra[*]-} " in *--runs_per_test*) runs="" ;; esac
  tests/summarize.sh --labels "$2" $runs "$1"
}

# `//...` spelled out per top-level directory: with an output base other
# than the default one, Bazel does not recognise the default build's bazel-*
# symlinks as its own and would descend into them (failing to load
# bazel-<name>/external/...). So every real directory with a BUILD file.
targets=("//:all")
for d in *; do
  [ -d "$d" ] && [ ! -L "$d" ] || continue
  find "$d" \( -name BUILD -o -name BUILD.bazel \) -print -quit | grep -q . &&
    targets+=("//$d/...")
done

bazel=(bazel "--output_base=$output_base")
labels=$(mktemp)
tag_filter=(--test_tag_filters=-multihost,-deploy,-preload)
case " ${extra[*]-} " in *--test_tag_filters*) tag_filter=() ;; esac
query=$(printf ' + %s' "${targets[@]}")
query="tests(${query# + })"
[ "${#tag_filter[@]}" -gt 0 ] &&
  query="$query except attr(tags, 'multihost|deploy|preload', $query)"
"${bazel[@]}" query "$query" 2>/dev/null >"$labels"
cc_labels=$(mktemp)
trap 'rm -f "$labels" "$cc_labels"' EXIT
"${bazel[@]}" query "kind(cc_test, $query)" 2>/dev/null >"$cc_labels"
rows=()
status=0
for config in "${configs[@]}"; do
  echo "=== bazel test --config=$config //... (output base $output_base)" >&2
  start=$SECONDS
  lang_filter=() config_labels="$labels"
  if [ "$config" = clang ]; then
    case " ${extra[*]-} " in
      *--test_lang_filters*) ;;
      *) lang_filter=(--test_lang_filters=cc) config_labels="$cc_labels" ;;
    esac
  fi
  "${bazel[@]}" test "--config=$config" --symlink_prefix=/ "${tag_filter[@]}" \
    "${lang_filter[@]}" "${extra[@]}" -- "${targets[@]}"
  rc=$?
  took=$((SECONDS - start))
  [ "$rc" -ne 0 ] && status=1
  testlogs=$("${bazel[@]}" info "--config=$config" bazel-testlogs 2>/dev/null)
  summary=$(summarize "$testlogs" "$config_labels")
  case "$rc" in
    0) result="passed" ;;
    3) result="TESTS FAILED" ;;
    *) result="FAILED (bazel exit $rc)" ;;
  esac
  rows+=("$(printf '%-6s %-24s %-44s %dm%02ds' "$config" "$result" "$summary" \
    $((took / 60)) $((took % 60)))")
done

echo
echo "sanitizers.sh: summary (output base $output_base)"
for row in "${rows[@]}"; do echo "  $row"; done
exit "$status"
