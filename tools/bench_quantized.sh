#!/usr/bin/env bash
# The end-to-end tables of docs/BENCHMARKS.md (quantized vs FP16) for one synthetic config, on a
# GPU machine: TTFT at 1024 and 2048 tokens (batch 1), TPOT at batch 1, 32 and 128, the SSD
# module at B = 32, L = 2048, and the weights in device memory, for each spec: fp (our FP path,
# bf16), recipe:bits, recipe:bits:h2t (the quantized embedding and head too; TTFT at 2048 tokens
# and TPOT at batch 1 only), or recipe:bits:gN (int4 weights in groups of N columns).
#
#   tools/bench_quantized.sh SSDQ CONFIG OUTDIR [spec ...]     (default: fp ssdi8:w8a8 ssdi8:w4a8 rtn:w4a16)
#
# Each run's console output goes to OUTDIR/<name>.<part>.log and its figures to .json.
set -uo pipefail
[ $# -ge 3 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
ssdq=$1 config=$2 out=$3
shift 3
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(fp ssdi8:w8a8 ssdi8:w4a8 rtn:w4a16)
mkdir -p "$out"
run() {  # name part args...
  local name=$1 part=$2
  shift 2
  timeout 300 "$ssdq" bench --synthetic "$config" "$@" --json "$out/$name.$part.json" >"$out/$name.$part.log" 2>&1 ||
    echo "$name $part failed (see $out/$name.$part.log)" >&2
  grep -E '^(prompt [0-9]+ tokens$| *batch | +[0-9]+ )' "$out/$name.$part.log" | sed "s/^/$name $part | /"
}
for spec in "${specs[@]}"; do
  args=()
  IFS=: read -r recipe bits extra <<<"$spec"
  [ "$spec" != fp ] && args=(--recipe "$recipe" --bits "$bits")
  [ "${extra:-}" = h2t ] && args+=(--head-to-toe)
  [[ "${extra:-}" =~ ^g[0-9]+$ ]] && args+=(--group-size "${extra#g}")
  name=${spec//:/_}
  if [ "${extra:-}" != h2t ]; then  # TTFT at both lengths on one model build; TPOT at batch 1 from 2,048
    run "$name" ttft "${args[@]}" --batch 1 --prompt 1024,2048 --gen 64
    run "$name" tpot "${args[@]}" --batch 32,128 --prompt 64 --gen 32
  else
    run "$name" ttft "${args[@]}" --batch 1 --prompt 2048 --gen 64
  fi
  grep -h '^weights' "$out/$name.ttft.log" | sed "s/^/$name | /"
done
"$ssdq" bench --synthetic "$config" --module ssd --ssd-batches 32 --ssd-lengths 2048 --json "$out/ssd_fp.json" \
  >"$out/ssd_fp.log" 2>&1 && tail -2 "$out/ssd_fp.log" | sed 's/^/ssd fp | /'
"$ssdq" bench --synthetic "$config" --module ssd --recipe ssdi8 --ssd-batches 32 --ssd-lengths 2048 \
  --json "$out/ssd_ssdi8.json" >"$out/ssd_ssdi8.log" 2>&1 && tail -2 "$out/ssd_ssdi8.log" | sed 's/^/ssd ssdi8 | /'
