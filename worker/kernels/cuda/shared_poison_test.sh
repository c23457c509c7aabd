#!/bin/bash
# Every static __shared__ declaration in the kernels is followed, within the next four
# lines, by TPSERVE_SHARED_POISON of the same name (vec.cuh): without it the CPU emulator
# cannot poison the variable per CTA, and a read before the first write would pass CI and
# read garbage on a device. Also checks the check: a declaration without one is reported.
set -euo pipefail
cd "${TEST_SRCDIR}/tpserve/worker/kernels/cuda"
check() {  # files... ; prints "file:line: name" for each unpoisoned declaration
  /usr/bin/python3 - "$@" <<'PY'
import re, sys
decl = re.compile(r"^\s*__shared__\s+(?!.*\bextern\b)[^;(]*?\b(\w+)\s*(\[[^;]*\])?\s*;")
for path in sys.argv[1:]:
    lines = open(path).read().split("\n")
    for i, line in enumerate(lines):
        m = decl.match(line)
        if m and not any("TPSERVE_SHARED_POISON(%s)" % m.group(1) in l for l in lines[i + 1:i + 5]):
            print("%s:%d: %s" % (path, i + 1, m.group(1)))
PY
}
files=$(ls *.cu *.cuh)
missing=$(check $files)
if [[ -n "$missing" ]]; then
  echo "static __shared__ declarations without TPSERVE_SHARED_POISON:"; echo "$missing"; exit 1
fi
count=$(grep -c "^\s*__shared__" $files | awk -F: '{s += $2} END {print s}')
[[ $count -ge 5 ]] || { echo "found only $count __shared__ declarations: the scan is broken"; exit 1; }
printf '__global__ void K() {\n  __shared__ float lonely[32];\n  lonely[0] = 1;\n}\n' \
  > "${TEST_TMPDIR}/bad.cu"
[[ "$(check "${TEST_TMPDIR}/bad.cu")" == *": lonely" ]] || { echo "the check missed a bare declaration"; exit 1; }
echo "PASS: $count declarations, each poisoned"
