#!/usr/bin/env bash
# "Checkpoints it has never seen": make N fresh random-shape fixtures (random
# architecture, head counts, kv ratio, head_dim, vocab size, tying, rope
# scaling, bf16/sharding) with transformers, run the C++ forward tool on each at
# every valid tp size, one-shot and --incremental, and compare logits (and the
# greedy tokens/logprobs) with compare_forward.py; with -S also serve each one with
# tpserve at every tp size and compare its greedy generations (compare_serving.py).
#
# usage: tests/oracle/unseen_check.sh [-n N] [-s SEED] [-t TOOL] [-a ARG]... [-c ARG]... [-k]
#                                     [-o DIR] [-S] [-r ARG]...
#   -n N     number of fixtures (default 5)
#   -s SEED  first shape seed (default: from the clock, printed, so a failure
#            can be reproduced with -s SEED)
#   -t TOOL  forward tool (default bazel-bin/worker/tools/forward)
#   -a ARG   one more argument for the tool (repeatable), e.g. the CUDA path on the
#            CPU emulator: -t bazel-bin/worker/tools/forward_emu -a --device -a cuda
#   -c ARG   one more argument for compare_forward.py (repeatable), e.g. bf16's
#            tolerance: -a --dtype -a bfloat16 -c --tol=5e-2 -c --no-greedy (int8:
#            -a --quantization -a int8, the same -c)
#   -o DIR   where to put the fixtures (default a fresh temp dir)
#   -k       keep the fixtures directory
#   -S       also check greedy generation through tpserve (bazel build //server:tpserve
#            //worker/rank:tpserve_worker //client:tpserve-cli first)
#   -r ARG   one more tpserve flag for -S (repeatable), e.g. serving on the CUDA
#            emulator: -r --device=cuda -r --dtype=float32
#            -r --worker-binary=bazel-bin/worker/rank/tpserve_worker_emu
# Needs the oracle venv (tests/oracle/README.md), or PYTHON=... pointing to a
# python with torch, transformers, safetensors, numpy.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv-oracle/bin/python}"
N=5; SEED=""; TOOL="$ROOT/bazel-bin/worker/tools/forward"; KEEP=0; DIR=""; SERVE=0; BIN="$ROOT/bazel-bin"
TOOL_ARGS=(); COMPARE_ARGS=(); SERVER_ARGS=()
while getopts "n:s:t:a:c:o:kSr:" opt; do
  case "$opt" in
    n) N="$OPTARG" ;; s) SEED="$OPTARG" ;; t) TOOL="$OPTARG" ;; a) TOOL_ARGS+=(--tool-arg="$OPTARG") ;;
    c) COMPARE_ARGS+=("$OPTARG") ;; r) SERVER_ARGS+=(--server-arg="$OPTARG") ;;
    o) DIR="$OPTARG" ;; k) KEEP=1 ;; S) SERVE=1 ;;
    *) sed -n '2,28p' "$0"; exit 2 ;;
  esac
done
[[ -n "$SEED" ]] || SEED=$(( $(date +%s) % 1000000 ))
case "$TOOL" in /*) ;; *) TOOL="$PWD/$TOOL" ;; esac
if [[ ! -x "$TOOL" ]]; then echo "forward tool not found: $TOOL (build it: bazel build //worker/tools:forward)"; exit 2; fi
if [[ ! -x "$PY" ]]; then echo "python not found: $PY (make the oracle venv, see tests/oracle/README.md)"; exit 2; fi
export PATH="$(dirname "$PY"):$PATH"   # lets a python stand-in tool find the venv
if [[ -z "$DIR" ]]; then DIR="$(mktemp -d /tmp/tpserve_unseen.XXXXXX)"; else mkdir -p "$DIR"; KEEP=1; fi
[[ $KEEP == 1 ]] || trap 'rm -rf "$DIR"' EXIT
echo "unseen check: $N fixtures, seeds $SEED..$((SEED + N - 1)), tool $TOOL, dir $DIR"

passed=0; failed=0; failed_runs=()
for ((i = 0; i < N; i++)); do
  s=$((SEED + i)); name="unseen_$s"
  if ! "$PY" "$HERE/make_fixture.py" --random-shapes "$s" --name "$name" --out-root "$DIR" \
       > "$DIR/$name.make.log" 2>&1; then
    echo "FAIL making fixture $name:"; tail -5 "$DIR/$name.make.log"
    failed=$((failed + 1)); failed_runs+=("$name:make"); continue
  fi
  grep "^$name:" "$DIR/$name.make.log"
  tps=$("$PY" -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["tp_sizes"])))' \
        "$DIR/$name/golden.json")
  for tp in $tps; do
    for mode in oneshot incremental; do
      extra=(); [[ $mode == incremental ]] && extra=(--incremental)
      if "$PY" "$HERE/compare_forward.py" "$DIR/$name" --tool "$TOOL" --tp "$tp" "${extra[@]}" "${TOOL_ARGS[@]}" "${COMPARE_ARGS[@]}" \
           > "$DIR/$name.tp$tp.$mode.log" 2>&1; then
        passed=$((passed + 1))
        tail -1 "$DIR/$name.tp$tp.$mode.log"
      else
        failed=$((failed + 1)); failed_runs+=("$name:tp$tp:$mode")
        cat "$DIR/$name.tp$tp.$mode.log"
      fi
    done
    if [[ $SERVE == 1 ]]; then
      if "$PY" "$HERE/compare_serving.py" "$DIR/$name" --tp "$tp" --bin "$BIN" "${SERVER_ARGS[@]}" \
           > "$DIR/$name.tp$tp.serving.log" 2>&1; then
        passed=$((passed + 1)); tail -1 "$DIR/$name.tp$tp.serving.log"
      else
        failed=$((failed + 1)); failed_runs+=("$name:tp$tp:serving")
        cat "$DIR/$name.tp$tp.serving.log"
      fi
    fi
  done
done
echo "seeds $SEED..$((SEED + N - 1))${failed_runs[*]:+; failed: ${failed_runs[*]}}"
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
