#!/bin/bash
# Bazel sh_test wrapper: runs tests/deploy/$1 from the runfiles root with Debian's
# python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
script="$1"
shift
exec /usr/bin/python3 "tests/deploy/$script" "$@"
