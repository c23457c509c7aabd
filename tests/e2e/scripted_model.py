"""A tiny Llama checkpoint whose greedy answers are scripted, for end-to-end tests of
what the OpenAI-compatible API makes of a model's text (tool calls, reasoning).

    python3 tests/e2e/scripted_model.py DIR

The tokenizer is byte-level BPE without merges (every byte a token, GPT-2's byte
alphabet) plus added tokens: ChatML's <|im_start|> and <|im_end|> (the EOS) and a few
whole pieces of text. The model is a bigram table: one layer whose attention and MLP
write nothing (o_proj and down_proj are zero), one-hot embeddings, and an LM head that
maps each token to the one the script says comes next, with a wide margin. So a prompt
ending in "!" is answered with SCRIPTS["reasoning"], any other prompt (a chat prompt
ends with the assistant header's "\\n") with SCRIPTS["tool_call"], then EOS. Written
with numpy only (Debian's python3-numpy), in safetensors format.
"""
import json
import os
import struct
import sys

import numpy as np

TOOL_CALL = ["<tool_call>\n", '{"name": "get_weather", "arguments": {"city": "Paris"}}',
             "\n</tool_call>"]
REASONING = ["<think>\n", "Let me think.", "\n</think>\n\n", "Done."]
SCRIPTS = {"tool_call": "".join(TOOL_CALL), "reasoning": "".join(REASONING)}
SPECIALS = ["<|im_start|>", "<|im_end|>"]
HIDDEN = 384
HEADS = 6
KV_HEADS = 2
INTERMEDIATE = 64


def byte_alphabet():
    """GPT-2's bytes_to_unicode: byte b's character in a byte-level vocabulary."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def tokens():
    """(vocab of the 256 bytes, added tokens in id order)."""
    alphabet = byte_alphabet()
    vocab = {alphabet[b]: b for b in range(256)}
    return vocab, SPECIALS + TOOL_CALL + REASONING


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def make(directory):
    os.makedirs(directory, exist_ok=True)
    vocab, added = tokens()
    ids = {text: 256 + i for i, text in enumerate(added)}
    size = 256 + len(added)
    eos = ids["<|im_end|>"]
    # next[t]: the token after t.
    nxt = np.full(size, ids[TOOL_CALL[0]])
    nxt[vocab[byte_alphabet()[ord("!")]]] = ids[REASONING[0]]
    for script in (TOOL_CALL, REASONING):
        for a, b in zip(script, script[1:]):
            nxt[ids[a]] = ids[b]
        nxt[ids[script[-1]]] = eos
    nxt[eos] = eos
    embed = np.zeros((size, HIDDEN), np.float32)
    embed[np.arange(size), np.arange(size)] = 1.0
    head = np.zeros((size, HIDDEN), np.float32)
    head[nxt, np.arange(size)] = 1.0  # logit of next[t] is sqrt(HIDDEN) after the norm
    head_dim = HIDDEN // HEADS
    layer = "model.layers.0."
    rng = np.random.default_rng(0)
    tensors = {
        "model.embed_tokens.weight": embed,
        layer + "input_layernorm.weight": np.ones(HIDDEN),
        layer + "self_attn.q_proj.weight": rng.normal(0, 0.02, (HEADS * head_dim, HIDDEN)),
        layer + "self_attn.k_proj.weight": rng.normal(0, 0.02, (KV_HEADS * head_dim, HIDDEN)),
        layer + "self_attn.v_proj.weight": rng.normal(0, 0.02, (KV_HEADS * head_dim, HIDDEN)),
        layer + "self_attn.o_proj.weight": np.zeros((HIDDEN, HEADS * head_dim)),
        layer + "post_attention_layernorm.weight": np.ones(HIDDEN),
        layer + "mlp.gate_proj.weight": rng.normal(0, 0.02, (INTERMEDIATE, HIDDEN)),
        layer + "mlp.up_proj.weight": rng.normal(0, 0.02, (INTERMEDIATE, HIDDEN)),
        layer + "mlp.down_proj.weight": np.zeros((HIDDEN, INTERMEDIATE)),
        "model.norm.weight": np.full(HIDDEN, 20.0),  # a margin no sampling crosses
        "lm_head.weight": head,
    }
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
              "num_hidden_layers": 1, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "vocab_size": size, "hidden_act": "silu",
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "bos_token_id": ids["<|im_start|>"],
              "eos_token_id": eos, "torch_dtype": "float32"}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    added_tokens = [{"id": ids[t], "content": t, "single_word": False, "lstrip": False,
                     "rstrip": False, "normalized": False, "special": t in SPECIALS}
                    for t in added]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    tokenizer = {"version": "1.0", "truncation": None, "padding": None,
                 "added_tokens": added_tokens, "normalizer": None,
                 "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
                 "model": {"type": "BPE", "dropout": None, "unk_token": None,
                           "continuing_subword_prefix": None, "end_of_word_suffix": None,
                           "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                           "vocab": vocab, "merges": []}}
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}, f)
    return ids


if __name__ == "__main__":
    make(sys.argv[1])
