#!/usr/bin/env bash
# Staggered admission against whole-burst admission: two tpserve servers on one synthetic
# Llama-shaped checkpoint, one with the default (a burst of prompts admitted in groups
# sized from the measured step cost, Scheduler::GroupTokens) and one with
# --no-staggered-admission, both up at once; `tpserve-cli bench` (closed-loop clients,
# fixed-seed random prompts, ignore_eos) against each in turn, ROUNDS times at every
# concurrency, then each row's output tokens/s, TTFT (mean, median, p99), TPOT and the
# ratios staggered / whole from the runs side by side.
# The default model is the 1.1B TinyLlama shape (hidden 2048, 22 layers, heads 32/4,
# intermediate 5632, vocab 32000, random bf16 weights, served in bf16).
#   bash tools/bench_admission.sh [--tp 2] [--layers 22] [--concurrency 1,8,32]
#       [--input-len 128] [--output-len 64] [--rounds 2] [--prompts N] [--extra "ARGS"]
# Each level sends 2·C prompts (at least 4), or N. Not run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/serving_lib.sh
tp=2 layers=22 concurrency=1,8,32 input_len=128 output_len=64 rounds=2 num_prompts=0 extra=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tp) tp=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --input-len) input_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --prompts) num_prompts=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
serving_build
work=$(mktemp -d)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap stop_all EXIT
serving_tinyllama "$work/model" "$layers"
declare -A addr
for mode in staggered whole; do
  flags=()
  [ "$mode" = whole ] && flags=(--no-staggered-admission)
  # shellcheck disable=SC2086
  serving_start "$work/$mode.log" --model "$work/model" --tp "$tp" --device cpu \
    --step-timeout-ms 600000 "${flags[@]}" $extra
  addr[$mode]=$server_addr
  pids+=("$server_pid")
  server_pid=
done
echo "tpserve --tp $tp, $input_len-token prompts, $output_len output tokens; staggered on" \
  "${addr[staggered]}, whole on ${addr[whole]}"
printf "%-10s %-6s %-10s %10s %10s %10s %10s %10s %10s\n" mode c round "out tok/s" "TTFT mean" \
  "median" "p99" "TPOT ms" "step ms"
results=$work/results.jsonl
IFS=, read -r -a levels <<<"$concurrency"
seed=1
for c in "${levels[@]}"; do
  prompts=$((2 * c < 4 ? 4 : 2 * c))
  [ "$num_prompts" -gt 0 ] && prompts=$num_prompts
  for round in $(seq 1 "$rounds"); do
    for mode in whole staggered; do
      # A fresh seed per run: prompts seen before would come from the prefix cache.
      bazel-bin/client/tpserve-cli --target "${addr[$mode]}" bench --num-prompts "$prompts" \
        --input-len "$input_len" --output-len "$output_len" --concurrency "$c" \
        --seed "$seed" --json |
        /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["failed"] == 0, r
mode, c, rnd = sys.argv[1:4]
t = r["ttft_ms"]
print("%-10s %-6s %-10s %10.2f %10.0f %10.0f %10.0f %10.1f %10.1f" % (mode, c, rnd,
      r["output_throughput"], t["mean"], t["median"], t["p99"], r["tpot_ms"]["mean"],
      r["step_wall_ms"]))
with open(sys.argv[4], "a") as f:
    f.write(json.dumps({"mode": mode, "c": int(c), "tok_s": r["output_throughput"],
                        "ttft": t["mean"], "ttft_median": t["median"],
                        "tpot": r["tpot_ms"]["mean"]}) + "\n")' "$mode" "$c" "$round" "$results"
      seed=$((seed + 1))
    done
  done
done
/usr/bin/python3 - "$results" <<'EOF'
import json, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[(r["c"], r["mode"])].append(r)
print("staggered / whole (mean of the rounds):")
print("%-6s %10s %10s %12s %10s" % ("c", "out tok/s", "TTFT mean", "TTFT median", "TPOT"))
for c in sorted({k[0] for k in runs}):
    s, w = runs[(c, "staggered")], runs[(c, "whole")]
    mean = lambda rs, key: sum(r[key] for r in rs) / len(rs)
    print("%-6d %10.2f %10.2f %12.2f %10.2f" % (c, mean(s, "tok_s") / mean(w, "tok_s"),
          mean(s, "ttft") / mean(w, "ttft"), mean(s, "ttft_median") / mean(w, "ttft_median"),
          mean(s, "tpot") / mean(w, "tpot")))
EOF
