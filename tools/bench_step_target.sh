#!/usr/bin/env bash
# Decode pace while a long prompt prefills: tpserve on a synthetic Llama-shaped
# checkpoint, D streaming decoders, then one LONG-token prompt; run once with the whole
# --max-batch-tokens budget per step and once with --step-time-target-ms, each printing
# the decoders' largest gap between tokens, their time per token after the long prompt
# arrived, and the long prompt's time to first token (tools/bench_step_target.py).
# The default model is the 1.1B TinyLlama shape (hidden 2048, 22 layers, heads 32/4,
# intermediate 5632, random bf16 weights, served in bf16).
#   bash tools/bench_step_target.sh [--tp 1] [--layers 22] [--decoders 4] [--long 2000]
#       [--target-ms 1000] [--extra "ARGS"]
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/serving_lib.sh
tp=1 layers=22 decoders=4 long=2000 target=1000 extra=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tp) tp=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --decoders) decoders=$2; shift 2 ;;
    --long) long=$2; shift 2 ;;
    --target-ms) target=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
serving_build
model=$(mktemp -d)
log=$(mktemp)
trap 'serving_stop; rm -rf "$model" "$log"' EXIT
serving_tinyllama "$model" "$layers"
for t in 0 "$target"; do
  # shellcheck disable=SC2086
  serving_start "$log" --model "$model" --tp "$tp" --device cpu --step-time-target-ms "$t" \
    --max-batch-tokens 2048 --step-timeout-ms 600000 $extra
  printf "step-time-target-ms %-6s " "$t"
  /usr/bin/python3 tools/bench_step_target.py "$server_addr" "$decoders" "$long" 32000
  serving_stop
done
