#!/usr/bin/env bash
# `ssdq calibrate --device` and `--gemm`: TF32 is refused on the CPU, an unknown device is refused,
# and a missing CUDA device is refused before any work, leaving no statistics file (CI has no GPU;
# on a machine with one, that last check is skipped).
set -euo pipefail
ssdq=tools/ssdq
data=examples/wikitext-2-raw/wiki.test.raw
tmp=$TEST_TMPDIR
common=(--model examples/mamba2-tiny --data "$data" --samples 2 --seqlen 64 --out "$tmp/c.safetensors" --quiet)

if "$ssdq" calibrate "${common[@]}" --gemm tf32 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--gemm tf32 needs --device cuda" "$tmp/err"
if "$ssdq" calibrate "${common[@]}" --gemm fp16 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--gemm" "$tmp/err"
if "$ssdq" calibrate "${common[@]}" --device tpu 2>"$tmp/err"; then exit 1; fi
grep -qiF "tpu" "$tmp/err"
[ ! -e "$tmp/c.safetensors" ]
if ! command -v nvidia-smi >/dev/null 2>&1; then
  if "$ssdq" calibrate "${common[@]}" --device cuda 2>"$tmp/err"; then exit 1; fi
  grep -qF -- "--device cuda: no usable CUDA device" "$tmp/err"
  grep -qF -- "use --device cpu" "$tmp/err"
  [ ! -e "$tmp/c.safetensors" ]
fi
"$ssdq" calibrate --help | grep -qF -- "--device"
"$ssdq" calibrate --help | grep -qF -- "--gemm"
echo "calibrate_device_cli_test: ok"
