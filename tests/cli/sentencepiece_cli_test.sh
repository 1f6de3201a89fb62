#!/usr/bin/env bash
# A model folder with a SentencePiece tokenizer.model (beside a tokenizer.json it is preferred
# over) runs every command with it: eval-ppl tokenizes the data with it (the same count as
# --tokenizer naming the file), calibrate and export use it, the artifact embeds it and eval-ppl
# --artifact and generate use the embedded copy.
set -euo pipefail
ssdq=tools/ssdq
tmp=$TEST_TMPDIR
spm=tests/fixtures/sentencepiece/tiny_bpe.model
data=examples/wikitext-2-raw/wiki.test.raw
model=$tmp/model
mkdir -p "$model"
cp examples/mamba2-tiny/config.json examples/mamba2-tiny/tokenizer.json "$model/"
ln -s "$PWD/examples/mamba2-tiny/pytorch_model.bin" "$model/pytorch_model.bin"
cp "$spm" "$model/tokenizer.model"

count() { grep -o "$data: [0-9]* tokens" | grep -o '[0-9]* tokens'; }
folder=$("$ssdq" eval-ppl --model "$model" --data "$data" --max-tokens 257 --ctx 128 --quiet)
grep -q "tokenizer $model/tokenizer.model: sentencepiece, 400 ids" <<<"$folder"
named=$("$ssdq" eval-ppl --model examples/mamba2-tiny --tokenizer "$spm" --data "$data" --max-tokens 257 --ctx 128 --quiet)
[ "$(count <<<"$folder")" = "$(count <<<"$named")" ]
gpt=$("$ssdq" eval-ppl --model examples/mamba2-tiny --data "$data" --max-tokens 257 --ctx 128 --quiet)
[ "$(count <<<"$folder")" != "$(count <<<"$gpt")" ]  # a different tokenizer, a different count

"$ssdq" calibrate --model "$model" --data "$data" --samples 2 --seqlen 64 --out "$tmp/calib.safetensors" --quiet >/dev/null
"$ssdq" export --model "$model" --calib "$tmp/calib.safetensors" --recipe rtn --bits w8a8 --out "$tmp/a.ssdq" \
  --quiet >/dev/null
art=$("$ssdq" eval-ppl --artifact "$tmp/a.ssdq" --data "$data" --max-tokens 257 --ctx 128 --quiet)
grep -q "tokenizer $tmp/a.ssdq (embedded): sentencepiece, 400 ids" <<<"$art"
[ "$(count <<<"$folder")" = "$(count <<<"$art")" ]
text=$("$ssdq" generate --artifact "$tmp/a.ssdq" --prompt "The history of" --max-new-tokens 4 2>/dev/null)
[ -n "$text" ]
echo "sentencepiece_cli_test: ok"
