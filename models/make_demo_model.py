#!/usr/bin/env python3
"""Makes models/demo/: a tiny Llama trained on the King James Bible, with its own tokenizer.

    apt-get install bible-kjv bible-kjv-text        # the text (public domain)
    python3 -m venv .venv-demo && .venv-demo/bin/pip install -r models/requirements.txt
    .venv-demo/bin/python models/make_demo_model.py  # ~10 min on one CPU core

Steps: dump the KJV text with Debian's `bible` program (or read --text), train a byte-level
BPE tokenizer on it with `tokenizers`, train a LlamaForCausalLM on it with torch on CPU
for a fixed number of steps (seeded), save with save_pretrained, and record greedy
generations (token ids and text) in samples.json for the C++ server's tests.
"""
import argparse
import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
BOS, EOS = "<s>", "</s>"
SEED = 1611
VOCAB_SIZE = 1024
PROMPTS = ["The king said", "In the beginning", "And Jesus answered and said",
           "The LORD is my shepherd", "And it came to pass"]
SAMPLE_NEW_TOKENS = 32

MODEL = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,   # head_dim 32; 2 heads per rank at TP=2
    num_key_value_heads=2,   # GQA; 1 KV head per rank at TP=2
    max_position_embeddings=1024,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    hidden_act="silu",
    tie_word_embeddings=True,
    attention_bias=False,
    mlp_bias=False,
)


def kjv_chapters(text_path):
    """Returns [(book, chapter, [verse, ...])] in canonical order."""
    if text_path:
        with open(text_path, encoding="utf-8") as f:
            raw = f.read()
    else:
        # Debian's bible-kjv prints one "Ref text" line per verse with pretty-printing off.
        raw = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], check=True,
                             capture_output=True, text=True).stdout
    chapters = []
    line_re = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")
    for line in raw.splitlines():
        if not line.strip():
            continue
        m = line_re.match(line)
        if not m:
            sys.exit(f"unexpected line in the KJV text: {line!r}")
        book, chapter, _, verse = m.groups()
        if not chapters or chapters[-1][:2] != (book, chapter):
            chapters.append((book, chapter, []))
        chapters[-1][2].append(verse.strip())
    if len(chapters) != 1189:
        sys.exit(f"expected the 1189 chapters of the KJV, got {len(chapters)}")
    return chapters, hashlib.sha256(raw.encode()).hexdigest()


def train_tokenizer(docs):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2,
                                  special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)])
    assert tok.get_vocab_size() == VOCAB_SIZE, tok.get_vocab_size()
    return tok, bos_id, eos_id


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def eval_loss(model, data, seq_len, batches, gen):
    model.eval()
    total = 0.0
    for _ in range(batches):
        x = sample_batch(data, 16, seq_len, gen)
        total += model(input_ids=x, labels=x).loss.item()
    model.train()
    return total / batches


def sample_batch(data, batch, seq_len, gen):
    starts = torch.randint(0, len(data) - seq_len, (batch,), generator=gen)
    return torch.stack([data[s:s + seq_len] for s in starts.tolist()])


def write_samples(path, samples):
    """samples.json: one sample per line, so that diffs stay readable."""
    head = json.dumps({"decoding": "greedy", "max_new_tokens": SAMPLE_NEW_TOKENS,
                       "dtype": "float32", "stop": "eos_token_id"})[:-1]
    lines = ",\n  ".join(json.dumps(s, ensure_ascii=False) for s in samples)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{head},\n \"samples\": [\n  {lines}\n ]\n}}\n")


