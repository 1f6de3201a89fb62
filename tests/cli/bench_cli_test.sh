#!/usr/bin/env bash
# `ssdq bench` on the CPU with the bundled model: several prompt lengths in one invocation give a
# table each under its own header and every (prompt, batch) row in the JSON; a bad length is
# refused before any timing, with no JSON written; --show-plan prints what each shape runs;
# --verify times verify windows against a step (a row each in the table and the JSON; --as-generate
# as greedy generate runs them; --replay-apart only with it); a
# numeric flag out of range names its range in words; --help shows the defaults (integers
# formatted through iostreams: empty when the binary's static libstdc++ and libsentencepiece's
# shared one were mixed, third_party/system.BUILD).
set -euo pipefail
ssdq=tools/ssdq
model=examples/mamba2-tiny
json=$TEST_TMPDIR/bench.json

"$ssdq" bench --help | grep -q -- "--gen INT:INT >= 1=128 "

out=$("$ssdq" bench --device cpu --model "$model" --batch 1,2 --prompt 8,16 --gen 2 --repeats 1 --json "$json")
echo "$out"
grep -qx "prompt 8 tokens" <<<"$out"
grep -qx "prompt 16 tokens" <<<"$out"
[ "$(grep -c '^ *batch' <<<"$out")" -eq 2 ]
[ "$(grep -c '"prompt": 8,' "$json")" -eq 2 ]
[ "$(grep -c '"prompt": 16,' "$json")" -eq 2 ]

# One length: the table as before, without a prompt header.
out=$("$ssdq" bench --device cpu --model "$model" --prompt 8 --gen 2 --repeats 1)
! grep -q "^prompt " <<<"$out"
[ "$(grep -c '^ *batch' <<<"$out")" -eq 1 ]

rm -f "$json"
if "$ssdq" bench --device cpu --model "$model" --prompt 8,0 --gen 2 --json "$json" 2>"$TEST_TMPDIR/err"; then exit 1; fi
grep -qF "bench: --prompt 0: every prompt length must be at least 1" "$TEST_TMPDIR/err"
[ ! -e "$json" ]

out=$("$ssdq" bench --device cpu --model "$model" --batch 2 --prompt 8 --gen 2 --repeats 1 --show-plan)
grep -q "^plan for batch 2 x 8 tokens, CPU specification" <<<"$out"
grep -q "^plan for batch 2 x 1 token, CPU specification" <<<"$out"
grep -q "ssd_step (the recurrence)" <<<"$out"

# --verify: a row per (batch, drafts, window) in the table and the JSON; on the CPU token by token.
out=$("$ssdq" bench --device cpu --model "$model" --batch 1,2 --prompt 8 --gen 2 --repeats 1 --verify 2,3 --json "$json")
grep -q "^verify windows (token by token on this backend" <<<"$out"
[ "$(grep -cE '^ +[12] +1 +[23] +[0-9.]+ +[0-9.]+ ' <<<"$out")" -eq 4 ]
[ "$(grep -c '"verify_replay_ms"' "$json")" -eq 4 ]
out=$("$ssdq" bench --device cpu --model "$model" --prompt 8 --gen 3 --repeats 1 --verify 4 --accept 1)
grep -qE '^ +1 +1 +4 .* 4\.00 +[0-9.]+ +[0-9.]+×$' <<<"$out"  # every draft accepted: 4 tokens a window
# --drafts: each count of rows a sequence timed, every row taking the kept row's tokens.
out=$("$ssdq" bench --device cpu --model "$model" --prompt 8 --gen 2 --repeats 1 --verify 3 --drafts 1,2 --accept 1 \
  --json "$json")
grep -qE '^ +1 +2 +3 .* 3\.00 +[0-9.]+ +[0-9.]+×$' <<<"$out"
[ "$(grep -c '"drafts": 2' "$json")" -eq 1 ]
if "$ssdq" bench --device cpu --model "$model" --drafts 2 2>"$TEST_TMPDIR/err"; then exit 1; fi
grep -qF -- "--drafts sets the rows a sequence" "$TEST_TMPDIR/err"
if "$ssdq" bench --device cpu --model "$model" --accept 0.5 2>"$TEST_TMPDIR/err"; then exit 1; fi
grep -qF -- "--accept simulates speculation" "$TEST_TMPDIR/err"
# --as-generate: the windows as greedy generate verifies them (each position's argmax alone).
out=$("$ssdq" bench --device cpu --model "$model" --prompt 8 --gen 2 --repeats 1 --verify 3 --as-generate)
grep -q "^verify windows as greedy generate runs them" <<<"$out"
grep -qE '^ +1 +1 +3 +[0-9.]+ +[0-9.]+ ' <<<"$out"
if "$ssdq" bench --device cpu --model "$model" --as-generate 2>"$TEST_TMPDIR/err"; then exit 1; fi
grep -qF -- "--as-generate times the verify windows" "$TEST_TMPDIR/err"
if "$ssdq" bench --device cpu --model "$model" --replay-apart 2>"$TEST_TMPDIR/err"; then exit 1; fi
grep -qF -- "--replay-apart changes how verify windows replay" "$TEST_TMPDIR/err"
if "$ssdq" bench --device cpu --model "$model" --verify 0 2>"$TEST_TMPDIR/err"; then exit 1; fi
grep -qF -- "--verify" "$TEST_TMPDIR/err"

if "$ssdq" bench --device cpu --model "$model" --batch 0 2>"$TEST_TMPDIR/err"; then exit 1; fi
grep -qF "must be 1 or more, got 0" "$TEST_TMPDIR/err"
if "$ssdq" eval-ppl --model "$model" --data /dev/null --ctx 0 2>"$TEST_TMPDIR/err"; then exit 1; fi
grep -qF "must be 1 or more, got 0" "$TEST_TMPDIR/err"
echo "bench_cli_test: ok"
