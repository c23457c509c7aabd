#!/usr/bin/env bash
# The device check, on a machine with one GPU (its own CUDA driver, cuBLAS, NCCL, torch
# and transformers; none of our Debian libraries). Needs gpu_bundle/ or gpu_bundle.tgz
# from prepare_bundle.sh. Runs, each bounded in time:
#   1. every gpu-tagged test (kernels vs CPU references, NCCL at tp 1, the CUDA model
#      against the fixtures' golden logits in fp32 and bf16);
#   2. the forward tool with --device cuda on every fixture vs its golden logits;
#   3. one fixture against transformers running on the GPU;
#   4. tpserve --device cuda with tpserve-cli on every fixture, greedy ids vs the goldens;
#   5. cuda_benchmark on a random Llama-3-8B-shaped checkpoint made here with torch.
# Prints a short table last; full logs and bench.json go to the folder given.
#   bash tests/gpu/device_check.sh "$OUT" [--quick]   (--quick: skip the 8B benchmark)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu_results}
quick=${2:-}
mkdir -p "$out"
[ -d gpu_bundle ] || tar xzf gpu_bundle.tgz || { echo "no gpu_bundle: run prepare_bundle.sh"; exit 2; }

# cuBLAS and NCCL come from the image: its toolkit, or the nvidia-* wheels beside torch.
wheel_libs=$(python3 - <<'PY' 2>/dev/null
import importlib, os
dirs = []
for name in ("nvidia.nccl", "nvidia.cublas", "nvidia.cu13", "nvidia.cuda_runtime"):
    try:
        for p in importlib.import_module(name).__path__:
            for sub in ("lib", "lib64"):
                if os.path.isdir(os.path.join(p, sub)):
                    dirs.append(os.path.join(p, sub))
    except Exception:
        pass
print(":".join(dirs))
PY
)
export LD_LIBRARY_PATH="$PWD/gpu_bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${wheel_libs}:${LD_LIBRARY_PATH:-}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >"$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$out/env.txt"
missing=$(ldd gpu_bundle/bin/* | grep "not found" | sort -u)
if [ -n "$missing" ]; then echo "missing libraries: $missing" | tee -a "$out/env.txt"; fi

declare -a rows
status=0
record() {  # name result seconds
  rows+=("$(printf "%-44s %-6s %7s" "$1" "$2" "$3")")
  [ "$2" = FAIL ] && status=1
}
run() {  # name limit_s command...
  local name=$1 limit=$2
  shift 2
  local start result
  start=$(date +%s.%N)
  if timeout "$limit" "$@" >"$out/$name.log" 2>&1; then result=PASS; else result=FAIL; fi
  grep -q "\[  SKIPPED \]" "$out/$name.log" && [ "$result" = PASS ] && result=SKIP
  record "$name" "$result" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')"
}

# 1. gpu tests
for bin in gpu_bundle/tests/*; do run "$(basename "$bin")" 300 "$bin"; done
grep -h "worst relative error" "$out/cuda_golden_test.log" >"$out/golden_errors.txt" 2>/dev/null

# 2. the forward tool on every fixture (fp32, one-shot; cuda_golden_test covers the
#    incremental and staggered schedules in-process)
for dir in tests/data/models/*/; do
  run "forward_$(basename "$dir")" 120 python3 tests/oracle/compare_forward.py "$dir" \
    --tool tests/gpu/forward_cuda.sh --tp 1 --no-greedy
done

# 3. transformers on the GPU
run hf_gpu_llama_gqa 180 python3 tests/gpu/hf_gpu_compare.py tests/data/models/llama_gqa \
  gpu_bundle/bin/forward

# 4. serving: tpserve --device cuda and tpserve-cli, greedy ids vs the goldens
run serve_check 300 python3 tests/gpu/serve_check.py

# 5. the 8B benchmark
if [ "$quick" != --quick ]; then
  ckpt=${TPSERVE_BENCH_DIR:-/tmp/tpserve_llama8b}
  [ -f "$ckpt/config.json" ] || run make_llama8b 240 python3 tests/gpu/make_llama8b.py "$ckpt"
  run cuda_benchmark 400 gpu_bundle/bin/cuda_benchmark --model "$ckpt" --json "$out/bench.json"
fi
run paged_attention_benchmark 60 gpu_bundle/bin/paged_attention_benchmark
# The real race check of the attention tiles (the CPU has no model of warps).
if [ "$quick" != --quick ] && command -v compute-sanitizer >/dev/null; then
  run racecheck_paged_attention 120 compute-sanitizer --tool racecheck --error-exitcode 1 \
    gpu_bundle/tests/paged_attention_test --gtest_filter='*Mixed*:*CapturedGraph*'
fi

echo
grep -h "rel err\|relative error" "$out"/hf_gpu_llama_gqa.log 2>/dev/null | head -8
cat "$out/golden_errors.txt" 2>/dev/null | sort -k4 -g | tail -4
[ -f "$out/cuda_benchmark.log" ] && cat "$out/cuda_benchmark.log"
tail -12 "$out/paged_attention_benchmark.log" 2>/dev/null
echo
printf "%-44s %-6s %7s\n" check result seconds
printf "%s\n" "${rows[@]}"
exit $status
