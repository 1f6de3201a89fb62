#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (--config=fuzz) and runs each for a fixed time on its
# committed corpus (fuzz/corpus/<target>, read only) plus a work folder for new inputs.
#
#   fuzz/run_fuzzers.sh [--seconds N] [TARGET...]     (default: 30 s each, every target)
#
# Targets run side by side, one per core ($SSDQ_FUZZ_JOBS overrides the count).
# Prints one line per target: "fuzz TARGET: PASSED|FAILED execs E cov C ft F corpus N", and last
# "fuzz: P passed, F failed". A target fails when its build fails, when libFuzzer reports a crash,
# leak, timeout or out-of-memory, or when it exits non-zero. Crash inputs are kept in the work
# folder ($SSDQ_FUZZ_WORK, default /tmp/ssdq-fuzz/<target>/); add a fixed one to the corpus as
# fuzz/corpus/<target>/regression-<what>. Exits non-zero when any target failed.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=30
jobs=${SSDQ_FUZZ_JOBS:-$(nproc)}
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  for folder in fuzz/corpus/*/; do targets+=("$(basename "$folder")"); done
fi

output_root=${SSDQ_FUZZ_OUTPUT_ROOT:-/tmp/ssdq-bazel-root-fuzz}
work=${SSDQ_FUZZ_WORK:-/tmp/ssdq-fuzz}
labels=()
for target in "${targets[@]}"; do labels+=("//fuzz:${target}_fuzzer"); done

passed=0
failed=0
if ! bazel --output_user_root="$output_root" build -c opt --config=fuzz "${labels[@]}"; then
  for target in "${targets[@]}"; do echo "fuzz $target: FAILED (build)"; done
  echo "fuzz: 0 passed, ${#targets[@]} failed"
  exit 1
fi
bin=$(bazel --output_user_root="$output_root" info -c opt --config=fuzz bazel-bin 2>/dev/null)/fuzz

# Runs one target and writes its verdict line to $work/$target.result (details to stdout).
run_target() {
  local target=$1 log="$work/$1.log" status execs progress cov ft corpus artifacts verdict
  mkdir -p "$work/$target"
  rm -f "$work/$target"-crash-* "$work/$target"-leak-* "$work/$target"-timeout-* "$work/$target"-oom-*
  # -timeout: one input may take at most 10 s; -rss_limit_mb: 2 GB, a reader must not need more.
  "$bin/${target}_fuzzer" "$work/$target" "fuzz/corpus/$target" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/$target-" >"$log" 2>&1
  status=$?
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)
  progress=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$progress")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$progress")
  corpus=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$progress")
  artifacts=$(ls "$work/$target"-* 2>/dev/null || true)
  if ((status == 0)) && [ -z "$artifacts" ]; then
    verdict=PASSED
  else
    verdict=FAILED
    grep -E 'ERROR|SUMMARY|runtime error|terminate|Test unit written' "$log" | head -8 | sed 's/^/  /'
  fi
  echo "fuzz $target: $verdict execs ${execs:-?} cov ${cov:-?} ft ${ft:-?} corpus ${corpus:-?} (exit $status, log $log)" \
    >"$work/$target.result"
}

# A fuzzer is one single-threaded process: as many run at once as there are cores, so CI's
# fuzz stage takes half its serial time on two (every target still gets its full $seconds).
mkdir -p "$work"
for target in "${targets[@]}"; do
  rm -f "$work/$target.result"
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  run_target "$target" &
done
wait
for target in "${targets[@]}"; do
  line=$(cat "$work/$target.result" 2>/dev/null || echo "fuzz $target: FAILED (no result)")
  echo "$line"
  if [[ "$line" == "fuzz $target: PASSED"* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
