#!/bin/sh
# nvcc_private_tmp.sh NVCC ARGS...: runs the compiler NVCC on ARGS with a temporary directory of
# its own. nvcc names its temporary files after its process id, and Bazel's sandbox starts every
# action in a new PID namespace, so two nvcc processes running at once are both pid 2 and share
# names in /tmp: one deletes or overwrites the other's files ("cannot open module id file
# /tmp/tmpxft_00000002_…", or exit 255).
set -eu
nvcc=$1
shift
dir=$(mktemp -d "${TMPDIR:-/tmp}/ssdq-nvcc.XXXXXX")
trap 'rm -rf "$dir"' EXIT
TMPDIR=$dir "$nvcc" "$@"
