#!/bin/bash
# Bazel sh_test wrapper: runs one end-to-end test script (the first argument, a file in
# tests/e2e/) with Debian's python3, which has grpcio and protobuf.
set -euo pipefail
script="$1"
shift
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 "tests/e2e/${script}" "$@"
