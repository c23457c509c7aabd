#!/usr/bin/env python3
"""Make one golden fixture for the tpserve C++ model core, with Hugging Face
transformers as the oracle.

A fixture is a tiny random-weight checkpoint written by `save_pretrained`
(config.json, generation_config.json, safetensors) plus golden outputs
computed in fp32 by transformers itself (eager attention):

  golden.json       prompts, greedy generations, metadata (see README.md)
  logits_<i>.npy    fp32 [len(prompt_i), vocab_size], logits for every position

Everything is deterministic given the arguments (fixed seeds).

Examples:
  make_fixture.py --name llama_gqa --arch llama --hidden 64 --heads 8 \
      --kv-heads 2 --intermediate 128 --vocab 320 --layers 2
  make_fixture.py --random-shapes 7 --out-root /tmp/unseen   # random shapes
"""

import argparse
import copy
import json
import math
import os
import re
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM, "LlamaForCausalLM"),
    "mistral": (MistralConfig, MistralForCausalLM, "MistralForCausalLM"),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, "Qwen2ForCausalLM"),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, "Qwen3ForCausalLM"),
}

# A greedy choice whose top-1/top-2 logit gap is below this is considered
# fragile (a correct fp32 implementation could legitimately pick the other
# token); such prompts are re-drawn.
MIN_GREEDY_MARGIN = 2e-3


def tp_sizes(heads, kv_heads, intermediate):
    out = []
    for t in (1, 2, 3, 4):
        if heads % t or intermediate % t:
            continue
        if kv_heads % t == 0 or t % kv_heads == 0:
            out.append(t)
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", help="fixture name (directory under --out-root)")
    p.add_argument("--out-root", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "models"))
    p.add_argument("--description", default="")
    p.add_argument("--arch", choices=sorted(ARCHS), default="llama")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    p.add_argument("--head-dim", type=int, default=None,
                   help="default: hidden // heads (written to config.json either way)")
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--vocab", type=int, default=320)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--tie", action="store_true", help="tie_word_embeddings=True")
    p.add_argument("--attention-bias", action="store_true",
                   help="llama/mistral-style attention_bias=True (q,k,v and o biases)")
    p.add_argument("--mlp-bias", action="store_true",
                   help="llama: mlp_bias=True (gate/up/down biases, random like every bias)")
    p.add_argument("--hidden-act", default="silu",
                   help="config.json hidden_act: silu, gelu, gelu_pytorch_tanh, gelu_new, relu")
    p.add_argument("--rms-eps", type=float, default=1e-6)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rope-scaling", default=None,
                   help='JSON, e.g. \'{"rope_type":"linear","factor":2.0}\'')
    p.add_argument("--legacy-rope-config", action="store_true",
                   help="rewrite config.json with the pre-v5 keys rope_theta/rope_scaling "
                        "instead of rope_parameters (what most published checkpoints have)")
    p.add_argument("--max-position", type=int, default=512)
    p.add_argument("--sliding-window", type=int, default=None,
                   help="mistral: sliding_window (default none); qwen2: enables use_sliding_window")
    p.add_argument("--save-dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--max-shard-size", default=None, help='e.g. "100KB" to force sharding')
    p.add_argument("--min-shards", type=int, default=1,
                   help="fail unless at least this many shard files were written")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--init-std", type=float, default=0.1, help="std of linear weights")
    p.add_argument("--embed-std", type=float, default=0.4, help="std of embeddings / lm_head")
    p.add_argument("--prompt-lens", default="3,8,13,17")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--random-shapes", type=int, default=None, metavar="SEED",
                   help="ignore the shape flags and draw architecture and shapes from SEED "
                        "(for the unseen-checkpoint check)")
    return p.parse_args(argv)


