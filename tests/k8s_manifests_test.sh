#!/usr/bin/env bash
# The Kubernetes manifests (deploy/k8s), validated offline: no cluster runs
# here. Each overlay is rendered with `kubectl kustomize` and checked by
# tests/k8s_validate.py with python3-kubernetes' models and the
# deployment's rules (flags against the daemons' --help). A deliberately
# broken rendering must fail the validator. `kubectl apply --dry-run=client`
# is not run: kubectl 1.32 asks the API server for its resource list even
# then, and a machine with a kubeconfig would reach a real cluster. Skips,
# saying why, without kubectl (not a Debian package: it came with this
# machine's image) or python3-kubernetes.
#
#   k8s_manifests_test.sh COORDINATOR WORKER VALIDATOR KUSTOMIZATION_OF_BASE
set -uo pipefail
COORDINATOR="$1" WORKER="$2" VALIDATOR="$3" BASE="$(dirname "$4")"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
export HOME="$tmp"  # kubectl's cache, not the user's

skip() {
  echo "SKIPPED: $1"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="k8s_manifests_test" tests="1" failures="0" skipped="1">
<testcase name="ManifestsValidateOffline"><skipped message="$1"/></testcase>
</testsuite></testsuites>
XML
  fi
  exit 0
}
command -v kubectl >/dev/null ||
  skip "kubectl is missing (not in Debian bookworm; install kubectl 1.27 or later with kustomize)"
/usr/bin/python3 -c 'import kubernetes, yaml' 2>/dev/null ||
  skip "python3-kubernetes or python3-yaml is missing (apt-get install python3-kubernetes python3-yaml)"

fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
"$COORDINATOR" --help >"$tmp/coordinator.help" 2>&1
"$WORKER" --help >"$tmp/worker.help" 2>&1
grep -q -- "--health_listen" "$tmp/coordinator.help" || fail "coordinator --help has no --health_listen"

# A copy with the runfiles' symbolic links resolved: kustomize does not
# load a kustomization.yaml that is a link out of its tree.
rm -rf "$tmp/k8s"
cp -rL "$BASE/.." "$tmp/k8s"
for overlay in cpu gpu; do
  dir="$tmp/k8s/overlays/$overlay"
  if ! kubectl kustomize "$dir" >"$tmp/$overlay.yaml" 2>"$tmp/$overlay.err"; then
    fail "kubectl kustomize $overlay: $(cat "$tmp/$overlay.err")"
    continue
  fi
  /usr/bin/python3 "$VALIDATOR" "$tmp/$overlay.yaml" "$overlay" \
    "$tmp/coordinator.help" "$tmp/worker.help" || fail "overlay $overlay does not validate"
done

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed" >&2; exit 1; }

# The validator fails what it should: a misspelt field, a flag the daemons
# do not have, a checkpoint claim that is not ReadWriteMany, GPU requests
# in the cpu overlay.
sed 's/readOnlyRootFilesystem/readOnlyRootFilesytem/' "$tmp/cpu.yaml" >"$tmp/bad1.yaml"
sed 's/--health_listen=/--healthz_listen=/' "$tmp/cpu.yaml" >"$tmp/bad2.yaml"
sed 's/ReadWriteMany/ReadWriteOnce/' "$tmp/cpu.yaml" >"$tmp/bad3.yaml"
cp "$tmp/gpu.yaml" "$tmp/bad4.yaml"
for i in 1 2 3 4; do
  overlay=cpu
  /usr/bin/python3 "$VALIDATOR" "$tmp/bad$i.yaml" "$overlay" "$tmp/coordinator.help" \
    "$tmp/worker.help" >"$tmp/bad$i.out" 2>&1 && fail "broken rendering $i validated"
done
grep -q "securityContext.readOnlyRootFilesytem" "$tmp/bad1.out" || fail "misspelt field not named: $(head -3 "$tmp/bad1.out")"
grep -q -- "--healthz_listen is not a flag the worker accepts" "$tmp/bad2.out" || fail "unknown flag not named: $(head -3 "$tmp/bad2.out")"
grep -q "not a ReadWriteMany" "$tmp/bad3.out" || fail "RWO checkpoints not caught: $(head -3 "$tmp/bad3.out")"
grep -q "cpu overlay: workers ask for a GPU" "$tmp/bad4.out" || fail "GPU in the cpu overlay not caught: $(head -3 "$tmp/bad4.out")"

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed" >&2; exit 1; }
echo "all manifest checks passed"
