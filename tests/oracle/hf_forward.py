#!/usr/bin/env python3
"""Stand-in for bazel-bin/worker/tools/forward, built on transformers, with the same
flags: --model DIR --tp N --token-ids 1,2,3 --output out.npy [--incremental].
Writes fp32 [num_tokens, vocab_size] logits. --tp is accepted and ignored.
Only for testing the oracle scripts themselves (compare_forward.py,
unseen_check.sh --tool tests/oracle/hf_forward.py); it must pass trivially.
Run it with the oracle venv's python (it is started directly, so its shebang
must find torch: unseen_check.sh sets PATH to the venv)."""
import argparse

import numpy as np
import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicCache

p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
p.add_argument("--tp", type=int, default=1)
p.add_argument("--token-ids", required=True)
p.add_argument("--output", required=True)
p.add_argument("--incremental", action="store_true")
a = p.parse_args()
ids = [int(t) for t in a.token_ids.split(",")]
m = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                         attn_implementation="eager").eval()
with torch.no_grad():
    if a.incremental:
        cache = DynamicCache(config=m.config)
        rows = []
        for i, t in enumerate(ids):
            o = m(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True,
                  cache_position=torch.tensor([i]))
            cache = o.past_key_values
            rows.append(o.logits[0, -1])
        lg = torch.stack(rows)
    else:
        lg = m(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
np.save(a.output, np.ascontiguousarray(lg.float().numpy()))
