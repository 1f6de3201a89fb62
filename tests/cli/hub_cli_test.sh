#!/usr/bin/env bash
# Issue 5's acceptance: `HF_HUB_OFFLINE=1 ssdq info --model state-spaces/mamba2-130m` works from a
# pre-filled Hugging Face cache without network, and with an empty cache fails saying what is
# missing. The cache entry holds tests/fixtures/hub/mamba2-tiny-random under the 130m name (the
# real weights are 500 MB); it is laid out as huggingface_hub lays it out: refs/main, blobs named
# by ETag (git blob SHA-1 for config.json, SHA-256 for the LFS weights), snapshot symlinks.
set -euo pipefail
ssdq=tools/ssdq
fixture=tests/fixtures/hub/mamba2-tiny-random
cache="$TEST_TMPDIR/hub"
repo="$cache/models--state-spaces--mamba2-130m"
commit=f00dfeedf00dfeedf00dfeedf00dfeedf00dfeed
unset HF_HOME HF_TOKEN HF_TOKEN_PATH XDG_CACHE_HOME
export HF_ENDPOINT=http://127.0.0.1:9  # discard port: any request would fail

mkdir -p "$repo/refs" "$repo/blobs" "$repo/snapshots/$commit"
printf %s "$commit" >"$repo/refs/main"
for file in config.json model.safetensors; do
  if [ "$file" = model.safetensors ]; then
    etag=$(sha256sum <"$fixture/$file" | cut -d' ' -f1)
  else
    etag=$({ printf 'blob %d\0' "$(stat -L -c %s "$fixture/$file")"; cat "$fixture/$file"; } | sha1sum | cut -d' ' -f1)
  fi
  cp -L "$fixture/$file" "$repo/blobs/$etag"
  ln -s "../../blobs/$etag" "$repo/snapshots/$commit/$file"
done

out=$(HF_HUB_OFFLINE=1 HF_HUB_CACHE="$cache" "$ssdq" info --model state-spaces/mamba2-130m)
echo "$out"
grep -q "^model      $repo/snapshots/$commit\$" <<<"$out"
grep -q "d_model 64 · layers 2" <<<"$out"
grep -q "tensors    20 × F16" <<<"$out"

mkdir -p "$TEST_TMPDIR/empty"
if HF_HUB_OFFLINE=1 HF_HUB_CACHE="$TEST_TMPDIR/empty" "$ssdq" info --model state-spaces/mamba2-130m \
    2>"$TEST_TMPDIR/err"; then
  echo "FAIL: an empty cache was accepted" >&2
  exit 1
fi
cat "$TEST_TMPDIR/err"
grep -qF "ssdq: error: state-spaces/mamba2-130m: not in the Hugging Face cache at $TEST_TMPDIR/empty: $TEST_TMPDIR/empty/models--state-spaces--mamba2-130m does not exist; HF_HUB_OFFLINE=1 forbids downloading it" "$TEST_TMPDIR/err"

# A folder that does not exist and is no hub name is refused as such.
if "$ssdq" info --model ./no-such-folder 2>"$TEST_TMPDIR/err"; then exit 1; fi
grep -qF "not a Hugging Face model name" "$TEST_TMPDIR/err"
echo PASS
