#!/usr/bin/env bash
# The pool's warm-up (--warmup-tokens, default 64) against serving cold (--warmup-tokens
# 0), on a server just started: ROUNDS times, alternating, each mode's server is started
# afresh for each measurement and stopped after it:
#   start   seconds from the process's start to "serving on" (what the warm-up costs);
#   first   the first request alone (--input-len tokens, 4 output tokens): its TTFT;
#   burst   the first traffic a burst of --burst prompts at once (--input-len tokens,
#           --output-len output tokens): TTFT mean, median, p99 and output tokens/s.
# Then the ratios warm / cold of the means over the rounds. The default model is the
# 1.1B TinyLlama shape (hidden 2048, 22 layers, heads 32/4, intermediate 5632, vocab
# 32000, random bf16 weights, served in bf16), written to a temporary folder, or --model.
#   bash tools/bench_warmup.sh [--model DIR] [--tp 2] [--layers 22] [--rounds 2]
#       [--input-len 128] [--output-len 16] [--burst 32] [--extra "ARGS"]
# Not run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/serving_lib.sh
model_dir="" tp=2 layers=22 rounds=2 input_len=128 output_len=16 burst=32 extra=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model_dir=$2; shift 2 ;;
    --tp) tp=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --input-len) input_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --burst) burst=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
serving_build
work=$(mktemp -d)
trap 'serving_stop; rm -rf "$work"' EXIT
if [ -z "$model_dir" ]; then
  model_dir=$work/model
  serving_tinyllama "$model_dir" "$layers"
fi
results=$work/results.jsonl
echo "tpserve --tp $tp on $model_dir; $input_len-token prompts; a fresh server per row"
printf "%-6s %-6s %-6s %9s %10s %10s %10s %10s %10s\n" mode round run "start s" "TTFT mean" \
  "median" "p99" "out tok/s" "warm-up"
seed=1
for round in $(seq 1 "$rounds"); do
  for mode in cold warm; do
    for run in first burst; do
      flags=()
      [ "$mode" = cold ] && flags=(--warmup-tokens 0)
      started=$(date +%s.%N)
      # shellcheck disable=SC2086
      serving_start "$work/$mode.log" --model "$model_dir" --tp "$tp" --device cpu \
        --step-timeout-ms 600000 "${flags[@]}" $extra
      serving=$(date +%s.%N)
      warmed=$(sed -n 's/^.*warmed up: \(.*\)$/\1/p' "$work/$mode.log" | head -1)
      if [ "$run" = first ]; then
        bench=(--num-prompts 1 --concurrency 1 --output-len 4)
      else
        bench=(--num-prompts "$burst" --concurrency "$burst" --output-len "$output_len")
      fi
      # A fresh seed per run: no prompt is seen twice.
      bazel-bin/client/tpserve-cli --target "$server_addr" bench "${bench[@]}" \
        --input-len "$input_len" --seed "$seed" --json |
        /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["failed"] == 0, r
mode, rnd, run, started, serving, warmed, path = sys.argv[1:8]
start = float(serving) - float(started)
t = r["ttft_ms"]
print("%-6s %-6s %-6s %9.2f %10.0f %10.0f %10.0f %10.2f %s" % (mode, rnd, run, start,
      t["mean"], t["median"], t["p99"], r["output_throughput"], warmed or "-"))
with open(path, "a") as f:
    f.write(json.dumps({"mode": mode, "run": run, "start": start, "ttft": t["mean"],
                        "tok_s": r["output_throughput"]}) + "\n")' \
          "$mode" "$round" "$run" "$started" "$serving" "$warmed" "$results"
      seed=$((seed + 1))
      serving_stop
    done
  done
done
/usr/bin/python3 - "$results" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def mean(mode, run, key):
    values = [r[key] for r in rows if r["mode"] == mode and r["run"] == run]
    return sum(values) / len(values)
print("warm / cold (means over the rounds):")
for run in ("first", "burst"):
    print("  %-6s start %.2fx, TTFT %.2fx (%.0f vs %.0f ms), out tok/s %.2fx" % (
        run, mean("warm", run, "start") / mean("cold", run, "start"),
        mean("warm", run, "ttft") / mean("cold", run, "ttft"), mean("warm", run, "ttft"),
        mean("cold", run, "ttft"), mean("warm", run, "tok_s") / mean("cold", run, "tok_s")))
EOF
