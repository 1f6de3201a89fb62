#!/usr/bin/env bash
# The measurements of docs/ACCURACY.md: export the bundled model with each recipe × bits (and
# option variants) from one calibration file, then compare every artifact with the FP model on
# each evaluation file (eval-ppl --reference: perplexity ± error, KL divergence, top-1 agreement).
#
#   tools/accuracy_sweep.sh CALIB OUTDIR SPEC...
#     SPEC = recipe:bits[:extra export flags], e.g. ssdi8:w4a8 or "quamba2:w8a8:--act-clip mse"
#
# Exports run JOBS at a time with THREADS threads each (CPU); evaluations then run one at a time
# (one GPU, or the CPU). Environment: SSDQ (binary, default bazel-bin's), JOBS (default 1),
# THREADS (default 2), DATA (evaluation files, space-separated; default WikiText-2 test), TOKENS
# (evaluated tokens per file, 0 = whole file; default 0), EVAL_FLAGS (e.g. --device cuda),
# EXPORT_FLAGS (for every SPEC), CALIB_SAMPLES (export --calib-samples; default all),
# KEEP (1: keep the artifacts).
# Writes OUTDIR/<name>.<data>.json per evaluation and appends to OUTDIR/results.tsv:
#   spec data ppl ppl-err ref-ppl dlnppl dlnppl-err kl kl-err kl-p99 kl-p999 top1 top1-err export-wall-s export-cpu-s bytes
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
calib=$1 out=$2
shift 2
ssdq=${SSDQ:-$(bazel info -c opt bazel-bin 2>/dev/null)/tools/ssdq}
root=$(cd "$(dirname "$0")/.." && pwd)
model=$root/examples/mamba2-tiny
mkdir -p "$out"
export ssdq calib out model
export THREADS=${THREADS:-2} EXPORT_FLAGS=${EXPORT_FLAGS:-} CALIB_SAMPLES=${CALIB_SAMPLES:-0}
read -r -a data_files <<<"${DATA:-$root/examples/wikitext-2-raw/wiki.test.raw}"
tokens=${TOKENS:-0}
EVAL_FLAGS=${EVAL_FLAGS:-}

name_of() { tr -c 'A-Za-z0-9_.\n-' '_' <<<"${1//:/_}"; }
export_one() {
  local spec=$1 recipe bits extra name
  IFS=: read -r recipe bits extra <<<"$spec"
  name=$(name_of "$spec")
  # shellcheck disable=SC2086
  /usr/bin/time -f '%e %U %S' -o "$out/$name.time" "$ssdq" export --model "$model" --calib "$calib" \
    --recipe "$recipe" --bits "$bits" --calib-samples "$CALIB_SAMPLES" $EXPORT_FLAGS $extra --threads "$THREADS" \
    --quiet --out "$out/$name.ssdq" >"$out/$name.export.log" 2>&1 ||
    { echo "$spec: export failed, see $out/$name.export.log" >&2; return 1; }
}
export -f name_of export_one
printf '%s\n' "$@" | xargs -P "${JOBS:-1}" -I{} bash -c 'export_one "$1"' _ {} || true

for spec in "$@"; do
  name=$(name_of "$spec")
  [ -f "$out/$name.ssdq" ] || continue
  read -r wall user sys <"$out/$name.time"
  for data in "${data_files[@]}"; do
    dname=$(basename "$data" | cut -d. -f1)
    # shellcheck disable=SC2086
    "$ssdq" eval-ppl --artifact "$out/$name.ssdq" --reference "$model" --data "$data" --max-tokens "$tokens" \
      $EVAL_FLAGS --quiet --json "$out/$name.$dname.json" >"$out/$name.$dname.log" 2>&1 ||
      { echo "$spec on $dname: eval failed, see $out/$name.$dname.log" >&2; continue; }
    python3 - "$out/$name.$dname.json" "$spec" "$dname" "$wall" "$(awk "BEGIN{print $user + $sys}")" \
      "$(stat -c %s "$out/$name.ssdq")" >>"$out/results.tsv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
row = [sys.argv[2], sys.argv[3], r["perplexity"]["mean"], r["perplexity"]["error"], r["reference_perplexity"]["mean"],
       r["log_ppl_ratio"]["mean"], r["log_ppl_ratio"]["error"], r["kl_divergence"]["mean"], r["kl_divergence"]["error"],
       r["kl_divergence"]["p99"], r["kl_divergence"]["p999"], r["top1_agreement"]["mean"], r["top1_agreement"]["error"],
       sys.argv[4], sys.argv[5], sys.argv[6]]
print("\t".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in row))
PY
  done
  [ "${KEEP:-0}" = 1 ] || rm -f "$out/$name.ssdq"
done
