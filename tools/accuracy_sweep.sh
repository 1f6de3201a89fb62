#!/usr/bin/env bash
# The measurements of docs/ACCURACY.md: export the bundled model with each recipe × bits from one
# calibration file and evaluate every artifact's WikiText-2 perplexity, several jobs at a time.
#
#   tools/accuracy_sweep.sh CALIB OUTDIR SPEC...     SPEC = recipe:bits (e.g. ssdi8:w4a8) or fp
#
# Environment: SSDQ (binary, default bazel-bin's), JOBS (parallel jobs, default 1), THREADS (per
# job, default 2), TOKENS (evaluated tokens, default 65536; 0 = whole file), EXPORT_FLAGS (extra
# export flags, for ablations; a SPEC may also carry them after a second colon: ssdi8:w8a8:--eta 0),
# EVAL_FLAGS (extra eval-ppl flags, e.g. --device cuda).
# Appends one tab-separated line per SPEC to OUTDIR/results.tsv:
#   spec  export-wall-s  export-cpu-s  artifact-bytes  perplexity  scored-tokens
# and keeps each step's log as OUTDIR/<name>.{export,eval}.log. Artifacts are deleted after use.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
calib=$1 out=$2
shift 2
ssdq=${SSDQ:-$(bazel info -c opt bazel-bin 2>/dev/null)/tools/ssdq}
root=$(cd "$(dirname "$0")/.." && pwd)
model=$root/examples/mamba2-tiny
data=$root/examples/wikitext-2-raw/wiki.test.raw
mkdir -p "$out"
export ssdq calib out model data
export THREADS=${THREADS:-2} TOKENS=${TOKENS:-65536} EXPORT_FLAGS=${EXPORT_FLAGS:-} EVAL_FLAGS=${EVAL_FLAGS:-}

one() {
  local spec=$1 recipe bits extra name
  IFS=: read -r recipe bits extra <<<"$spec"
  name=$(tr -c 'A-Za-z0-9_.\n-' '_' <<<"${spec//:/_}")
  local max=()
  [ "$TOKENS" != 0 ] && max=(--max-tokens "$TOKENS")
  if [ "$recipe" = fp ]; then
    # shellcheck disable=SC2086
    "$ssdq" eval-ppl --model "$model" --data "$data" "${max[@]}" --threads "$THREADS" $EVAL_FLAGS --quiet \
      >"$out/$name.eval.log" 2>&1 || { echo "$spec: eval failed, see $out/$name.eval.log" >&2; return 1; }
    printf '%s\t-\t-\t-\t%s\t%s\n' "$spec" "$(grep -o 'perplexity [0-9.]*' "$out/$name.eval.log" | cut -d' ' -f2)" \
      "$(grep -o '[0-9]* scored tokens' "$out/$name.eval.log" | cut -d' ' -f1)" >>"$out/results.tsv"
    return 0
  fi
  # shellcheck disable=SC2086
  /usr/bin/time -f '%e %U %S' -o "$out/$name.time" "$ssdq" export --model "$model" --calib "$calib" \
    --recipe "$recipe" --bits "$bits" $EXPORT_FLAGS $extra --threads "$THREADS" --quiet \
    --out "$out/$name.ssdq" >"$out/$name.export.log" 2>&1 ||
    { echo "$spec: export failed, see $out/$name.export.log" >&2; return 1; }
  # shellcheck disable=SC2086
  "$ssdq" eval-ppl --artifact "$out/$name.ssdq" --data "$data" "${max[@]}" --threads "$THREADS" $EVAL_FLAGS --quiet \
    >"$out/$name.eval.log" 2>&1 || { echo "$spec: eval failed, see $out/$name.eval.log" >&2; return 1; }
  local wall user sys
  read -r wall user sys <"$out/$name.time"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$spec" "$wall" "$(awk "BEGIN{print $user + $sys}")" "$(stat -c %s "$out/$name.ssdq")" \
    "$(grep -o 'perplexity [0-9.]*' "$out/$name.eval.log" | cut -d' ' -f2)" \
    "$(grep -o '[0-9]* scored tokens' "$out/$name.eval.log" | cut -d' ' -f1)" >>"$out/results.tsv"
  rm -f "$out/$name.ssdq"
}
export -f one
printf '%s\n' "$@" | xargs -P "${JOBS:-1}" -I{} bash -c 'one "$1"' _ {}
