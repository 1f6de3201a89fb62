#!/usr/bin/env bash
# `ssdq calibrate --synthetic NAME` and `ssdq export --synthetic NAME`: random weights of an
# official shape (mamba2-130m) calibrated and exported without a checkpoint, the artifact runs,
# its provenance names the synthetic model; a statistics file of a synthetic model is refused for
# a real one, and unknown names or neither flag are refused.
set -euo pipefail
ssdq=tools/ssdq
data=examples/wikitext-2-raw/wiki.test.raw
tmp=$TEST_TMPDIR

"$ssdq" calibrate --synthetic mamba2-130m --data "$data" --samples 2 --seqlen 64 --out "$tmp/syn.safetensors" \
  --quiet >/dev/null 2>"$tmp/err"
"$ssdq" export --synthetic mamba2-130m --calib "$tmp/syn.safetensors" --recipe rtn --bits w8a8 \
  --out "$tmp/syn.ssdq" --quiet >/dev/null 2>>"$tmp/err"
out=$("$ssdq" eval-ppl --artifact "$tmp/syn.ssdq" --data "$data" --max-tokens 65 --ctx 64 --quiet)
grep -qE "^perplexity [0-9.]+ ± [0-9.]+ · 64 scored tokens" <<<"$out"
grep -q "synthetic:mamba2-130m" "$tmp/syn.ssdq"

if "$ssdq" export --model examples/mamba2-tiny --calib "$tmp/syn.safetensors" --recipe rtn --bits w8a8 \
  --out "$tmp/x.ssdq" 2>"$tmp/err"; then exit 1; fi
grep -qF "(synthetic:mamba2-130m)" "$tmp/err"
[ ! -e "$tmp/x.ssdq" ]
if "$ssdq" calibrate --synthetic mamba2-9t --data "$data" --out "$tmp/n.safetensors" 2>"$tmp/err"; then exit 1; fi
grep -qF "unknown config (known: mamba2-130m" "$tmp/err"
if "$ssdq" calibrate --data "$data" --out "$tmp/n.safetensors" 2>"$tmp/err"; then exit 1; fi
grep -qF "calibrate needs exactly one of --model and --synthetic" "$tmp/err"
if "$ssdq" calibrate --model examples/mamba2-tiny --synthetic mamba2-130m --data "$data" --out "$tmp/n.safetensors" \
  2>"$tmp/err"; then exit 1; fi
echo "synthetic_pipeline_cli_test: ok"
