#!/usr/bin/env bash
# Runs the GPU test binaries (each CUDA kernel against its CPU reference) on a machine with a
# GPU. Takes the folder holding the built test binaries (default: bazel-bin/tests/gpu), so the
# binaries can be built on a machine without a GPU and copied over.
set -uo pipefail
dir=${1:-bazel-bin/tests/gpu}
# Packed binaries carry libsentencepiece.so.0 beside them (tools/package_gpu_run.sh).
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
failed=0
total=0
for test in "$dir"/*_test; do
  [ -x "$test" ] || continue
  total=$((total + 1))
  echo "== $(basename "$test")"
  "$test" || failed=$((failed + 1))
done
echo "$((total - failed)) GPU test binaries passed, $failed failed"
[ "$total" -gt 0 ] && [ "$failed" -eq 0 ]
