#!/usr/bin/env bash
# Line coverage of the readers reached by each fuzz target's corpus: replays the committed corpus
# (plus the fuzzing work folder, $SSDQ_FUZZ_WORK/<target>, when it exists) through the target's
# corpus-replay binary built with clang's source-based coverage (--config=fuzzcov), then prints
# llvm-cov's per-file table of the project sources the target reaches (file names relative to
# their common folder).
#
#   fuzz/coverage.sh [TARGET...]     (default: every target)
set -uo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
if ((${#targets[@]} == 0)); then
  for folder in fuzz/corpus/*/; do targets+=("$(basename "$folder")"); done
fi
output_root=${SSDQ_FUZZ_OUTPUT_ROOT:-/tmp/ssdq-bazel-root-fuzz}
work=${SSDQ_FUZZ_WORK:-/tmp/ssdq-fuzz}
labels=()
for target in "${targets[@]}"; do labels+=("//fuzz:${target}_corpus_test"); done
bazel --output_user_root="$output_root" build -c opt --config=fuzzcov "${labels[@]}" || exit 1
bin=$(bazel --output_user_root="$output_root" info -c opt --config=fuzzcov bazel-bin 2>/dev/null)/fuzz
profiles=$(mktemp -d)
for target in "${targets[@]}"; do
  inputs=("fuzz/corpus/$target")
  [ -d "$work/$target" ] && inputs+=("$work/$target")
  LLVM_PROFILE_FILE="$profiles/$target.profraw" "$bin/${target}_corpus_test" "${inputs[@]}" >/dev/null 2>&1 ||
    echo "warning: $target replay exited non-zero" >&2
  llvm-profdata-14 merge -sparse "$profiles/$target.profraw" -o "$profiles/$target.profdata"
  echo "== $target ($(find "${inputs[@]}" -type f | wc -l) inputs)"
  llvm-cov-14 report "$bin/${target}_corpus_test" -instr-profile="$profiles/$target.profdata" \
    -ignore-filename-regex='(external/|fuzz/|/usr/)' 2>/dev/null |
    grep -v '^---'
done
rm -rf "$profiles"
