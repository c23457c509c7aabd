#!/usr/bin/env bash
# Serving benchmark: starts tpserve on a synthetic Llama-shaped checkpoint and runs
# `tpserve-cli bench` (fixed-seed random prompts, ignore_eos) one request at a time and
# at concurrency 8 and 32, so the continuous-batching gain and the frontend's overhead
# per step (engine step time minus the workers' compute) come from one run.
#   bash tools/bench_serving.sh [--tp 2] [--layers 8] [--hidden 768] [--prompts 32]
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/serving_lib.sh
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
serving_setup "$layers" "$hidden"
serving_start "$log" --model "$model" --tp "$tp" --device cpu
echo "tpserve --tp $tp on $server_addr; $prompts prompts of $input_len tokens, $output_len output tokens each"
serving_header
# A seed per run: the same prompts again would come from the prefix cache.
for c in 1 8 32; do
  serving_row "concurrency $c" --num-prompts "$prompts" --input-len "$input_len" \
    --output-len "$output_len" --concurrency "$c" --seed "$c"
done
