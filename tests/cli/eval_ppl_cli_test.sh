#!/usr/bin/env bash
# `ssdq eval-ppl` on the CPU with the bundled model: perplexity ± its error, and --reference:
# the FP model against itself (KL 0, top-1 agreement 100 %) and an rtn W8A8 artifact against the
# FP model (KL above 0, the same reference perplexity), with the --json report; a missing
# reference is refused before anything runs.
set -euo pipefail
ssdq=tools/ssdq
model=examples/mamba2-tiny
data=examples/wikitext-2-raw/wiki.test.raw
tmp=$TEST_TMPDIR
common=(--data "$data" --max-tokens 513 --ctx 256 --quiet)

out=$("$ssdq" eval-ppl --model "$model" "${common[@]}" --json "$tmp/plain.json")
grep -qE "^perplexity [0-9.]+ ± [0-9.]+ · 512 scored tokens in 2 windows" <<<"$out"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['perplexity']['error'] > 0, r" "$tmp/plain.json"

out=$("$ssdq" eval-ppl --model "$model" --reference "$model" "${common[@]}" --json "$tmp/self.json")
grep -qE "^KL divergence +0\.000000 ± 0\.000000 nats" <<<"$out"
grep -qE "^top-1 agreement +100\.000 ± 0\.000 %" <<<"$out"

"$ssdq" calibrate --model "$model" --data "$data" --samples 2 --seqlen 128 --out "$tmp/calib.safetensors" --quiet >/dev/null
"$ssdq" export --model "$model" --calib "$tmp/calib.safetensors" --recipe rtn --bits w8a8 --out "$tmp/rtn.ssdq" \
  --quiet >/dev/null
"$ssdq" eval-ppl --artifact "$tmp/rtn.ssdq" --reference "$model" "${common[@]}" --json "$tmp/rtn.json" >/dev/null
python3 - "$tmp/self.json" "$tmp/rtn.json" <<'PY'
import json, sys
same, rtn = (json.load(open(p)) for p in sys.argv[1:])
assert same["kl_divergence"]["mean"] == 0 and same["top1_agreement"]["mean"] == 1, same
assert rtn["kl_divergence"]["mean"] > 0 and rtn["kl_divergence"]["p999"] >= rtn["kl_divergence"]["p99"], rtn
assert 0 < rtn["top1_agreement"]["mean"] < 1, rtn
# The reference is the same FP model in both runs.
assert abs(rtn["reference_perplexity"]["mean"] - same["perplexity"]["mean"]) < 1e-9 * same["perplexity"]["mean"]
PY

if "$ssdq" eval-ppl --model "$model" --reference "$tmp/absent" "${common[@]}" 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--reference $tmp/absent: no such folder" "$tmp/err"
# --tp 2: the model sharded over two virtual ranks gives the perplexity of one rank (only the
# summation order differs); sizes that do not divide the model are refused with the valid ones.
"$ssdq" eval-ppl --model "$model" --tp 2 "${common[@]}" --json "$tmp/tp2.json" >/dev/null
python3 - "$tmp/plain.json" "$tmp/tp2.json" <<'PY'
import json, sys
one, two = (json.load(open(p))["perplexity"]["mean"] for p in sys.argv[1:])
assert abs(two - one) < 1e-5 * one, (one, two)
PY
# An rtn W8A8 artifact over two virtual ranks: its int32 products summed across the ranks, so the
# layers are the one-rank runtime's bit for bit and only the lm_head's slices round differently.
"$ssdq" eval-ppl --artifact "$tmp/rtn.ssdq" "${common[@]}" --json "$tmp/rtn1.json" >/dev/null
"$ssdq" eval-ppl --artifact "$tmp/rtn.ssdq" --tp 2 "${common[@]}" --json "$tmp/rtn2.json" >/dev/null
python3 - "$tmp/rtn1.json" "$tmp/rtn2.json" <<'PY'
import json, sys
one, two = (json.load(open(p))["perplexity"]["mean"] for p in sys.argv[1:])
assert abs(two - one) < 1e-6 * one, (one, two)
PY
if "$ssdq" eval-ppl --artifact "$tmp/rtn.ssdq" --tp 2 --device cuda "${common[@]}" 2>"$tmp/err"; then exit 1; fi
grep -qF "needs 2 CUDA devices, 0 visible" "$tmp/err"
# A rotated recipe: exported with --tp-blocks 2 it runs on two ranks (a 2.0 artifact); exported
# without, --tp 2 is refused naming the flag.
"$ssdq" export --model "$model" --calib "$tmp/calib.safetensors" --recipe had --bits w8a8 --tp-blocks 2 \
  --out "$tmp/had2.ssdq" --quiet >/dev/null
"$ssdq" eval-ppl --artifact "$tmp/had2.ssdq" "${common[@]}" --json "$tmp/had1.json" >/dev/null
"$ssdq" eval-ppl --artifact "$tmp/had2.ssdq" --tp 2 "${common[@]}" --json "$tmp/had2.json" >/dev/null
python3 - "$tmp/had1.json" "$tmp/had2.json" <<'PY'
import json, sys
one, two = (json.load(open(p))["perplexity"]["mean"] for p in sys.argv[1:])
assert abs(two - one) < 1e-3 * one, (one, two)
PY
# A partial file that is not this export's is reported, replaced and removed at the end.
echo "not an artifact" > "$tmp/had.ssdq.partial"
out=$("$ssdq" export --model "$model" --calib "$tmp/calib.safetensors" --recipe had --bits w8a8 --out "$tmp/had.ssdq" \
  --quiet)
grep -qF "not resuming from $tmp/had.ssdq.partial:" <<<"$out"
grep -qF "starting over" <<<"$out"
test ! -e "$tmp/had.ssdq.partial"
if "$ssdq" eval-ppl --artifact "$tmp/had.ssdq" --tp 2 "${common[@]}" 2>"$tmp/err"; then exit 1; fi
grep -qF -- "export the artifact with --tp-blocks 2" "$tmp/err"
if "$ssdq" export --model "$model" --calib "$tmp/calib.safetensors" --recipe had --bits w8a8 --tp-blocks 3 \
  --out "$tmp/bad.ssdq" --quiet 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--tp-blocks 3: the model's 8 heads do not split into 3 blocks" "$tmp/err"
test ! -e "$tmp/bad.ssdq"
if "$ssdq" eval-ppl --model "$model" --tp 3 "${common[@]}" 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--tp 3: 8 heads, 1 group, vocabulary 50288" "$tmp/err"
grep -qF -- "valid: --tp 2, 4, 8" "$tmp/err"
if "$ssdq" eval-ppl --model "$model" --tp 2 --device cuda "${common[@]}" 2>"$tmp/err"; then exit 1; fi
# (CI has no GPU: the ranks' devices are missing, and the message says so.)
grep -qF "needs 2 CUDA devices, 0 visible" "$tmp/err"
if "$ssdq" eval-ppl --model "$model" --tp 0 "${common[@]}" 2>"$tmp/err"; then exit 1; fi
grep -qF "must be 1 to 1024, got 0" "$tmp/err"
echo "eval_ppl_cli_test: ok"
