#!/usr/bin/env bash
# `ssdq export --device`, `--gemm` and `--checkpoint-seconds`: TF32 is refused on the CPU, an
# unknown device and a negative interval are refused, and a missing CUDA device is refused before
# any work, leaving no artifact and no partial file (CI has no GPU; on a machine with one, that
# last check is skipped).
set -euo pipefail
ssdq=tools/ssdq
model=examples/mamba2-tiny
tmp=$TEST_TMPDIR
"$ssdq" calibrate --model "$model" --data examples/wikitext-2-raw/wiki.test.raw --samples 2 --seqlen 64 \
  --out "$tmp/c.safetensors" --quiet >/dev/null
common=(--model "$model" --calib "$tmp/c.safetensors" --recipe had --bits w8a8 --out "$tmp/e.ssdq" --quiet)

if "$ssdq" export "${common[@]}" --gemm tf32 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--gemm tf32 needs --device cuda" "$tmp/err"
if "$ssdq" export "${common[@]}" --device tpu 2>"$tmp/err"; then exit 1; fi
grep -qiF "tpu" "$tmp/err"
if "$ssdq" export "${common[@]}" --checkpoint-seconds -1 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--checkpoint-seconds" "$tmp/err"
[ ! -e "$tmp/e.ssdq" ] && [ ! -e "$tmp/e.ssdq.partial" ]
if ! command -v nvidia-smi >/dev/null 2>&1; then
  if "$ssdq" export "${common[@]}" --device cuda 2>"$tmp/err"; then exit 1; fi
  grep -qF -- "--device cuda: no usable CUDA device" "$tmp/err"
  [ ! -e "$tmp/e.ssdq" ] && [ ! -e "$tmp/e.ssdq.partial" ]
fi
# On the CPU with a checkpoint after every layer: the partial file is gone at the end.
"$ssdq" export "${common[@]}" --checkpoint-seconds 0 >/dev/null
[ -s "$tmp/e.ssdq" ] && [ ! -e "$tmp/e.ssdq.partial" ]
for flag in --device --gemm --checkpoint-seconds; do "$ssdq" export --help | grep -qF -- "$flag"; done
echo "export_device_cli_test: ok"