def record_samples(out_dir, bos_id, eos_id):
    """Greedy generations with the saved files, loaded as a user would, to samples.json.

    min_logit_margin is the smallest gap between the top two logits over the generated
    steps: a C++ run may only differ from these ids where that gap is within its tolerance.
    """
    hf_tok = PreTrainedTokenizerFast.from_pretrained(out_dir)
    loaded = LlamaForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    samples = []
    for prompt in PROMPTS:
        ids = hf_tok(prompt)["input_ids"]
        assert ids[0] == bos_id and ids.count(bos_id) == 1, ids
        with torch.no_grad():
            out = loaded.generate(torch.tensor([ids]), max_new_tokens=SAMPLE_NEW_TOKENS,
                                  do_sample=False, eos_token_id=eos_id, pad_token_id=eos_id,
                                  output_logits=True, return_dict_in_generate=True)
        new = out.sequences[0, len(ids):].tolist()
        margin = min((lambda t: (t[0] - t[1]).item())(step[0].topk(2).values)
                     for step in out.logits)
        text = hf_tok.decode(new, skip_special_tokens=True)
        samples.append({"prompt": prompt, "prompt_ids": ids, "output_ids": new,
                        "output_text": text, "min_logit_margin": round(margin, 4)})
        print(f"--- greedy: {prompt!r}\n{prompt}{text}")
    write_samples(os.path.join(out_dir, "samples.json"), samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "demo"))
    ap.add_argument("--text", help="KJV text with 'Ge1:1 In the beginning ...' lines "
                    "(default: run Debian's `bible` program)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=4e-3)
    # One thread: on a shared 2-core machine, two OpenMP threads spin-wait and run ~3x slower.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--samples-only", action="store_true",
                    help="only redo samples.json from the model already in --out")
    args = ap.parse_args()
    if args.samples_only:
        torch.set_num_threads(args.threads)
        config = LlamaConfig.from_pretrained(args.out)
        record_samples(args.out, config.bos_token_id, config.eos_token_id)
        return

    torch.set_num_threads(args.threads)
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    os.makedirs(args.out, exist_ok=True)

    chapters, text_sha = kjv_chapters(args.text)
    # One document per chapter, one verse per line.
    docs = ["\n".join(verses) for _, _, verses in chapters]
    print(f"text: {len(chapters)} chapters, {sum(len(d) for d in docs)} chars, sha256 {text_sha}")

    t0 = time.time()
    tok, bos_id, eos_id = train_tokenizer(docs)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS,
                   "eos_token": EOS, "model_max_length": MODEL["max_position_embeddings"],
                   "clean_up_tokenization_spaces": False}, f, indent=2)
        f.write("\n")
    print(f"tokenizer: vocab {tok.get_vocab_size()}, bos {bos_id}, eos {eos_id} "
          f"({time.time() - t0:.1f}s)")

    # Token stream: <s> chapter </s> <s> chapter </s> ...; every 40th chapter held out.
    enc = tok.encode_batch(docs)  # post-processor adds <s>
    train_ids, val_ids = [], []
    for i, e in enumerate(enc):
        (val_ids if i % 40 == 20 else train_ids).extend(e.ids + [eos_id])
    train_data = torch.tensor(train_ids, dtype=torch.long)
    val_data = torch.tensor(val_ids, dtype=torch.long)
    print(f"tokens: train {len(train_data)}, val {len(val_data)}")

    config = LlamaConfig(bos_token_id=bos_id, eos_token_id=eos_id, **MODEL)
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters")

    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(SEED)
    val_gen = torch.Generator().manual_seed(SEED + 1)
    model.train()
    t0 = time.time()
    ema = None
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, warmup=min(40, args.steps // 10))
        x = sample_batch(train_data, args.batch, args.seq_len, gen)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  ema {ema:.3f}  "
                  f"{time.time() - t0:6.1f}s", flush=True)
    train_s = time.time() - t0
    val = eval_loss(model, val_data, args.seq_len, 8, val_gen)
    print(f"trained {args.steps} steps in {train_s:.0f}s; train loss (ema) {ema:.3f}, "
          f"held-out loss {val:.3f}")

    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id,
                                               pad_token_id=eos_id, do_sample=False)
    model.save_pretrained(args.out, safe_serialization=True)

    record_samples(args.out, bos_id, eos_id)
    hf_tok = PreTrainedTokenizerFast.from_pretrained(args.out)
    loaded = LlamaForCausalLM.from_pretrained(args.out, dtype=torch.float32).eval()
    torch.manual_seed(SEED)
    for prompt in PROMPTS[:2]:
        ids = hf_tok(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = loaded.generate(ids, max_new_tokens=48, do_sample=True, temperature=0.8,
                                  top_p=0.95, pad_token_id=eos_id)
        print(f"--- sampled (T=0.8): {prompt!r}\n"
              f"{hf_tok.decode(out[0].tolist(), skip_special_tokens=True)}")


if __name__ == "__main__":
    main()
