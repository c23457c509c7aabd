#!/usr/bin/env bash
# Serving benchmark: starts tpserve on a synthetic Llama-shaped checkpoint and runs
# `tpserve-cli bench` (fixed-seed random prompts, ignore_eos) one request at a time and
# at concurrency 8 and 32, so the continuous-batching gain and the frontend's overhead
# per step (engine step time minus the workers' compute) come from one run.
#   bash tools/bench_serving.sh [--tp 2] [--layers 8] [--hidden 768] [--prompts 32]
set -euo pipefail
cd "$(dirname "$0")/.."
tp=2 layers=8 hidden=768 prompts=32 input_len=64 output_len=32
while [ $# -gt 0 ]; do
  case "$1" in
    --tp) tp=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bazel build //server:tpserve //worker:tpserve_worker //client:tpserve-cli \
  //worker/tools:model_benchmark >/dev/null 2>&1
model=$(mktemp -d)
log=$(mktemp)
# model_benchmark writes the synthetic checkpoint; --tp 1 --decode-steps 1 keeps its own run short.
bazel-bin/worker/tools/model_benchmark --dir "$model" --layers "$layers" --hidden "$hidden" \
  --tp 1 --prompt-len 8 --decode-steps 1 >"$log"
head -1 "$log"
bazel-bin/server/tpserve --model "$model" --tp "$tp" --device cpu --port 0 >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$model" "$log"' EXIT
for _ in $(seq 1 1200); do
  addr=$(sed -n 's/^tpserve: serving on //p' "$log"); [ -n "$addr" ] && break; sleep 0.1
done
[ -n "$addr" ] || { cat "$log"; exit 1; }
echo "tpserve --tp $tp on $addr; $prompts prompts of $input_len tokens, $output_len output tokens each"
printf "%-12s %10s %10s %10s %10s %10s %12s %12s\n" concurrency "req/s" "out tok/s" \
  "TTFT ms" "TPOT ms" "E2E ms" "step ms" "overhead ms"
for c in 1 8 32; do
  bazel-bin/client/tpserve-cli --target "$addr" bench --num-prompts "$prompts" \
    --input-len "$input_len" --output-len "$output_len" --concurrency "$c" --seed 1 --json |
    /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
c = sys.argv[1]
assert r["failed"] == 0, r
print("%-12s %10.2f %10.1f %10.1f %10.1f %10.1f %12.3f %12.3f" % (c, r["request_throughput"],
      r["output_throughput"], r["ttft_ms"]["mean"], r["tpot_ms"]["mean"], r["e2e_ms"]["mean"],
      r["step_wall_ms"], r["frontend_overhead_ms"]))' "$c"
done
