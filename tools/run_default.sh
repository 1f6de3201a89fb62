#!/usr/bin/env bash
# The main job on the bundled default: perplexity of examples/mamba2-tiny on WikiText-2.
# Extra arguments go to `ssdq eval-ppl` (e.g. --max-tokens 16384).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
bazel build -c opt //tools:ssdq
"$(bazel info -c opt bazel-bin 2>/dev/null)"/tools/ssdq eval-ppl --model examples/mamba2-tiny --data examples/wikitext-2-raw/wiki.test.raw --ctx 2048 "$@"
