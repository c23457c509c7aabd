#!/usr/bin/env python3
"""Writes a random-weight checkpoint with Llama-3-8B's shapes (bf16, Hugging Face
layout: config.json, 4 safetensors shards and their index) for cuda_benchmark.
Weights are drawn on the GPU with torch (N(0, 0.02²), norms near 1), so it takes
seconds there; it needs torch and safetensors, which the device image has.
   python3 tests/gpu/make_llama8b.py OUT_DIR [--layers 32]"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--layers", type=int, default=32)
p.add_argument("--max-positions", type=int, default=8192)
a = p.parse_args()
h, inter, heads, kv, vocab, d = 4096, 14336, 32, 8, 128256, 128
config = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": a.layers,
    "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": d,
    "vocab_size": vocab, "max_position_embeddings": a.max_positions,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
}
os.makedirs(a.out, exist_ok=True)
with open(os.path.join(a.out, "config.json"), "w") as f:
    json.dump(config, f, indent=2)

gen = torch.Generator(device="cuda").manual_seed(0)


def rand(*shape, norm=False):
    t = torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32) * 0.02
    return (t + 1.0 if norm else t).to(torch.bfloat16).cpu()


names = [("model.embed_tokens.weight", (vocab, h), False)]
for l in range(a.layers):
    pre = f"model.layers.{l}."
    names += [(pre + "input_layernorm.weight", (h,), True),
              (pre + "self_attn.q_proj.weight", (heads * d, h), False),
              (pre + "self_attn.k_proj.weight", (kv * d, h), False),
              (pre + "self_attn.v_proj.weight", (kv * d, h), False),
              (pre + "self_attn.o_proj.weight", (h, heads * d), False),
              (pre + "post_attention_layernorm.weight", (h,), True),
              (pre + "mlp.gate_proj.weight", (inter, h), False),
              (pre + "mlp.up_proj.weight", (inter, h), False),
              (pre + "mlp.down_proj.weight", (h, inter), False)]
names += [("model.norm.weight", (h,), True), ("lm_head.weight", (vocab, h), False)]
shards = 4
weight_map = {}
for s in range(shards):
    part = names[s * len(names) // shards:(s + 1) * len(names) // shards]
    file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
    save_file({n: rand(*shape, norm=norm) for n, shape, norm in part},
              os.path.join(a.out, file), metadata={"format": "pt"})
    weight_map.update({n: file for n, _, _ in part})
with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": weight_map}, f)
print(f"wrote {a.out}: {len(names)} tensors in {shards} shards")
