#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite, then builds
# deploy/Dockerfile and runs the image (tests/deploy/image_test.py).
# GPU tests are tagged "gpu" and skipped here; see tests/gpu/ for the device check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
python3 tools/check_layout_test.py -q
python3 tools/check_layout.py
bazel build //...
bazel test //... "$@"
# The image, built and run for real (podman; skipped, saying why, where containers cannot
# run). Only for the whole suite: not when the tests were narrowed by arguments.
if [ $# -eq 0 ]; then
  /usr/bin/python3 tests/deploy/image_test.py
fi
