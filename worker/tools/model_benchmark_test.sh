#!/bin/bash
# model_benchmark at a toy size: it reports prefill and decode, and with --dir it writes the
# synthetic checkpoint once and reuses it on a later run of the same shape only: another
# shape, or a directory whose checkpoint is gone, is written again.
set -euo pipefail
cd "${TEST_SRCDIR}/tpserve"
bench=worker/tools/model_benchmark
dir="${TEST_TMPDIR}/ckpt"
run() {
  "$bench" --dir "$dir" --tp 1 --hidden 128 --heads 2 --kv-heads 1 --vocab 300 \
    --batches 1,2 --decode-steps 2 --prompt-len 8 --prefill-runs 0 "$@" 2>&1
}
expect() {  # expect OUT reuse|write
  echo "$1" | grep -q "^RESULT tp=1 batch=2 decode_ms=" ||
    { echo "no batch-2 result:"; echo "$1"; exit 1; }
  if [[ $2 == reuse ]]; then
    echo "$1" | grep -q "^reusing the checkpoint" || { echo "not reused:"; echo "$1"; exit 1; }
  else
    if echo "$1" | grep -q "^reusing"; then echo "reused, want written:"; echo "$1"; exit 1; fi
  fi
}
expect "$(run --layers 2)" write
[[ -f "$dir/config.json" && -f "$dir/.model_benchmark_spec" ]] || { ls -la "$dir"; exit 1; }
expect "$(run --layers 2)" reuse
expect "$(run --layers 3)" write            # another shape
grep -q "layers 3" "$dir/.model_benchmark_spec"
expect "$(run --layers 3)" reuse
rm "$dir/config.json"                          # the checkpoint gone, the line still there
expect "$(run --layers 3)" write
echo PASS
