#!/usr/bin/env bash
# Runs the GPU test binaries (each CUDA kernel against its CPU reference) on a machine with a
# GPU. Takes the folder holding the built test binaries (default: bazel-bin/tests/gpu), so the
# binaries can be built on a machine without a GPU and copied over.
set -uo pipefail
dir=${1:-bazel-bin/tests/gpu}
# Packed binaries carry libsentencepiece.so.0 beside them (tools/package_gpu_run.sh).
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Tensor parallelism never uses NVLink multicast (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0
failed=0
total=0
# Tests named *_multi_gpu_test need 2 GPUs; on a machine with one they are listed as skipped.
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
for test in "$dir"/*_test; do
  [ -x "$test" ] || continue
  if [[ "$test" == *_multi_gpu_test && "$gpus" -lt 2 ]]; then
    echo "== $(basename "$test"): skipped ($gpus GPU visible; it needs 2)"
    continue
  fi
  total=$((total + 1))
  echo "== $(basename "$test")"
  "$test" || failed=$((failed + 1))
done
echo "$((total - failed)) GPU test binaries passed, $failed failed"
[ "$total" -gt 0 ] && [ "$failed" -eq 0 ]
