#!/usr/bin/env bash
# Two builds of tpserve served side by side on one checkpoint, the same load taking turns
# between them: the way to compare a change against its baseline on a noisy machine,
# where one build's runs minutes apart can differ more than the change does.
#
#   bash tools/bench_builds.sh --save DIR     copy this tree's built tpserve and
#                                             tpserve_worker into DIR (run it at the
#                                             baseline commit, after bazel build)
#   bash tools/bench_builds.sh --base DIR [--test DIR] [--model DIR] [--rounds N]
#       [--concurrency C] [--prompts N] [--input-len N] [--output-len N] [-- SERVER FLAGS]
#
# --test defaults to this tree's bazel-bin (built first). Both servers run at once
# (`tpserve --tp 2 --device cpu --no-prefix-caching` unless SERVER FLAGS say otherwise),
# each round runs `tpserve-cli bench` against the base and then the test server with the
# same seed (a new seed each round), and the last lines give test/base per round and
# their geometric mean. --model defaults to the synthetic TinyLlama-shaped checkpoint
# tools/bench_peers.sh writes (written here if it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/serving_lib.sh

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }

save= base= test= model= rounds=3 concurrency=32 prompts=64 input_len=128 output_len=64
server_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --save) save=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --test) test=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --input-len) input_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    --) shift; server_flags=("$@"); break ;;
    *) echo "unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done

if [ -n "$save" ]; then
  mkdir -p "$save"
  cp -f bazel-bin/server/tpserve bazel-bin/worker/rank/tpserve_worker "$save/"
  echo "saved $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes') to $save"
  exit 0
fi
[ -n "$base" ] || { usage >&2; exit 2; }
for f in tpserve tpserve_worker; do
  [ -x "$base/$f" ] || { echo "$base/$f is missing (make it with --save)" >&2; exit 2; }
done
serving_build
if [ -z "$test" ]; then
  test=$(mktemp -d)
  cp bazel-bin/server/tpserve bazel-bin/worker/rank/tpserve_worker "$test/"
  made_test=$test
fi
if [ -z "$model" ]; then
  model=${TPSERVE_PEERS_CACHE:-$HOME/.cache/tpserve-peers}/models/tinyllama-synth
  if [ ! -f "$model/config.json" ]; then
    mkdir -p "$model"
    serving_tinyllama "$model" 22
  fi
fi
[ ${#server_flags[@]} -gt 0 ] || server_flags=(--tp 2 --device cpu --no-prefix-caching)

logs=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$logs" "${made_test:-}"
}
trap cleanup EXIT

# start NAME DIR: one server from DIR's binaries; sets addr_NAME.
start() {
  : >"$logs/$1.log"  # before the server's own redirect: the poll below may read it first
  "$2/tpserve" --port 0 --model "$model" --worker-binary "$2/tpserve_worker" \
    "${server_flags[@]}" >"$logs/$1.log" 2>&1 &
  pids+=($!)
  local addr=
  for _ in $(seq 1 3000); do
    addr=$(sed -n 's/^.* tpserve: serving on //p' "$logs/$1.log")
    [ -n "$addr" ] && break
    sleep 0.2
  done
  [ -n "$addr" ] || { echo "$1 server did not come up:" >&2; tail -20 "$logs/$1.log" >&2; exit 1; }
  printf -v "addr_$1" '%s' "$addr"
}
start base "$base"
start test "$test"
echo "base $base on $addr_base, test $test on $addr_test; model $model"
echo "each run: $prompts prompts of $input_len tokens, $output_len output tokens, concurrency $concurrency"

# run NAME SEED: one bench run; prints "out_tok_s ttft_ms tpot_ms".
run() {
  local addr_var=addr_$1
  bazel-bin/client/tpserve-cli --target "${!addr_var}" bench --num-prompts "$prompts" \
    --input-len "$input_len" --output-len "$output_len" --concurrency "$concurrency" \
    --seed "$2" --json | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["failed"] == 0, r
print("%.2f %.1f %.1f" % (r["output_throughput"], r["ttft_ms"]["mean"], r["tpot_ms"]["mean"]))'
}

printf "%-6s %-5s %10s %10s %10s\n" round build "out tok/s" "TTFT ms" "TPOT ms"
results=()
for r in $(seq 1 "$rounds"); do
  seed=$((1000 + r))
  b=$(run base "$seed")
  t=$(run test "$seed")
  read -r bt bf bp <<<"$b"
  read -r tt tf tp <<<"$t"
  printf "%-6s %-5s %10s %10s %10s\n" "$r" base "$bt" "$bf" "$bp" "$r" test "$tt" "$tf" "$tp"
  results+=("$bt $bf $bp $tt $tf $tp")
done
printf '%s\n' "${results[@]}" | /usr/bin/python3 -c '
import math, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
names = ("out tok/s", "TTFT", "TPOT")
for i, name in enumerate(names):
    ratios = [r[3 + i] / r[i] for r in rows]
    mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print("test/base %-9s %s  geometric mean %.3fx" % (name, " ".join("%.3fx" % x for x in ratios), mean))'
