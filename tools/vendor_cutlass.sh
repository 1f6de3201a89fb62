#!/usr/bin/env bash
# Packs into third_party/cutlass/cutlass-$VERSION-include-subset.tar.gz the CUTLASS headers that
# ssdq's CUTLASS kernels include (~485 of its ~800), from the PyPI wheel nvidia-cutlass. A
# maintainer's tool, run when a kernel starts including more of CUTLASS or to move to a newer
# release; builds and tests never download anything.
# Usage: tools/vendor_cutlass.sh [WHEEL]   (without WHEEL: pip download nvidia-cutlass==$VERSION)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.2.0.0
sources=(kernels/gemm_s8_scaled_sm90.cu kernels/gemm_w4a16_sm90.cu)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheel=${1:-}
if [ -z "$wheel" ]; then
  pip download --no-deps --quiet -d "$work" "nvidia-cutlass==$VERSION"
  wheel=$(ls "$work"/nvidia_cutlass-*.whl)
fi
unzip -q "$wheel" -d "$work/wheel"
inc="$work/wheel/cutlass_library/source/include"
for src in "${sources[@]}"; do
  nvcc -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I. -isystem "$inc" -M "$src" -o "$work/deps.d"
  tr ' \\' '\n\n' < "$work/deps.d" | grep "^$inc/" >> "$work/headers.txt"
done
sort -u "$work/headers.txt" | sed "s#^$inc/##" > "$work/relative.txt"
archive=third_party/cutlass/cutlass-${VERSION%.*}-include-subset.tar.gz
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=2025-01-01 -C "$inc" -czf "$archive.tmp" -T "$work/relative.txt"
mv "$archive.tmp" "$archive"
cp "$work"/wheel/nvidia_cutlass-*.dist-info/licenses/LICENSE.txt third_party/cutlass/LICENSE.txt
echo "$(wc -l < "$work/relative.txt") headers from $(basename "$wheel") → $archive"
