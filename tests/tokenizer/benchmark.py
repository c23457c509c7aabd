#!/usr/bin/env python3
"""Encode/decode throughput of tpserve's tokenizer beside Hugging Face tokenizers,
single-threaded, on the same few MB of mixed text, in the same run.

The text: English prose (vim's help files), Python source (the standard library),
and multilingual/emoji/whitespace-heavy strings (the committed corpus), cut into
documents of about 4 KB, each encoded and decoded as one request.

Usage (oracle venv):  python3 tests/tokenizer/benchmark.py [--mb 4]
Prints a Markdown table for docs/perf.md.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
from tokenizers import Tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BENCH = os.path.join(ROOT, "bazel-bin/server/tokenizer/tokenizer_benchmark")


def documents(total_bytes):
    rng = random.Random(0)
    prose = "".join(open(f, encoding="utf-8", errors="ignore").read()
                    for f in sorted(glob.glob("/usr/share/vim/vim*/doc/*.txt"))[:40])
    code = "".join(open(f, encoding="utf-8", errors="ignore").read()
                   for f in sorted(glob.glob("/usr/lib/python3*/*.py"))[:80])
    corpus = [json.loads(l) for l in open(os.path.join(HERE, "corpus.jsonl"), encoding="utf-8")]
    docs, size = [], 0
    while size < total_bytes:
        kind = rng.random()
        if kind < 0.4:
            start = rng.randrange(len(prose) - 4096)
            doc = prose[start:start + 4096]
        elif kind < 0.7:
            start = rng.randrange(len(code) - 4096)
            doc = code[start:start + 4096]
        else:
            doc = " ".join(rng.choice(corpus)[:400] for _ in range(30))
        docs.append(doc)
        size += len(doc.encode("utf-8"))
    return docs


def hf(path, docs, rounds=3):
    tok = Tokenizer.from_file(path)
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    enc = dec = 1e30
    for _ in range(rounds):
        t = time.perf_counter()
        ids = [tok.encode(d, add_special_tokens=False).ids for d in docs]
        enc = min(enc, time.perf_counter() - t)
        t = time.perf_counter()
        out = [tok.decode(i, skip_special_tokens=False) for i in ids]
        dec = min(dec, time.perf_counter() - t)
    out_bytes = sum(len(o.encode("utf-8")) for o in out)
    return {"encode_mb_s": nbytes / enc / 1e6, "decode_mb_s": out_bytes / dec / 1e6,
            "tokens": sum(map(len, ids))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=4)
    args = ap.parse_args()
    docs = documents(int(args.mb * 1e6))
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    print(f"{len(docs)} documents, {nbytes / 1e6:.1f} MB; best of 3 rounds, one thread\n")
    print("| tokenizer | tokens | encode MB/s tpserve | HF | ratio | decode MB/s tpserve | HF | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for name in ["qwen2", "llama3", "gpt2", "mistral", "mistral3"]:
        path = os.path.join(HERE, "data", name, "tokenizer.json")
        ours = json.loads(subprocess.check_output([BENCH, "--tokenizer", path, "--docs", f.name]))
        theirs = hf(path, docs)
        assert ours["tokens"] == theirs["tokens"], (name, ours, theirs)
        print(f"| {name} | {ours['tokens']} | {ours['encode_mb_s']:.1f} | "
              f"{theirs['encode_mb_s']:.1f} | {ours['encode_mb_s'] / theirs['encode_mb_s']:.2f}x | "
              f"{ours['decode_mb_s']:.1f} | {theirs['decode_mb_s']:.1f} | "
              f"{ours['decode_mb_s'] / theirs['decode_mb_s']:.2f}x |")
        sys.stdout.flush()
    os.unlink(f.name)


if __name__ == "__main__":
    main()
