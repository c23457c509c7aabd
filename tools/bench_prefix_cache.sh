#!/usr/bin/env bash
# Prefix-caching benchmark: the same shared-system-prompt workload (`tpserve-cli bench
# --prefix-len`: every prompt is the same --prefix tokens, then --input of its own)
# against tpserve with prefix caching and with --no-prefix-caching, on one synthetic
# checkpoint, alternating the two servers --rounds times so both see the same machine.
# Each server is fresh, so its first request computes the shared prefix.
#   bash tools/bench_prefix_cache.sh [--tp 2] [--prefix 448] [--input 64] [--output 16]
#                                    [--prompts 16] [--concurrency 8] [--rounds 2]
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/serving_lib.sh
tp=2 layers=8 hidden=768 prefix=448 input=64 output=16 prompts=16 concurrency=8 rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --tp) tp=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --input) input=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
serving_setup "$layers" "$hidden"
echo "tpserve --tp $tp; $prompts prompts of $prefix shared + $input own tokens, $output output" \
  "tokens each, concurrency $concurrency"
serving_header
for round in $(seq 1 "$rounds"); do
  for mode in cached uncached; do
    extra=()
    [ "$mode" = uncached ] && extra=(--no-prefix-caching)
    serving_start "$log" --model "$model" --tp "$tp" --device cpu "${extra[@]}"
    serving_row "$mode (round $round)" --num-prompts "$prompts" --prefix-len "$prefix" \
      --input-len "$input" --output-len "$output" --concurrency "$concurrency" --seed 1
    serving_stop
  done
done
