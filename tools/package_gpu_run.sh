#!/usr/bin/env bash
# Builds the ssdq binary, the GPU tests and the kernel benchmark (-c opt) and packs them,
# stripped, into .carry/gpu-bin.tar.xz for a GPU machine that has no Bazel. There, from the
# repository root: `tar -xJf .carry/gpu-bin.tar.xz -C /tmp && tools/run_gpu_tests.sh /tmp/gpu-bin`.
# With arguments, packs only the binaries named (e.g. `ssdq`), for a lighter carry.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //tools:ssdq //tests/gpu:all
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
rm -rf .carry/gpu-bin && mkdir -p .carry/gpu-bin
cp "$bin"/tools/ssdq .carry/gpu-bin/
for f in "$bin"/tests/gpu/*; do
  [ $# -eq 0 ] || break
  [ -f "$f" ] && [ -x "$f" ] && case "$f" in *.sh|*.params|*.runfiles*) ;; *) cp "$f" .carry/gpu-bin/ ;; esac
done
if [ $# -gt 0 ]; then
  for f in .carry/gpu-bin/*; do
    case " $* " in *" $(basename "$f") "*) ;; *) rm -f "$f" ;; esac
  done
  for name in "$@"; do [ -e ".carry/gpu-bin/$name" ] || cp "$bin/tests/gpu/$name" .carry/gpu-bin/; done
fi
chmod u+w .carry/gpu-bin/*
strip .carry/gpu-bin/*
# xz -9e: its 64 MiB window finds the kernels the binaries share (all of them: ~14 MB instead of
# ~27 MB at the default level, which with the repository exceeds what a GPU call may carry).
tar -C .carry -cf - gpu-bin | xz -9e -T2 >.carry/gpu-bin.tar.xz
rm -rf .carry/gpu-bin
ls -la .carry/gpu-bin.tar.xz
