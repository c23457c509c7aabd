#!/usr/bin/env bash
# The forward tool on the GPU in fp32, with the flags compare_forward.py passes.
exec "$(dirname "$0")/../../gpu_bundle/bin/forward" --device cuda --dtype "${TPSERVE_DTYPE:-float32}" "$@"
