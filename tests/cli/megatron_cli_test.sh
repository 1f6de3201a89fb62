#!/usr/bin/env bash
# Megatron-LM checkpoint folders run as published: `info` says what it read (layout, args,
# SentencePiece tokenizer); one rank and two tensor-parallel ranks of the same model give the
# same perplexity; calibrate and export run on it; a hybrid checkpoint is refused by name.
set -euo pipefail
ssdq=tools/ssdq
tmp=$TEST_TMPDIR
fixtures=tests/fixtures/megatron
data=examples/wikitext-2-raw/wiki.test.raw

info=$("$ssdq" info --model "$fixtures/tp2")
grep -q "layout     Megatron-LM (iter_0001000, 2 tensor-parallel shards)" <<<"$info"
grep -q "config     Megatron-LM args (argparse.Namespace)" <<<"$info"
grep -q "d_model 32 · layers 2 · d_inner 64 · heads 4 × headdim 16 · d_state 16 · ngroups 2" <<<"$info"
grep -q "tokenizer  sentencepiece · 400 ids (model vocabulary 400)" <<<"$info"
grep -q "$fixtures/tp2/tokenizer.model" <<<"$info"

ppl() { "$ssdq" eval-ppl --model "$1" --data "$data" --max-tokens 513 --ctx 128 --quiet | grep -o 'perplexity [0-9.]*'; }
one=$(ppl "$fixtures/tp1")
two=$(ppl "$fixtures/tp2")
[ -n "$one" ] && [ "$one" = "$two" ]

"$ssdq" calibrate --model "$fixtures/tp2" --data "$data" --samples 2 --seqlen 64 --out "$tmp/calib.safetensors" \
  --quiet >/dev/null
"$ssdq" export --model "$fixtures/tp2" --calib "$tmp/calib.safetensors" --recipe quamba2 --bits w8a8 \
  --out "$tmp/a.ssdq" --quiet >/dev/null
"$ssdq" eval-ppl --artifact "$tmp/a.ssdq" --data "$data" --max-tokens 257 --ctx 128 --quiet | grep -q perplexity

if err=$("$ssdq" info --model "$fixtures/hybrid" 2>&1); then echo "hybrid accepted"; exit 1; fi
grep -q "hybrid checkpoints with attention or MLP layers are not supported" <<<"$err"
echo "megatron_cli_test: ok"
