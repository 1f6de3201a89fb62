#!/usr/bin/env bash
# What one call on a GPU machine runs (from the repository root, with .carry/gpu-bin.tar.xz made
# by tools/package_gpu_run.sh): GPU tests, the kernel benchmark, eval-ppl on the GPU and the
# benchmarks of docs/BENCHMARKS.md. Logs go to $OUT (or /tmp/gpu-out). Steps: tests, kernels,
# eval, bench, ssd (default: all); also bench8b, stages, profile, and for speculative decoding
# (docs/GENERATION.md) verify (windows against steps as greedy generate runs them) and generate
# (the prompt sets, plain against speculative, in alternating order), drafts (windows of 1, 2 and 4
# drafts a sequence, replayed inside the next window and apart) and generate-drafts (--drafts 2).
set -uo pipefail
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
steps=${*:-tests kernels eval bench ssd}
rm -rf /tmp/gpu-bin && tar -xJf .carry/gpu-bin.tar.xz -C /tmp
bin=/tmp/gpu-bin
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # libsentencepiece travels beside ssdq
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/device.txt"
for step in $steps; do
  echo "=== $step"
  case $step in
    tests) timeout 200 tools/run_gpu_tests.sh "$bin" > "$out/gpu-tests.log" 2>&1
           grep -E "^\[  (FAILED|PASSED) |passed|failed|Failure|error|max " "$out/gpu-tests.log" | grep -v "rel err" ;;
    kernels) timeout 60 "$bin/kernels_bench" 2>&1 | tee "$out/kernels-bench.log" ;;
    eval) timeout 120 "$bin/ssdq" eval-ppl --device cuda --quiet --model examples/mamba2-tiny \
            --data examples/wikitext-2-raw/wiki.test.raw --ctx 2048 2>&1 | tee "$out/eval-cuda.log" ;;
    bench) timeout 180 "$bin/ssdq" bench --synthetic mamba2-2.7b --batch 1,8,32,128 --prompt 2048 --gen 64 \
             --json "$out/bench-2.7b.json" 2>&1 | tee "$out/bench-2.7b.log" ;;
    bench8b) timeout 400 "$bin/ssdq" bench --synthetic mamba2-8b-like --batch 1,32 --prompt 2048 --gen 32 \
               --json "$out/bench-8b.json" 2>&1 | tee "$out/bench-8b.log" ;;
    ssd) timeout 90 "$bin/ssdq" bench --module ssd --synthetic mamba2-2.7b --json "$out/ssd-2.7b.json" 2>&1 |
           tee "$out/ssd-2.7b.log" ;;
    verify) for model in "--model examples/mamba2-tiny" "--synthetic mamba2-2.7b" "--synthetic mamba2-8b-like"; do
              timeout 200 "$bin/ssdq" bench $model --device cuda --batch 1,2,4 --prompt 16 --gen 40 --repeats 1 \
                --verify 2,3,4,5,7,8 --accept 0.73 --as-generate 2>&1 | tee -a "$out/verify.log"
            done ;;
    drafts) # as generate runs them (rows_alone: exact windows up to 16 rows), fused and apart; then one
            # multi-token call whatever the rows (cuBLASLt), the FP models and W4A8
            for run in "--synthetic mamba2-2.7b --as-generate" "--synthetic mamba2-2.7b --as-generate --replay-apart" \
                       "--synthetic mamba2-8b-like --as-generate" "--synthetic mamba2-2.7b" "--synthetic mamba2-2.7b --replay-apart" \
                       "--synthetic mamba2-8b-like" "--synthetic mamba2-2.7b --recipe ssdi8 --bits w4a8"; do
              [ -n "${DRAFT_RUNS:-}" ] && [[ "$run" != *${DRAFT_RUNS}* ]] && continue
              echo "--- $run" | tee -a "$out/drafts.log"
              timeout 150 "$bin/ssdq" bench $run --device cuda --batch 1,2,4 --prompt 16 --gen 30 --repeats 1 \
                --verify 2,4,7 --drafts 1,2,4 --accept 0.73 2>&1 | tee -a "$out/drafts.log"
            done ;;
    generate-drafts) ALTERNATE=1 SPECULATE="--speculate ngram --draft 6 --drafts 2" timeout 400 tools/bench_generate.sh \
                       "$bin/ssdq" /tmp/generate-drafts --model examples/mamba2-tiny --device cuda 2>&1 |
                       tee "$out/generate-drafts.log" | tail -4 ;;
    generate) ALTERNATE=1 timeout 400 tools/bench_generate.sh "$bin/ssdq" /tmp/generate-runs --model examples/mamba2-tiny \
                --device cuda 2>&1 | tee "$out/generate.log" | tail -4 ;;
    stages) timeout 120 "$bin/ssd_stage_bench" 2>&1 | tee "$out/ssd-stages.log" | tail -60 ;;
    profile) nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || true)
             if [ -z "$nsys" ]; then echo "no nsys on this machine"; continue; fi
             timeout 200 "$nsys" profile -o /tmp/decode --force-overwrite true --cuda-graph-trace=node \
               "$bin/ssdq" bench --synthetic mamba2-2.7b --batch 1 --prompt 512 --gen 64 --repeats 1 >/dev/null 2>&1
             timeout 100 "$nsys" stats --report cuda_gpu_kern_sum --format csv /tmp/decode.nsys-rep 2>/dev/null |
               tee "$out/decode-kernels.csv" | cut -c1-220 | head -30 ;;
  esac
done
