#!/usr/bin/env bash
# Installs the Debian packages ssdq builds with; does nothing when they are already there.
# (The CUDA toolkit is expected at /usr/local/cuda; see README.md.)
set -euo pipefail

packages=(bazel-bootstrap bazel-rules-java libcli11-dev libfmt-dev libeigen3-dev nlohmann-json3-dev
          libzstd-dev libgtest-dev libgmock-dev googletest libcurl4-openssl-dev clang-14 libclang-rt-14-dev
          libsentencepiece-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "error: the CUDA toolkit was not found at /usr/local/cuda (nvcc is needed to build the CUDA kernels)" >&2
  exit 1
fi
