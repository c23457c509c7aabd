#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite.
# GPU tests are tagged "gpu" and skipped here; see tests/gpu/ for the device check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
python3 tools/check_layout_test.py -q
python3 tools/check_layout.py
bazel build //...
bazel test //... "$@"
