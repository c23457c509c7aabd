#!/usr/bin/env bash
# Staggered admission against whole-burst admission: two tpserve servers on one synthetic
# Llama-shaped checkpoint, one with the default (a burst of prompts admitted in groups
# sized from the measured step cost, Scheduler::GroupTokens) and one with
# --no-staggered-admission, both up at once; `tpserve-cli bench` (closed-loop clients,
# fixed-seed random prompts, ignore_eos) against each in turn, ROUNDS times at every
# concurrency, then each row's output tokens/s, TTFT (mean, median, p99), TPOT and the
# ratios staggered / whole from the runs side by side (tools/bench_configs.sh with the
# two flag sets, whole first).
# The default model is the 1.1B TinyLlama shape (hidden 2048, 22 layers, heads 32/4,
# intermediate 5632, vocab 32000, random bf16 weights, served in bf16).
#   bash tools/bench_admission.sh [--tp 2] [--layers 22] [--concurrency 1,8,32]
#       [--input-len 128] [--output-len 64] [--rounds 2] [--prompts N] [--extra "ARGS"]
# Each level sends 2·C prompts (at least 4), or N. Not run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
tp=2 extra="" rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tp) tp=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    *) rest+=("$1"); shift ;;  # the rest is tools/bench_configs.sh's
  esac
done
exec bash tools/bench_configs.sh "${rest[@]}" \
  --config "whole=--tp $tp --no-staggered-admission $extra" --config "staggered=--tp $tp $extra"
