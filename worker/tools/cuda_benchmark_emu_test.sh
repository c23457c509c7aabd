#!/bin/bash
# cuda_benchmark on the CPU emulator at toy sizes: it must run every phase (ceilings,
# decode through graphs and eagerly at two batch sizes, prefill), print its table and
# write JSON with every field, positive; and refuse bad flags with exit 2.
set -euo pipefail
cd "${TEST_SRCDIR}/tpserve"
bench=worker/tools/cuda_benchmark_emu
json="${TEST_TMPDIR}/bench.json"
for dtype in bfloat16 float32; do
  out=$("$bench" --model tests/data/models/llama_gqa --batches 1,3 --context 9 --steps 3 \
        --prefill 21 --copy-mb 1 --gemm-n 64 --dtype "$dtype" --json "$json" 2>&1) || {
    echo "cuda_benchmark failed ($dtype):"; echo "$out"; exit 1; }
  echo "$out"
  echo "$out" | grep -q "^prefill 21 tokens:" || { echo "no prefill line"; exit 1; }
  /usr/bin/python3 - "$json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for key in ("gpu_hbm_gbps", "gpu_gemm_tflops", "params", "load_s"):
    assert key in r, key
assert r["gpu_hbm_gbps"] > 0 and r["gpu_gemm_tflops"] > 0 and r["params"] > 0, r
assert [d["batch"] for d in r["decode"]] == [1, 3], r["decode"]
for d in r["decode"]:
    assert d["context"] == 9 and d["ms_per_step"] > 0 and d["eager_ms_per_step"] > 0, d
    assert d["floor_ms"] > 0, d
    assert d["host_us_per_step"] > 0 and d["eager_host_us_per_step"] > 0, d
assert r["prefill"]["tokens"] == 21 and r["prefill"]["ms"] > 0, r["prefill"]
assert r["prefill"]["tflops"] > 0, r["prefill"]
PY
done
for bad in "--gemm-n 60" "--copy-mb 0" "--steps 0"; do
  set +e
  "$bench" --model tests/data/models/llama_gqa $bad > "${TEST_TMPDIR}/bad.txt" 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] || { echo "$bad: exit $rc, want 2"; cat "${TEST_TMPDIR}/bad.txt"; exit 1; }
done
echo PASS
