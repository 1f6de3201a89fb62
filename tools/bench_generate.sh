#!/usr/bin/env bash
# Plain against speculative generation, one prompt at a time, over the prompt sets of
# examples/prompts (docs/GENERATION.md): tokens/s and TPOT of each, the speculative run's windows
# and accepted / drafted tokens, and whether both wrote the same text.
#
#   tools/bench_generate.sh SSDQ OUTDIR [generate flags ...]   (e.g. --model examples/mamba2-tiny --device cuda)
#
# SPECULATE (default "--speculate ngram --draft 6") holds the speculative run's own flags, e.g.
# SPECULATE="--speculate ngram --draft 6 --drafts 2". The plain run of a prompt comes first, or,
# with ALTERNATE=1, second for every even prompt, so that what the order alone does (the second run
# of a prompt tends to be faster) cancels in the means; SPECULATE="--speculate off" (plain against
# plain) measures it. The last lines give each set's speed relative to plain decoding (plain TPOT /
# speculative TPOT).
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
ssdq=$1 out=$2
shift 2
mkdir -p "$out"
for set in tldr wikitext humaneval; do
  n=$(wc -l <"examples/prompts/$set.jsonl")
  for ((i = 1; i <= n; i++)); do
    sed -n "${i}p" "examples/prompts/$set.jsonl" >"$out/$set.$i.jsonl"
    modes="plain spec"
    [ "${ALTERNATE:-0}" = 1 ] && ((i % 2 == 0)) && modes="spec plain"
    for mode in $modes; do
      extra=(); [ $mode = spec ] && read -r -a extra <<<"${SPECULATE:---speculate ngram --draft 6}"
      "$ssdq" generate "$@" --prompt-file "$out/$set.$i.jsonl" --max-new-tokens 128 "${extra[@]}" \
        --json "$out/$set.$i.$mode.json" >"$out/$set.$i.$mode.txt" 2>"$out/$set.$i.$mode.err" ||
        { echo "$set $i $mode failed (see $out/$set.$i.$mode.err)"; continue; }
    done
    python3 - "$out/$set.$i" "$set $i" <<'PY'
import json, sys
base, name = sys.argv[1], sys.argv[2]
def one(mode):
    r = json.load(open(f"{base}.{mode}.json"))
    return r["results"][0] if "results" in r else r
p, s = one("plain"), one("spec")
sp = s.get("speculation", {})
same = open(f"{base}.plain.txt").read() == open(f"{base}.spec.txt").read()
print(f"{name:14} plain {p['tokens_per_second']:7.1f} tok/s TPOT {p['tpot_ms']:.3f} | spec {s['tokens_per_second']:7.1f} tok/s "
      f"TPOT {s['tpot_ms']:.3f} windows {sp.get('windows')} accepted {sp.get('accepted')} / {sp.get('drafted')} | "
      f"{'same text' if same else 'TEXT DIFFERS'}")
PY
  done
done
# Per set: speed relative to plain decoding (plain TPOT / speculative TPOT), mean and range, and how
# many prompts wrote plain decoding's text.
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
def one(path):
    r = json.load(open(path))
    return r["results"][0] if "results" in r else r
for name in ("tldr", "wikitext", "humaneval"):
    ratios, same = [], 0
    for plain in sorted(glob.glob(f"{out}/{name}.*.plain.json")):
        spec = plain.replace(".plain.json", ".spec.json")
        if not os.path.exists(spec):
            continue
        p, s = one(plain), one(spec)
        if s["tpot_ms"] > 0:
            ratios.append(p["tpot_ms"] / s["tpot_ms"])
        same += open(plain[:-5] + ".txt").read() == open(spec[:-5] + ".txt").read()
    if ratios:
        print(f"{name:10} speed vs plain: mean {sum(ratios) / len(ratios):.2f}, {min(ratios):.2f}-{max(ratios):.2f} "
              f"over {len(ratios)} prompts; {same} of {len(ratios)} wrote plain decoding's text")
PY