def randomize_shapes(args):
    """Draw a random architecture and shapes (small), deterministically."""
    r = np.random.default_rng(args.random_shapes)
    args.arch = str(r.choice(["llama", "mistral", "qwen2", "qwen3"]))
    kv = int(r.choice([1, 2, 3, 4, 6]))
    group = int(r.choice([1, 2, 3, 4]))
    if kv == 1:  # MQA: up to 12 query heads, so T = 1..4 can all be valid
        group = int(r.choice([1, 4, 6, 8, 12]))
    heads = kv * group
    while heads > 16:
        group -= 1
        heads = kv * group
    head_dim = int(r.choice([4, 8, 12, 16]))
    args.heads, args.kv_heads, args.head_dim = heads, kv, head_dim
    if args.arch == "qwen3" or r.random() < 0.3:
        args.hidden = int(r.choice([16, 24, 32, 48, 64]))   # head_dim decoupled
    else:
        args.hidden = heads * head_dim
        while args.hidden > 96:                            # keep it small
            head_dim //= 2
            args.head_dim = head_dim
            args.hidden = heads * head_dim
        args.head_dim = None if r.random() < 0.5 else head_dim
    if args.arch != "qwen3" and args.hidden % heads != 0:
        # transformers 5 validates hidden % heads for these (Qwen3 decouples head_dim).
        args.hidden = heads * head_dim
        args.head_dim = head_dim
    args.intermediate = int(r.choice([24, 48, 72, 96, 120, 144]))
    args.vocab = int(r.integers(64, 600))
    args.layers = int(r.choice([1, 2]))
    args.tie = bool(r.random() < 0.4)
    args.rope_theta = float(r.choice([10000.0, 1000000.0, 500000.0]))
    rs = r.random()
    if rs < 0.2:
        args.rope_scaling = json.dumps({"rope_type": "linear", "factor": float(r.choice([2.0, 4.0]))})
    elif rs < 0.4:
        hd = args.head_dim or args.hidden // heads
        for old_ctx in (64, 48, 96, 32, 128, 256, 40, 80):
            if not llama3_bands(hd, args.rope_theta, old_ctx, 1.0, 4.0)[1]:
                break
        else:
            old_ctx = None
        args.rope_scaling = None if old_ctx is None else json.dumps(
            {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
             "high_freq_factor": 4.0, "original_max_position_embeddings": old_ctx})
    else:
        args.rope_scaling = None
    args.legacy_rope_config = bool(r.random() < 0.5)
    args.sliding_window = int(r.choice([4, 6, 8])) if args.arch == "mistral" else None
    args.save_dtype = "bfloat16" if r.random() < 0.25 else "float32"
    args.max_shard_size = "60KB" if r.random() < 0.3 else None
    args.rms_eps = float(r.choice([1e-5, 1e-6]))
    args.seed = int(r.integers(0, 2**31 - 1))
    lens = sorted(set(int(x) for x in r.integers(1, 24, size=3)))
    if args.sliding_window and max(lens) <= args.sliding_window:
        lens.append(args.sliding_window + 5)
    args.prompt_lens = ",".join(str(x) for x in lens)
    # Drawn last, so that the draws above stay what they were for a given seed.
    args.hidden_act = str(r.choice(["silu", "silu", "gelu", "gelu_pytorch_tanh", "gelu_new",
                                    "relu"]))
    args.mlp_bias = bool(args.arch == "llama" and r.random() < 0.4)
    if args.rope_scaling is None and r.random() < 0.3:
        args.rope_scaling = json.dumps(
            {"rope_type": "yarn", "factor": float(r.choice([2.0, 4.0, 8.0])),
             "original_max_position_embeddings": int(r.choice([16, 32, 64, 128])),
             "beta_fast": float(r.choice([32.0, 16.0])), "beta_slow": float(r.choice([1.0, 2.0]))})
    if args.name is None:
        args.name = "unseen_%d" % args.random_shapes
    args.description = "random shapes, seed %d" % args.random_shapes
    return args


