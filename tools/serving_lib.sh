# Helpers for the serving benchmarks (sourced by tools/bench_serving.sh and
# tools/bench_prefix_cache.sh; run from the repository root).

# Builds the server, worker, CLI and model_benchmark (which writes synthetic checkpoints).
serving_build() {
  bazel build //server:tpserve //worker/rank:tpserve_worker //client:tpserve-cli \
    //worker/tools:model_benchmark >/dev/null 2>&1
}

# serving_model DIR LAYERS HIDDEN [MODEL_BENCHMARK FLAGS...]: a synthetic Llama-shaped
# checkpoint in DIR; prints model_benchmark's line describing it.
serving_model() {
  local log
  log=$(mktemp)
  # --tp 1 --decode-steps 1 keeps model_benchmark's own run short.
  bazel-bin/worker/tools/model_benchmark --dir "$1" --layers "$2" --hidden "$3" \
    --tp 1 --prompt-len 8 --decode-steps 1 "${@:4}" >"$log"
  head -1 "$log"
  rm -f "$log"
}

# serving_tinyllama DIR LAYERS: a synthetic checkpoint of the 1.1B TinyLlama shape (hidden
# 2048, heads 32/4, intermediate 5632, vocab 32000, random bf16 weights) with LAYERS layers
# in DIR; prints model_benchmark's line describing it.
serving_tinyllama() {
  serving_model "$1" "$2" 2048 --intermediate 5632 --heads 32 --kv-heads 4 --vocab 32000 \
    --dtype bfloat16
}

# serving_start LOG ARGS...: starts tpserve with ARGS (port 0), logging to LOG; sets
# server_pid and server_addr once it serves, or prints the log and returns 1.
serving_start() {
  local log=$1
  shift
  bazel-bin/server/tpserve --port 0 "$@" >"$log" 2>&1 &
  server_pid=$!
  server_addr=
  for _ in $(seq 1 1200); do
    server_addr=$(sed -n 's/^.* tpserve: serving on //p' "$log")
    [ -n "$server_addr" ] && return 0
    sleep 0.1
  done
  cat "$log"
  return 1
}

# serving_stop: SIGTERM to the server serving_start started, and waits for it.
serving_stop() {
  [ -n "${server_pid:-}" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}

# serving_header: the column names serving_row prints.
serving_header() {
  printf "%-24s %8s %10s %10s %10s %10s %10s %12s %12s\n" run "req/s" "out tok/s" "TTFT ms" \
    "TPOT ms" "E2E ms" "cached %" "step ms" "overhead ms"
}

# serving_row LABEL BENCH_ARGS...: one `tpserve-cli bench --json` run against server_addr,
# printed as a row under serving_header.
serving_row() {
  local label=$1
  shift
  bazel-bin/client/tpserve-cli --target "$server_addr" bench "$@" --json |
    /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["failed"] == 0, r
print("%-24s %8.2f %10.1f %10.1f %10.1f %10.1f %10.1f %12.3f %12.3f" % (sys.argv[1],
      r["request_throughput"], r["output_throughput"], r["ttft_ms"]["mean"],
      r["tpot_ms"]["mean"], r["e2e_ms"]["mean"],
      100.0 * r["cached_prompt_tokens"] / max(r["input_tokens"], 1), r["step_wall_ms"],
      r["frontend_overhead_ms"]))' "$label"
}

# serving_setup LAYERS HIDDEN: builds, writes a synthetic checkpoint to $model and
# makes $log; both go, and the server stops, when the script exits.
serving_setup() {
  serving_build
  model=$(mktemp -d)
  log=$(mktemp)
  trap 'serving_stop; rm -rf "$model" "$log"' EXIT
  serving_model "$model" "$1" "$2"
}
