#!/usr/bin/env bash
# Installs what is missing, builds, starts tpserve on the bundled demo model
# (models/demo: a tiny Llama trained on the King James Bible) at TP=2 on CPU, and
# streams a generation through tpserve-cli. The server is stopped on exit.
#   bash tools/demo.sh ["prompt text"]
set -euo pipefail
cd "$(dirname "$0")/.."
prompt=${1:-"And God said"}
bash tools/setup.sh
bazel build //server:tpserve //worker/rank:tpserve_worker //client:tpserve-cli

log=$(mktemp)
bazel-bin/server/tpserve --model models/demo --tp 2 --device cpu --port 0 >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT

# tpserve logs "... info tpserve: serving on ADDR" once both ranks have loaded.
for _ in $(seq 1 600); do
  addr=$(sed -n 's/^.* tpserve: serving on //p' "$log")
  [ -n "$addr" ] && break
  if ! kill -0 $server 2>/dev/null; then cat "$log"; exit 1; fi
  sleep 0.1
done
[ -n "$addr" ] || { cat "$log"; echo "demo: tpserve did not become ready" >&2; exit 1; }
echo "demo: tpserve is serving models/demo at TP=2 on $addr"
bazel-bin/client/tpserve-cli --target "$addr" info
echo
echo "demo: tpserve-cli generate \"$prompt\" --stream --max-tokens 48 --temperature 0.8 --seed 7"
bazel-bin/client/tpserve-cli --target "$addr" generate "$prompt" --stream --max-tokens 48 \
  --temperature 0.8 --seed 7
echo
