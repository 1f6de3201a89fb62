#!/usr/bin/env bash
# What CI runs (.ci/run). Stages, each counted in the last line:
#   1. build everything (CUDA kernels and GPU tests included) and run every CPU test; GPU tests
#      (tag "gpu") are built but not run here: tools/run_gpu_tests.sh runs them on a GPU machine;
#   2. the CPU tests again under AddressSanitizer (+ LeakSanitizer) and UndefinedBehaviorSanitizer
#      together (--config=sanitizers: one instrumented build; see SANITIZER_EXCLUDED below); the
#      CUDA objects are the first stage's (tools/bazel/cuda.bzl says why they can be);
#   3. every libFuzzer target for $SSDQ_FUZZ_SECONDS (default 30) s on its corpus
#      (fuzz/run_fuzzers.sh; a run passes when it found nothing).
# Ends with the line "P passed, F failed": GoogleTest cases of all test runs (from their XML
# reports) plus one per fuzz target. A stage that breaks (build failure, crash, timeout, no
# summary) counts as failed; it never just drops out of the count. Arguments go to stage 1's
# `bazel test`. SSDQ_CI_STAGES (default "tests sanitizers fuzz") picks stages.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh || exit 1

# All three stages took 34 min on a fresh clone with cold caches, 2 cores (2026-12-02: 18.5 + 10.5 +
# 4.5); CI's machine takes about twice as long (docs/FUZZING.md, "CI time").
# SSDQ_CI_STAGES=tests runs the first alone.
stages=${SSDQ_CI_STAGES:-tests sanitizers fuzz}
# What the sanitizer stage leaves to the first (docs/FUZZING.md, "Sanitizers" and "CI time"):
# - the whole-file perplexity test (the FP32 model over all of WikiText-2, the same code as
#   //tests/runtime:tiny_model_test's NLL case);
# - the command tests (//tests/cli): shell tests of the ssdq binary over the bundled model, a
#   third of the stage's test time and, with the binary's own sources and the CUDA backend's
#   host code (which nothing on a CPU machine runs), a sixth of its compiling; the library code
#   beneath them runs under the sanitizers in the C++ tests;
# - (a negative GoogleTest filter; other targets have no such suites) the two 16,384-token
#   perplexity cases of tiny_model_test and the accuracy sweep over every recipe of
#   recipes_test (Export.BundledModelStaysCloseToFp): evaluations at length whose code runs
#   under the sanitizers in the 512-token NLL case and in EveryRecipe; under them each took
#   more than its 300 s on CI's two cores.
SANITIZER_EXCLUDED=(-//tests/runtime:tiny_model_full_ppl_test -//tests/cli/...)
SANITIZER_TEST_FILTER=--test_filter=-TinyModelPerplexity.*:Export.BundledModelStaysCloseToFp

passed=0
failed=0
status=0

# Adds the "P passed, F failed" of a stage's last summary line; a stage without one is 1 failure.
count_stage() {
  local name=$1 summary=$2 p f
  if [[ "$summary" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    p=${BASH_REMATCH[1]}
    f=${BASH_REMATCH[2]}
  else
    p=0
    f=1
    echo "== $name: no result summary; counted as 1 failure" >&2
  fi
  echo "== $name: $p passed, $f failed ($(((SECONDS - stage_start) / 60)) min $(((SECONDS - stage_start) % 60)) s)"
  stage_start=$SECONDS
  passed=$((passed + p))
  failed=$((failed + f))
}

run_bazel_tests() {
  local name=$1
  shift
  local log code summary
  log=$(mktemp)
  bazel test -c opt "$@" 2>&1 | tee "$log"
  code=${PIPESTATUS[0]}
  local config_flags=()
  for flag in "$@"; do [[ "$flag" == --config=* ]] && config_flags+=("$flag"); done
  summary=$(tools/count_test_results.sh "$log" "${config_flags[@]}" | tail -1)
  rm -f "$log"
  # A failed `bazel test` whose failure no test case shows (e.g. a build error) still counts.
  if ((code != 0)) && [[ "$summary" =~ ^[0-9]+\ passed,\ 0\ failed$ ]]; then
    summary="${summary%%,*}, 1 failed"
  fi
  ((code == 0)) || status=1
  count_stage "$name" "$summary"
}

start=$SECONDS
stage_start=$SECONDS
if [[ " $stages " == *" tests "* ]]; then
  run_bazel_tests "CPU tests" --test_tag_filters=-gpu //... "$@"
fi
if [[ " $stages " == *" sanitizers "* ]]; then
  run_bazel_tests "CPU tests under asan+ubsan" --config=sanitizers --build_tests_only --test_tag_filters=-gpu \
    "$SANITIZER_TEST_FILTER" -- //... "${SANITIZER_EXCLUDED[@]}"
fi
if [[ " $stages " == *" fuzz "* ]]; then
  fuzz_log=$(mktemp)
  fuzz/run_fuzzers.sh --seconds "${SSDQ_FUZZ_SECONDS:-30}" 2>&1 | tee "$fuzz_log"
  ((PIPESTATUS[0] == 0)) || status=1
  count_stage "fuzzing" "$(sed -nE 's/^fuzz: ([0-9]+ passed, [0-9]+ failed)$/\1/p' "$fuzz_log" | tail -1)"
  rm -f "$fuzz_log"
  # The fuzz build has its own Bazel server (its own output root); do not leave it running.
  bazel --output_user_root="${SSDQ_FUZZ_OUTPUT_ROOT:-/tmp/ssdq-bazel-root-fuzz}" shutdown 2>/dev/null || true
fi
echo "== CI stages took $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s"
((failed == 0)) || status=1
echo "$passed passed, $failed failed"
exit "$status"
