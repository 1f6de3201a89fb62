#!/usr/bin/env python3
"""Writes fuzz/corpus/artifact/seed-*.ssdq: real .ssdq artifacts of a tiny random model.

  python3 fuzz/make_artifact_seeds.py PATH/TO/ssdq

The model is tests/fixtures/hub's tiny random Mamba-2 with its vocabulary widened to 272 rows, so
the small byte-level tokenizer of fuzz/corpus/tokenizer_json (264 ids) fits it; `ssdq calibrate`
runs it over a little text and `ssdq export` writes one artifact per recipe. Small artifacts keep
libFuzzer's inputs short.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "hub"))
import make_fixtures  # noqa: E402

# One artifact per distinct reader path: int8 and packed int4 weights, quamba2's clusters and
# per-group B/C scales, ssdi8's integer SSD with a quantized embedding.
# had in two Hadamard blocks is a format-2.0 file (hadamard_blocks in its layout).
RECIPES = [("rtn", "w8a8", []), ("rtn", "w4a16", ["--group-size", "32"]), ("quamba2", "w4a8", ["--group-size", "32"]),
           ("ssdi8", "w8a8", ["--quantize-embedding"]), ("had", "w8a8", ["--tp-blocks", "2"])]


def main():
    ssdq = os.path.abspath(sys.argv[1])
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "artifact")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        os.makedirs(model)
        config = dict(make_fixtures.CONFIG, vocab_size=272)
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(config, f)
        with open(os.path.join(model, "model.safetensors"), "wb") as f:
            f.write(make_fixtures.safetensors(make_fixtures.tensors(random.Random(5), vocab=272)))
        tokenizer = os.path.join(os.path.dirname(out_dir), "tokenizer_json", "seed-mini-string-merges.json")
        text = os.path.join(tmp, "calib.txt")
        with open(text, "w") as f:
            f.write("the cat and the dog in the tent. " * 40)
        calib = os.path.join(tmp, "calib.safetensors")
        subprocess.run([ssdq, "calibrate", "--model", model, "--data", text, "--tokenizer", tokenizer, "--samples", "4",
                        "--seqlen", "32", "--out", calib, "--quiet"], check=True)
        for recipe, bits, extra in RECIPES:
            suffix = "-blocks" + extra[1] if extra[:1] == ["--tp-blocks"] else ""
            out = os.path.join(out_dir, "seed-%s-%s%s.ssdq" % (recipe, bits, suffix))
            subprocess.run([ssdq, "export", "--model", model, "--calib", calib, "--recipe", recipe, "--bits", bits,
                            "--tokenizer", tokenizer, "--out", out, "--quiet"] + extra, check=True)
            print(out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