def build_config(args):
    cfg_cls, _, _ = ARCHS[args.arch]
    kv = args.kv_heads if args.kv_heads is not None else args.heads
    head_dim = args.head_dim if args.head_dim is not None else args.hidden // args.heads
    rope = {"rope_type": "default", "rope_theta": float(args.rope_theta)}
    if args.rope_scaling:
        sc = json.loads(args.rope_scaling)
        if "type" in sc and "rope_type" not in sc:
            sc["rope_type"] = sc.pop("type")
        rope.update(sc)
        rope["rope_theta"] = float(args.rope_theta)
    kw = dict(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        hidden_act=args.hidden_act,
        max_position_embeddings=args.max_position,
        rms_norm_eps=args.rms_eps,
        tie_word_embeddings=bool(args.tie),
        rope_parameters=rope,
        bos_token_id=1,
        eos_token_id=2,
    )
    if args.arch in ("llama", "mistral") and args.attention_bias:
        if args.arch == "mistral":
            raise SystemExit("MistralConfig has no attention_bias")
        kw["attention_bias"] = True
    if args.mlp_bias:
        if args.arch != "llama":
            raise SystemExit("only LlamaConfig has mlp_bias")
        kw["mlp_bias"] = True
    if args.arch == "mistral":
        kw["sliding_window"] = args.sliding_window
    if args.arch in ("qwen2", "qwen3"):
        if args.sliding_window:
            kw["use_sliding_window"] = True
            kw["sliding_window"] = args.sliding_window
            kw["max_window_layers"] = 0
        else:
            kw["use_sliding_window"] = False
    return cfg_cls(**kw)


def init_weights(model, args):
    """Random weights; norms and biases random too, so that bugs show."""
    g = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):     # input/post_attention/final/q/k norms
                v = torch.empty(p.shape).uniform_(0.6, 1.4, generator=g)
            elif name.endswith(".bias"):
                v = torch.randn(p.shape, generator=g) * 0.1
            elif "embed_tokens" in name or name.startswith("lm_head"):
                v = torch.randn(p.shape, generator=g) * args.embed_std
            else:
                v = torch.randn(p.shape, generator=g) * args.init_std
            p.copy_(v.to(p.dtype))


