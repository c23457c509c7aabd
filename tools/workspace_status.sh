#!/usr/bin/env bash
# Bazel's --workspace_status_command (.bazelrc): the revision `--version` reports.
# STABLE_ keys rebuild what is stamped with them (base:build_info) when they change.
# TPSERVE_GIT_REVISION overrides it where the source is not a git checkout (an image
# build that copies the tree without .git).
rev=${TPSERVE_GIT_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
echo "STABLE_TPSERVE_GIT_REVISION ${rev}"
