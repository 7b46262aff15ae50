#!/usr/bin/env bash
# The Fashion-MNIST pipeline example (examples/fmnist_mlp_pipeline.textproto) through 4
# local worker daemons, with the optimizer, batch size and epochs replaced by
# each variant; prints the test accuracy, throughput and the plan's split
# (stage end layers) of each run.
#   tests/bench/fmnist_pipeline_variants.sh [EPOCHS=2]
# Variants are edited below as "name|optimizer block|batch size".
set -euo pipefail
cd "$(dirname "$0")/../.."
epochs="${1:-2}"
variants=(
  "example|adam { lr: 0.0005 } schedule { warmup_steps: 200 cosine {} }|64"
  "no-warmup|adam { lr: 0.0005 } schedule { cosine {} }|64"
  "batch-128|adam { lr: 0.0005 } schedule { cosine {} }|128"
)
deploy/setup.sh
bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker \
  >/dev/null 2>&1
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
state=$(mktemp -d)
address=$(deploy/local/aqueduct-local.sh start --workers 4 --threads 1 \
  --state-dir "$state" --bin "$bin")
trap 'deploy/local/aqueduct-local.sh stop --state-dir "$state" --bin "$bin"' EXIT
# TLS and the admin token for aq (the local cluster runs with them).
# shellcheck source=/dev/null
source "$state/aq.env"
for v in "${variants[@]}"; do
  IFS='|' read -r name optimizer batch <<<"$v"
  python3 - "$optimizer" "$batch" "$epochs" >"$state/$name.textproto" <<'PY'
import re, sys
s = open("examples/fmnist_mlp_pipeline.textproto").read()
s = re.sub(r"optimizer \{.*?\n\}\n", "optimizer { " + sys.argv[1] + " }\n", s,
           flags=re.S)
s = re.sub(r"batch_size: \d+", "batch_size: " + sys.argv[2], s)
s = re.sub(r"epochs: \d+", "epochs: " + sys.argv[3], s)
print(s)
PY
  id=$("$bin/client/aq" submit "$state/$name.textproto" --coordinator "$address")
  "$bin/client/aq" watch "$id" --coordinator "$address" >/dev/null
  "$bin/client/aq" status "$id" --coordinator "$address" --output json |
    python3 -c "
import json, sys
d = json.load(sys.stdin)
split = [s.get('end_layer') for s in d.get('plan', {}).get('stages', [])]
print('$name', d.get('state'), 'test_accuracy', d.get('test_accuracy'),
      'samples/s %.0f' % d.get('samples_per_second', 0), 'split', split)"
done
