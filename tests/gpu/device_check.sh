#!/usr/bin/env bash
# Runs on the GPU machine: every test binary in gpu_bundle/ (made by prepare_bundle.sh),
# printing a short table; full logs go to the folder given as the first argument.
#   bash tests/gpu/device_check.sh "$OUT"
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu_results}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/gpu_bundle/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/gpu.txt"
printf "%-40s %-8s %s\n" test result seconds
status=0
for bin in gpu_bundle/bin/*; do
  name=$(basename "$bin")
  start=$(date +%s.%N)
  if "$bin" >"$out/$name.log" 2>&1; then result=PASS; else result=FAIL; status=1; fi
  grep -q "SKIPPED" "$out/$name.log" && result=SKIP
  printf "%-40s %-8s %s\n" "$name" "$result" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')"
done
exit $status
