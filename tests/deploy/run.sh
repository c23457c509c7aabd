#!/bin/bash
# Bazel sh_test wrapper: runs deploy_manifest_test.py from the runfiles root with
# Debian's python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 tests/deploy/deploy_manifest_test.py "$@"
