#!/usr/bin/env bash
# Installs what is missing, builds, and runs a bundled model at TP=2 on CPU: two rank
# processes over Gloo compute the logits of a prompt, and the script prints the most
# likely next token at each position. (The gRPC server and streamed generation arrive
# with the serving issue; this shows the model core they run on.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //worker:forward
model=tests/data/models/llama_gqa
out=$(mktemp --suffix=.npy)
trap 'rm -f "$out"' EXIT
ids=1,17,42,99,7,256,3
echo "demo: forward --model $model --tp 2 --token-ids $ids"
bazel-bin/worker/forward --model "$model" --tp 2 --token-ids "$ids" --output "$out"
/usr/bin/python3 - "$out" "$ids" <<'PY'
import sys
import numpy as np
logits = np.load(sys.argv[1])
ids = sys.argv[2].split(",")
print(f"logits: {logits.shape[0]} positions x {logits.shape[1]} vocab")
for pos, (tok, row) in enumerate(zip(ids, logits)):
    top = np.argsort(row)[::-1][:3]
    print(f"  position {pos} (token {tok}): top next tokens {list(map(int, top))}")
PY
