#!/usr/bin/env bash
# `ssdq generate` on the CPU with the bundled model: greedy text streams to stdout and equals the
# speculative run's (--verify exact or window, --drafts 3, --spec-method joint); a .jsonl prompt file runs as one batch with a JSON report per prompt; bad
# sampling values, an empty prompt, an empty prompt file and an unknown device are refused.
set -euo pipefail
ssdq=tools/ssdq
model=examples/mamba2-tiny
tmp=$TEST_TMPDIR

plain=$("$ssdq" generate --model "$model" --prompt "The city of London" --max-new-tokens 24 --json "$tmp/plain.json" 2>"$tmp/err")
grep -q "prompt 0: 24 tokens (length)" "$tmp/err"
[ -n "$plain" ]
spec=$("$ssdq" generate --model "$model" --prompt "The city of London" --max-new-tokens 24 --speculate ngram --draft 4 \
  --json "$tmp/spec.json" 2>"$tmp/err")
[ "$plain" = "$spec" ]
grep -q '"windows"' "$tmp/spec.json"
# --verify window: the CPU has no window, so it verifies token by token, the same text.
window=$("$ssdq" generate --model "$model" --prompt "The city of London" --max-new-tokens 24 --speculate ngram \
  --verify window 2>/dev/null)
[ "$plain" = "$window" ]
# --drafts 3: three lookup drafts a window, side by side; the same text.
drafts=$("$ssdq" generate --model "$model" --prompt "The city of London" --max-new-tokens 24 --speculate ngram \
  --drafts 3 2>/dev/null)
[ "$plain" = "$drafts" ]
# --spec-method joint: the kept tokens recomputed beside the next window; the same text, with 2 drafts too.
joint=$("$ssdq" generate --model "$model" --prompt "The city of London" --max-new-tokens 24 --speculate ngram \
  --spec-method joint --drafts 2 2>/dev/null)
[ "$plain" = "$joint" ]
if "$ssdq" generate --model "$model" --prompt "x" --speculate ngram --spec-method joint --verify window 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--spec-method joint" "$tmp/err"
if "$ssdq" generate --model "$model" --prompt "x" --spec-method joint 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--spec-method joint is for --speculate" "$tmp/err"
if "$ssdq" generate --model "$model" --prompt "x" --speculate ngram --drafts 17 2>"$tmp/err"; then exit 1; fi
grep -q -- "--drafts" "$tmp/err"
if "$ssdq" generate --model "$model" --prompt "x" --drafts 2 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--drafts 2 is for --speculate ngram" "$tmp/err"
if "$ssdq" generate --model "$model" --prompt "x" --speculate ngram --verify fast 2>"$tmp/err"; then exit 1; fi
grep -q -- "--verify" "$tmp/err"
# --speculate model: the model drafting for itself, and its W8A8 artifact drafting: the same text.
self=$("$ssdq" generate --model "$model" --prompt "The city of London" --max-new-tokens 24 --speculate model \
  --draft-model "$model" --json "$tmp/self.json" 2>/dev/null)
[ "$plain" = "$self" ]
python3 - "$tmp/self.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]["speculation"]
assert r["windows"] > 0 and r["accepted"] == r["drafted"], r
PY
"$ssdq" calibrate --model "$model" --data examples/wikitext-2-raw/wiki.test.raw --samples 2 --seqlen 64 \
  --out "$tmp/c.safetensors" --quiet >/dev/null
"$ssdq" export --model "$model" --calib "$tmp/c.safetensors" --recipe rtn --bits w8a8 --out "$tmp/w8a8.ssdq" --quiet >/dev/null
drafted=$("$ssdq" generate --model "$model" --prompt "The city of London" --max-new-tokens 24 --speculate model \
  --draft-artifact "$tmp/w8a8.ssdq" 2>/dev/null)
[ "$plain" = "$drafted" ]
if "$ssdq" generate --model "$model" --prompt "x" --speculate model 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--speculate model needs --draft-model DIR or --draft-artifact FILE" "$tmp/err"
if "$ssdq" generate --model "$model" --prompt "x" --draft-model "$model" 2>"$tmp/err"; then exit 1; fi
grep -qF -- "--draft-model and --draft-artifact are for --speculate model" "$tmp/err"

printf '{"prompt": "Once upon a time"}\n\n{"text": "The history of"}\n' >"$tmp/prompts.jsonl"
out=$("$ssdq" generate --model "$model" --prompt-file "$tmp/prompts.jsonl" --max-new-tokens 8 --temperature 0.8 \
  --top-k 40 --top-p 0.95 --seed 3 --json "$tmp/batch.json" 2>/dev/null)
grep -qx -- "--- prompt 0" <<<"$out"
grep -qx -- "--- prompt 1" <<<"$out"
[ "$(grep -c '"finish_reason"' "$tmp/batch.json")" -eq 2 ]
again=$("$ssdq" generate --model "$model" --prompt-file "$tmp/prompts.jsonl" --max-new-tokens 8 --temperature 0.8 \
  --top-k 40 --top-p 0.95 --seed 3 2>/dev/null)
[ "$out" = "$again" ]

refused() {  # expected error text, then the arguments
  local expected=$1
  shift
  if "$ssdq" generate --model "$model" "$@" >/dev/null 2>"$tmp/err"; then echo "accepted: $*"; exit 1; fi
  grep -qF -- "$expected" "$tmp/err" || { cat "$tmp/err"; exit 1; }
}
refused "--temperature must be 0 (greedy) or more" --prompt x --temperature -1
refused "--top-p must be above 0 and at most 1" --prompt x --top-p 0
refused "must be 1 or more, got 0" --prompt x --max-new-tokens 0
refused "--prompt: the prompt is empty" --prompt ""
: >"$tmp/empty.txt"
refused "the prompt is empty" --prompt-file "$tmp/empty.txt"
: >"$tmp/empty.jsonl"
refused "no prompts in the file" --prompt-file "$tmp/empty.jsonl"
refused "--device tpu: expected cpu, cuda or cuda:N" --prompt x --device tpu
echo "generate_cli_test: ok"
