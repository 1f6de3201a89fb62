#!/usr/bin/env bash
# Reads a `bazel test` log and the GoogleTest XML reports of the targets it names, and prints
# "P passed, F failed" counted over test cases. A target that failed without a report (build
# failure, crash, timeout) counts as one failed case.
set -uo pipefail
log=$1
shift  # the rest: the --config flags the tests ran with, which decide where their reports are
testlogs=$(bazel info -c opt "$@" bazel-testlogs 2>/dev/null)
passed=0
failed=0
while read -r target verdict; do
  dir="$testlogs/${target#//}"
  dir="${dir/://}"
  cases=0
  failures=0
  # A sharded target (shard_count) has a report per shard: shard_I_of_N/test.xml.
  while read -r xml; do
    # "cases failed_cases" of one report: a case fails once however many of its assertions failed
    # (one <failure> element each); a passing case is one self-closing <testcase … />.
    read -r c f < <(awk '/<testcase /{n++; open = ($0 !~ /\/>[[:space:]]*$/); seen = 0}
      /<failure / && open && !seen {failed++; seen = 1} /<\/testcase>/{open = 0}
      END {print n + 0, failed + 0}' "$xml")
    cases=$((cases + c))
    failures=$((failures + f))
  done < <(if [ -f "$dir/test.xml" ]; then echo "$dir/test.xml"; else ls "$dir"/shard_*_of_*/test.xml 2>/dev/null; fi)
  if [ "$verdict" = PASSED ]; then
    passed=$((passed + (cases > 0 ? cases : 1)))
  else
    ((failures > 0)) || failures=1
    failed=$((failed + failures))
    passed=$((passed + (cases > failures ? cases - failures : 0)))
  fi
done < <(sed -nE 's#^(//[^ ]+)[[:space:]]+(\(([0-9]+/[0-9]+ )?cached\) )?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|FAILED TO BUILD|INCOMPLETE).*#\1 \4#p' "$log" | sed 's/NO STATUS/NO_STATUS/; s/FAILED TO BUILD/FAILED_TO_BUILD/')
echo "$passed passed, $failed failed"
