#!/usr/bin/env bash
# The HTTP path's cost per token against gRPC's: starts tpserve on the bundled demo
# model (tiny, so each step is short and what the edge adds shows) with --http-port,
# and runs `tpserve-cli bench` over gRPC (Generate streams) and over the OpenAI API
# (streamed POST /v1/completions), interleaved, each run with its own seed (a cold
# prefix cache), at concurrency 1 and 16.
#   bash tools/bench_http_vs_grpc.sh [--rounds 3] [--prompts 48] [--tp 2]
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/serving_lib.sh
rounds=3 prompts=48 tp=2 input_len=32 output_len=64
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --tp) tp=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bazel build //server:tpserve //worker/rank:tpserve_worker //client:tpserve-cli >/dev/null 2>&1
log=$(mktemp)
trap 'serving_stop; rm -f "$log"' EXIT
serving_start "$log" --model models/demo --tp "$tp" --device cpu --host 127.0.0.1 \
  --http-port 0 --http-host 127.0.0.1
url=$(sed -n 's/^.* tpserve: OpenAI-compatible API on \(http:[^ ]*\)$/\1/p' "$log")
echo "tpserve --tp $tp (models/demo) on $server_addr and $url; $prompts prompts of" \
  "$input_len tokens, $output_len output tokens each, $rounds rounds"
# row LABEL BENCH_ARGS...: one bench run, with the per-token figures to the microsecond.
row() {
  local label=$1
  shift
  bazel-bin/client/tpserve-cli --target "$server_addr" bench "$@" --json |
    /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["failed"] == 0, r
print("%-16s %9.1f %9.3f %9.3f %9.3f %9.3f %9.3f %11.3f" % (sys.argv[1],
      r["output_throughput"], r["ttft_ms"]["mean"], r["tpot_ms"]["mean"],
      r["itl_ms"]["median"], r["itl_ms"]["p99"], r["step_wall_ms"],
      r["frontend_overhead_ms"]))' "$label"
}
printf "%-16s %9s %9s %9s %9s %9s %9s %11s\n" run "out tok/s" "TTFT ms" "TPOT ms" \
  "ITL p50" "ITL p99" "step ms" "overhead ms"
seed=1
for c in 1 16; do
  for r in $(seq 1 "$rounds"); do
    common=(--num-prompts "$prompts" --input-len "$input_len" --output-len "$output_len"
            --concurrency "$c")
    row "grpc c=$c r$r" "${common[@]}" --seed "$seed"
    row "openai c=$c r$r" "${common[@]}" --seed "$((seed + 1))" --backend openai \
      --openai-url "$url"
    seed=$((seed + 2))
  done
done