def rewrite_legacy_rope(config_path):
    """rope_parameters -> rope_theta (+ rope_scaling), as pre-v5 transformers wrote it."""
    with open(config_path) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters")
    rp = dict(rp)
    cfg["rope_theta"] = rp.pop("rope_theta")
    if rp.get("rope_type", "default") != "default":
        cfg["rope_scaling"] = rp
    else:
        cfg["rope_scaling"] = None
    with open(config_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def llama3_bands(head_dim, theta, old_ctx, low_freq_factor, high_freq_factor, edge_tol=0.02):
    """Band of each rope frequency under llama3 scaling: kept (wavelength below
    old_ctx/high_freq_factor), scaled (above old_ctx/low_freq_factor) or
    interpolated. Returns (bands, near_edge): near_edge is True when some
    wavelength lies within edge_tol (relative) of a band edge, where a float vs
    double difference in an implementation could flip the band."""
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    wavelen = 2 * math.pi / inv
    low_wl = old_ctx / low_freq_factor
    high_wl = old_ctx / high_freq_factor
    bands, near_edge = [], False
    for w in wavelen:
        for edge in (low_wl, high_wl):
            if abs(w - edge) / edge < edge_tol:
                near_edge = True
        if w < high_wl:
            bands.append("kept")
        elif w > low_wl:
            bands.append("scaled")
        else:
            bands.append("interpolated")
    return bands, near_edge


def rope_bands(config):
    rp = config.rope_parameters
    bands, near_edge = llama3_bands(config.head_dim, rp["rope_theta"],
                                    rp["original_max_position_embeddings"],
                                    rp["low_freq_factor"], rp["high_freq_factor"])
    if near_edge:
        raise SystemExit("llama3 rope: a wavelength is within 2%% of a band edge: %s" % bands)
    return bands


@torch.no_grad()
def full_logits(model, ids):
    x = torch.tensor([ids], dtype=torch.long)
    return model(input_ids=x, use_cache=False).logits[0].float()


@torch.no_grad()
def greedy(model, prompt, n):
    """Greedy continuation two ways (generate() with KV cache, and a cache-free
    argmax loop); they must agree. Returns ids, logprobs, min top1-top2 margin."""
    x = torch.tensor([prompt], dtype=torch.long)
    gen = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                         max_new_tokens=n, min_new_tokens=0, num_beams=1,
                         pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    out = gen.sequences[0, len(prompt):].tolist()
    rope = getattr(model.config, "rope_parameters", None) or {}
    if rope.get("rope_type") == "longrope":
        # longrope picks its factor set by each forward pass's length, so a cache-free
        # loop (one long pass per token) is not what generate() computes: generate's own
        # passes (prompt once, then one token each, with the cache) are the truth.
        logprobs, margin = [], float("inf")
        for k, t in enumerate(out):
            row = gen.logits[k][0].float()
            top2 = torch.topk(row, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            logprobs.append(float(torch.log_softmax(row, dim=-1)[t]))
        return out, logprobs, margin
    seq = list(prompt)
    manual = []
    for _ in range(n):
        nxt = int(torch.argmax(full_logits(model, seq)[-1]))
        manual.append(nxt)
        seq.append(nxt)
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else ([] if eos is None else [eos]))
    stopped_at_eos = len(out) < n and out == manual[:len(out)] and out and out[-1] in eos
    if out != manual and not stopped_at_eos:   # (an eos continuation is re-drawn by the caller)
        raise SystemExit("generate() %s != cache-free greedy %s for prompt %s"
                         % (out, manual, prompt))
    logits = full_logits(model, list(prompt) + manual)
    lp = torch.log_softmax(logits, dim=-1)
    logprobs, margin = [], float("inf")
    for k, t in enumerate(manual):
        row = logits[len(prompt) - 1 + k]
        top2 = torch.topk(row, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        logprobs.append(float(lp[len(prompt) - 1 + k, t]))
    return manual, logprobs, margin


def dump_json(obj):
    """Indented JSON, but with flat lists of numbers or strings kept on one line."""
    text = json.dumps(obj, indent=1)
    item = r'(?:-?[0-9][0-9.eE+-]*|"[^"\\]*")'
    text = re.sub(r"\[\s*(%s(?:\s*,\s*%s)*)\s*\]" % (item, item),
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    json.loads(text)  # still valid
    return text + "\n"


def main(argv=None):
    args = parse_args(argv)
    if args.random_shapes is not None:
        args = randomize_shapes(args)
    if not args.name:
        raise SystemExit("--name is required")
    torch.manual_seed(args.seed)
    torch.set_num_threads(min(8, os.cpu_count() or 1))

    config = build_config(args)
    _, model_cls, arch_name = ARCHS[args.arch]
    model = model_cls(config).eval()
    init_weights(model, args)
    if args.tie:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), \
            "tie_word_embeddings did not tie"

    out_dir = os.path.abspath(os.path.join(args.out_root, args.name))
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    save_kw = dict(safe_serialization=True)
    if args.max_shard_size:
        save_kw["max_shard_size"] = args.max_shard_size
    if args.save_dtype == "bfloat16":
        model.to(torch.bfloat16)
    model.save_pretrained(out_dir, **save_kw)
    del model
    if args.legacy_rope_config:
        rewrite_legacy_rope(os.path.join(out_dir, "config.json"))

    shards = sorted(f for f in os.listdir(out_dir) if f.endswith(".safetensors"))
    if len(shards) < args.min_shards:
        raise SystemExit("expected >= %d shards, got %s" % (args.min_shards, shards))
    if len(shards) > 1 and not os.path.exists(
            os.path.join(out_dir, "model.safetensors.index.json")):
        raise SystemExit("sharded save without model.safetensors.index.json")

    # Golden outputs: reload exactly what was written, in fp32, eager attention.
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    cfg = model.config
    # The reloaded config must mean the same as the one we built.
    for key in ("vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads",
                "head_dim", "intermediate_size", "num_hidden_layers", "tie_word_embeddings"):
        if getattr(cfg, key) != getattr(config, key):
            raise SystemExit("reloaded config %s: %r != %r"
                             % (key, getattr(cfg, key), getattr(config, key)))
    if dict(cfg.rope_parameters) != dict(config.rope_parameters):
        raise SystemExit("reloaded rope_parameters %r != %r"
                         % (cfg.rope_parameters, config.rope_parameters))
    assert not any(p.dtype != torch.float32 for p in model.parameters())

    extra = {}
    if cfg.rope_parameters.get("rope_type") == "llama3":
        bands = rope_bands(cfg)
        for b in ("kept", "interpolated", "scaled"):
            if b not in bands and args.random_shapes is None:
                raise SystemExit("llama3 rope: no frequency in band %r: %s" % (b, bands))
        extra["llama3_rope_bands"] = bands

    # Prompts: random ids with a fixed seed; re-draw if greedy would hit eos
    # (so every greedy run has exactly max_new_tokens tokens) or is fragile.
    rng = np.random.default_rng(args.seed + 1)
    lens = [int(x) for x in args.prompt_lens.split(",")]
    eos = cfg.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else ([] if eos is None else [eos]))
    prompts, greedies, margins = [], [], []
    for i, n in enumerate(lens):
        for attempt in range(100):
            ids = [int(t) for t in rng.integers(0, cfg.vocab_size, size=n)]
            out, lps, margin = greedy(model, ids, args.max_new_tokens)
            if not eos_ids.intersection(out) and margin >= MIN_GREEDY_MARGIN:
                break
        else:
            raise SystemExit("could not find a robust prompt of length %d" % n)
        prompts.append(ids)
        greedies.append({"prompt_index": i, "max_new_tokens": args.max_new_tokens,
                         "output_ids": out, "output_logprobs": lps})
        margins.append(margin)

    logit_files = []
    logit_std = []
    for i, ids in enumerate(prompts):
        lg = full_logits(model, ids).numpy().astype(np.float32)
        assert lg.shape == (len(ids), cfg.vocab_size)
        fn = "logits_%d.npy" % i
        np.save(os.path.join(out_dir, fn), np.ascontiguousarray(lg))
        logit_files.append(fn)
        logit_std.append(float(lg.std()))

    if args.arch == "mistral" or getattr(cfg, "use_sliding_window", False):
        window = cfg.sliding_window
        extra["sliding_window"] = window
        nowin = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32,
                                                     attn_implementation="eager",
                                                     sliding_window=None).eval()
        if args.arch != "mistral":
            nowin.config.use_sliding_window = False
        effective = None
        for ids in prompts:
            a = full_logits(model, ids)
            b = full_logits(nowin, ids)
            diff = float((a - b).abs().max())
            if window is not None and len(ids) > window:
                effective = (diff > 1e-5) if effective is None else (effective and diff > 1e-5)
            elif diff > 1e-6:
                raise SystemExit("prompt of length %d <= window %s differs without window"
                                 % (len(ids), window))
        if window is not None:
            if effective is None:
                raise SystemExit("no prompt longer than the sliding window")
            extra["sliding_window_effective"] = bool(effective)
            if not effective:
                print("WARNING: sliding window has no effect in transformers %s"
                      % transformers.__version__, file=sys.stderr)

    kv = cfg.num_key_value_heads
    golden = {
        "name": args.name,
        "description": args.description,
        "architecture": arch_name,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "tp_sizes": tp_sizes(cfg.num_attention_heads, kv, cfg.intermediate_size),
        "prompts": prompts,
        "logits": logit_files,
        "greedy": greedies,
        # informational extras
        "saved_dtype": args.save_dtype,
        "shards": shards,
        "legacy_rope_config": bool(args.legacy_rope_config),
        "shape": {"vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
                  "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": kv,
                  "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size,
                  "num_hidden_layers": cfg.num_hidden_layers,
                  "tie_word_embeddings": bool(cfg.tie_word_embeddings)},
        "rope_parameters": dict(cfg.rope_parameters),
        "min_greedy_margin": min(margins),
        "logits_std": logit_std,
        "seed": args.seed,
    }
    golden.update(extra)
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        f.write(dump_json(golden))
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print("%s: %s tp_sizes=%s shards=%d size=%.0fKB margin=%.3g logit_std=%.2f%s" % (
        args.name, arch_name, golden["tp_sizes"], len(shards), size / 1024, min(margins),
        float(np.mean(logit_std)),
        "" if "sliding_window_effective" not in extra
        else " sliding_window_effective=%s" % extra["sliding_window_effective"]))


if __name__ == "__main__":
    main()
