#!/usr/bin/env python3
"""One fixture against transformers on the GPU: HF's fp32 logits (eager attention, on
cuda) for every golden prompt beside tpserve's forward tool on the GPU in float32 and
bfloat16. Prints ||ours - hf|| / ||hf|| per prompt and dtype; exits 1 past the limits
(fp32 1e-4, bf16 5e-2).
   python3 tests/gpu/hf_gpu_compare.py tests/data/models/llama_gqa gpu_bundle/bin/forward"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

model_dir, tool = sys.argv[1], sys.argv[2]
prompts = json.load(open(os.path.join(model_dir, "golden.json")))["prompts"]
m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                         attn_implementation="eager").cuda().eval()
limits = {"float32": 1e-4, "bfloat16": 5e-2}
ok = True
with tempfile.TemporaryDirectory() as tmp:
    for i, ids in enumerate(prompts):
        with torch.no_grad():
            hf = m(torch.tensor([ids], device="cuda")).logits[0].float().cpu().numpy()
        for dtype, limit in limits.items():
            out = os.path.join(tmp, f"{i}_{dtype}.npy")
            subprocess.run([tool, "--model", model_dir, "--tp", "1", "--device", "cuda",
                            "--dtype", dtype, "--token-ids", ",".join(map(str, ids)),
                            "--output", out], check=True)
            ours = np.load(out).astype(np.float64)
            err = np.linalg.norm(ours - hf) / np.linalg.norm(hf)
            ok &= bool(err < limit)
            print(f"{os.path.basename(model_dir)} prompt {i} {dtype}: rel err {err:.3g} "
                  f"(limit {limit:g}) {'ok' if err < limit else 'FAIL'}")
sys.exit(0 if ok else 1)
