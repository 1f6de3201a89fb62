#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ from the repository's own fixtures.

Run from the repository root: python3 fuzz/make_corpus.py. Seeds are small real files plus the
bad-input fixtures of the unit tests; inputs that once crashed a reader are kept separately in
fuzz/corpus/<target>/regression-* and are not touched here, nor are the artifact seeds
(fuzz/make_artifact_seeds.py writes those with the ssdq binary).
"""
import glob
import hashlib
import io
import json
import os
import struct
import zipfile

ROOT = "fuzz/corpus"


def put(target, name, data):
    folder = os.path.join(ROOT, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(folder, "seed-" + name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def clear_seeds():
    for path in glob.glob(os.path.join(ROOT, "*", "seed-*")):
        if os.path.basename(os.path.dirname(path)) != "artifact":  # written by make_artifact_seeds.py
            os.remove(path)


def safetensors_bytes(tensors, metadata=None):
    header = {}
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    for path in sorted(glob.glob("tests/fixtures/safetensors/*.safetensors")):
        if os.path.getsize(path) <= 4096:
            put("safetensors", os.path.basename(path), read(path))
    put("safetensors", "all-dtypes.safetensors", safetensors_bytes({
        "bool": ("BOOL", [2], b"\x00\x01"), "u8": ("U8", [1], b"\x07"), "i8": ("I8", [1], b"\xff"),
        "i16": ("I16", [1], b"\x01\x80"), "u16": ("U16", [1], b"\x01\x80"), "bf16": ("BF16", [2, 1], b"\x80\x3f\x00\x40"),
        "f16": ("F16", [1], b"\x00\x3c"), "i32": ("I32", [1], b"\x01\x00\x00\x80"), "u32": ("U32", [], b"\x01\x00\x00\x00"),
        "f32": ("F32", [1, 1], b"\x00\x00\x80\x3f"), "i64": ("I64", [1], b"\x01" * 8), "u64": ("U64", [1], b"\x02" * 8),
        "f64": ("F64", [1], b"\x00" * 7 + b"\x40"), "e4m3": ("F8_E4M3", [1], b"\x38"), "e5m2": ("F8_E5M2", [1], b"\x3c"),
        "empty": ("F32", [0, 3], b""),
    }, {"format": "pt"}))


def index_seeds():
    weight_map = {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}
    put("safetensors_index", "valid.json", json.dumps({"metadata": {"total_size": 30}, "weight_map": weight_map}))
    put("safetensors_index", "one-shard.json", json.dumps({"weight_map": {"z": "b.safetensors"}}))
    put("safetensors_index", "missing-tensor.json", json.dumps({"weight_map": {"x": "a.safetensors", "z": "b.safetensors"}}))
    put("safetensors_index", "wrong-shard.json", json.dumps({"weight_map": {"x": "b.safetensors", "y": "a.safetensors", "z": "b.safetensors"}}))
    put("safetensors_index", "no-such-shard.json", json.dumps({"weight_map": {"q": "c.safetensors"}}))
    put("safetensors_index", "path-escape.json", json.dumps({"weight_map": {"x": "../a.safetensors"}}))
    put("safetensors_index", "duplicate-key.json", '{"weight_map": {"x": "a.safetensors", "x": "a.safetensors"}}')
    put("safetensors_index", "metadata-array.json", json.dumps({"metadata": [1], "weight_map": weight_map}))
    put("safetensors_index", "not-object.json", "[1, 2]")


def torch_seeds():
    for path in sorted(glob.glob("tests/fixtures/torch/*.bin")):
        data = read(path)
        put("torch_zip", os.path.basename(path), data)
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                for name in z.namelist():
                    if name.endswith("/data.pkl"):
                        try:
                            put("torch_pickle", os.path.basename(path)[:-4] + ".pkl", z.read(name))
                        except Exception:
                            pass  # compressed_entry.bin and the like: its pickle is stored, others may not be


def config_seeds():
    put("config", "mamba2-tiny.json", read("examples/mamba2-tiny/config.json"))
    put("config", "mamba2-tiny-hf.json", read("examples/mamba2-tiny/hf/config.json"))
    put("config", "mamba2-130m.json", json.dumps({
        "d_model": 768, "d_intermediate": 0, "n_layer": 24, "vocab_size": 50277,
        "ssm_cfg": {"layer": "Mamba2"}, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True,
        "residual_in_fp32": True, "fused_add_norm": True, "pad_vocab_size_multiple": 16, "tie_embeddings": True}))
    put("config", "dt-limit.json", json.dumps({
        "d_model": 256, "n_layer": 2, "vocab_size": 16,
        "ssm_cfg": {"d_state": 16, "headdim": 32, "ngroups": 2, "dt_limit": [0.001, {"__float__": "Infinity"}], "d_ssm": 512}}))
    put("config", "bad-int.json", '{"d_model": "256", "n_layer": 2, "vocab_size": 10}')
    put("config", "heads-mismatch.json", '{"hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 16, "state_size": 16,'
                                        ' "head_dim": 64, "n_groups": 1, "num_heads": 3}')
    put("config", "not-json.json", "{")


def tokenizer_seeds():
    # GPT-2's bytes_to_unicode alphabet, so every byte has a symbol.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    symbols = {}
    extra = 256
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(extra)
            extra += 1
    vocab = {symbols[b]: b for b in range(256)}
    merges = [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["Ġ", "a"], ["i", "n"], ["Ġa", "n"]]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    added = [{"id": len(vocab), "content": "<|endoftext|>", "special": True, "normalized": False},
             {"id": len(vocab) + 1, "content": "  ", "special": False, "normalized": True}]
    base = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "vocab": vocab,
                  "merges": [" ".join(m) for m in merges]},
    }
    put("tokenizer_json", "mini-string-merges.json", json.dumps(base, ensure_ascii=False))
    pairs = json.loads(json.dumps(base))
    pairs["model"]["merges"] = merges
    pairs["normalizer"] = None
    put("tokenizer_json", "mini-pair-merges.json", json.dumps(pairs, ensure_ascii=False))
    bad = json.loads(json.dumps(base))
    bad["model"]["merges"].append("Ġ zz")
    put("tokenizer_json", "unknown-merge.json", json.dumps(bad, ensure_ascii=False))
    bad = json.loads(json.dumps(base))
    bad["added_tokens"][1]["id"] = 1 << 21
    put("tokenizer_json", "id-too-large.json", json.dumps(bad, ensure_ascii=False))


def bpe_seeds():
    wiki = read("examples/wikitext-2-raw/wiki.test.raw")
    put("bpe_encode", "wikitext-start.txt", wiki[:2048])
    put("bpe_encode", "wikitext-middle.txt", wiki[200000:201024])
    cases = json.load(open("tests/fixtures/tokenizer/hf_extra_cases.json", encoding="utf-8"))
    for i, case in enumerate(cases["cases"][:40]):
        put("bpe_encode", "hf-case-%02d.txt" % i, case["text"])
    for i, case in enumerate(cases["ill_formed_utf8"][:10]):
        put("bpe_encode", "ill-formed-%02d.txt" % i, bytes.fromhex(case["hex"]))
    put("bpe_encode", "special.txt", "a<|endoftext|>b<|padding|>   \n\n\t x")


def json_lines_seeds():
    selector = {".jsonl": 0, ".jsonl.zst": 1, ".txt": 2, ".txt.zst": 3}
    for path in sorted(glob.glob("tests/fixtures/text/*")):
        name = os.path.basename(path)
        if name.endswith(".py") or name.endswith(".md") or os.path.getsize(path) > 8192:
            continue
        for suffix, byte in selector.items():
            if name.endswith(suffix) and not (suffix == ".jsonl" and name.endswith(".jsonl.zst")) and \
                    not (suffix == ".txt" and name.endswith(".txt.zst")):
                put("json_lines", name, bytes([byte]) + read(path))
    doc = read("tests/fixtures/text/pile-real-3docs.jsonl").split(b"\n")[0][:2000]
    put("json_lines", "pile-line-cut.jsonl", bytes([0]) + doc)


def main():
    clear_seeds()
    safetensors_seeds()
    index_seeds()
    torch_seeds()
    config_seeds()
    tokenizer_seeds()
    bpe_seeds()
    json_lines_seeds()
    for folder in sorted(glob.glob(os.path.join(ROOT, "*"))):
        files = os.listdir(folder)
        print(folder, len(files), "files,", sum(os.path.getsize(os.path.join(folder, f)) for f in files), "bytes")


if __name__ == "__main__":
    main()
