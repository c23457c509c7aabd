#!/usr/bin/env bash
# tpserve under several flag sets, side by side: one server per --config NAME="FLAGS",
# all up at once on one checkpoint; `tpserve-cli bench` (closed-loop clients, fixed-seed
# random prompts, ignore_eos) against each in turn, ROUNDS times at every concurrency,
# then each config's means and their ratios to the first config's (out tok/s, TTFT mean
# and median, time per output token).
# The default model is the 1.1B TinyLlama shape (hidden 2048, 22 layers, heads 32/4,
# intermediate 5632, vocab 32000, random bf16 weights, served in bf16), written to a
# temporary folder, or --model.
#   bash tools/bench_configs.sh --config "tp2=--tp 2" --config "tp1x2=--tp 1
#       --cpu-threads-per-rank 2" [--model DIR] [--layers 22] [--concurrency 1,8,32]
#       [--input-len 128] [--output-len 64] [--rounds 2] [--prompts N]
# Each level sends 2·C prompts (at least 4), or N. Not run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/serving_lib.sh
model_dir="" layers=22 concurrency=1,8,32 input_len=128 output_len=64 rounds=2 num_prompts=0
names=() flag_sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) names+=("${2%%=*}"); flag_sets+=("${2#*=}"); shift 2 ;;
    --model) model_dir=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --input-len) input_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --prompts) num_prompts=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#names[@]} -ge 1 ] || { echo "give at least one --config NAME=\"FLAGS\"" >&2; exit 2; }
serving_build
work=$(mktemp -d)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap stop_all EXIT
if [ -z "$model_dir" ]; then
  model_dir=$work/model
  serving_tinyllama "$model_dir" "$layers"
fi
declare -A addr
for i in "${!names[@]}"; do
  # shellcheck disable=SC2086
  serving_start "$work/${names[$i]}.log" --model "$model_dir" --device cpu \
    --step-timeout-ms 600000 ${flag_sets[$i]}
  addr[${names[$i]}]=$server_addr
  pids+=("$server_pid")
  server_pid=
  echo "${names[$i]}: tpserve ${flag_sets[$i]} on $server_addr"
done
echo "$input_len-token prompts, $output_len output tokens"
printf "%-12s %-6s %-6s %10s %10s %10s %10s %10s\n" config c round "out tok/s" "TTFT mean" \
  "median" "p99" "TPOT ms"
results=$work/results.jsonl
IFS=, read -r -a levels <<<"$concurrency"
seed=1
for c in "${levels[@]}"; do
  prompts=$((2 * c < 4 ? 4 : 2 * c))
  [ "$num_prompts" -gt 0 ] && prompts=$num_prompts
  for round in $(seq 1 "$rounds"); do
    for name in "${names[@]}"; do
      # A fresh seed per run: prompts seen before would come from the prefix cache.
      bazel-bin/client/tpserve-cli --target "${addr[$name]}" bench --num-prompts "$prompts" \
        --input-len "$input_len" --output-len "$output_len" --concurrency "$c" \
        --seed "$seed" --json |
        /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["failed"] == 0, r
name, c, rnd, path = sys.argv[1:5]
t = r["ttft_ms"]
print("%-12s %-6s %-6s %10.2f %10.0f %10.0f %10.0f %10.1f" % (name, c, rnd,
      r["output_throughput"], t["mean"], t["median"], t["p99"], r["tpot_ms"]["mean"]))
with open(path, "a") as f:
    f.write(json.dumps({"config": name, "c": int(c), "tok_s": r["output_throughput"],
                        "ttft": t["mean"], "ttft_median": t["median"],
                        "tpot": r["tpot_ms"]["mean"]}) + "\n")' \
          "$name" "$c" "$round" "$results"
      seed=$((seed + 1))
    done
  done
done
/usr/bin/python3 - "$results" "${names[@]}" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
names = sys.argv[2:]
def mean(name, c, key):
    values = [r[key] for r in rows if r["config"] == name and r["c"] == c]
    return sum(values) / len(values)
print("means over the rounds, each beside its ratio to %s's:" % names[0])
keys = (("tok_s", "out tok/s", "%.2f"), ("ttft", "TTFT mean", "%.0f"),
        ("ttft_median", "TTFT median", "%.0f"), ("tpot", "TPOT ms", "%.1f"))
print("%-12s %-6s" % ("config", "c") + "".join(" %12s %7s" % (k[1], "ratio") for k in keys))
for c in sorted({r["c"] for r in rows}):
    for name in names:
        cells = "".join(" %12s %6.2fx" % (form % mean(name, c, key),
                                           mean(name, c, key) / mean(names[0], c, key))
                        for key, _, form in keys)
        print("%-12s %-6d" % (name, c) + cells)
EOF
