#!/usr/bin/env bash
# Builds everything (CUDA kernels and GPU tests included) and runs every CPU test; GPU tests
# (tag "gpu") are built but not run here: tools/run_gpu_tests.sh runs them on a GPU machine.
# Ends with the line "P passed, F failed" (test cases, from the GoogleTest XML reports).
set -uo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh || exit 1
log=$(mktemp)
bazel test -c opt --test_tag_filters=-gpu //... "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
tools/count_test_results.sh "$log"
rm -f "$log"
exit "$status"
