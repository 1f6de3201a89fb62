#!/usr/bin/env bash
# Builds the ssdq binary, the GPU tests and the kernel benchmark (-c opt, sm_90a) and packs them,
# stripped, into .carry/gpu-bin.tar.xz for a GPU machine that has no Bazel. There, from the
# repository root: `tar -xJf .carry/gpu-bin.tar.xz -C /tmp && tools/run_gpu_tests.sh /tmp/gpu-bin`
# (ssdq itself: `LD_LIBRARY_PATH=/tmp/gpu-bin /tmp/gpu-bin/ssdq ...`).
# With arguments, packs only the binaries named (e.g. `ssdq`), for a lighter carry.
set -euo pipefail
cd "$(dirname "$0")/.."
# Hopper machine code alone (--config=sm90a): the GPU machines are H100s / H200s, and a call carries
# the repository and these binaries within 64 MiB.
bazel build -c opt --config=sm90a //tools:ssdq //tests/gpu:all
bin=$(bazel info -c opt --config=sm90a bazel-bin 2>/dev/null)
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
# ssdq links Debian's libsentencepiece (shared only), which the GPU machine lacks: it travels beside
# the binaries; run them with LD_LIBRARY_PATH=/tmp/gpu-bin (tools/run_gpu_tests.sh sets it).
cp -L /usr/lib/x86_64-linux-gnu/libsentencepiece.so.0 .carry/gpu-bin/
# xz -9e with a dictionary as large as the whole tar (one thread: several would cut it into blocks)
# finds the kernels the binaries share across all of them: every binary, 246 MB stripped, packs
# into ~19 MB, where the default 64 MiB window left 34 MB and -T2 46 MB — with the repository more
# than a GPU call may carry.
tar -C .carry -cf .carry/gpu-bin.tar gpu-bin
dict_mib=$(( $(stat -c %s .carry/gpu-bin.tar) / 1048576 + 1 ))
if [ "$dict_mib" -lt 64 ]; then dict_mib=64; fi
if [ "$dict_mib" -gt 1536 ]; then dict_mib=1536; fi  # xz's largest
xz --lzma2=preset=9e,dict=${dict_mib}MiB -T1 -c .carry/gpu-bin.tar >.carry/gpu-bin.tar.xz
rm -f .carry/gpu-bin.tar
rm -rf .carry/gpu-bin
ls -la .carry/gpu-bin.tar.xz
