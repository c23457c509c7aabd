"""vLLM's CPU linear layers (oneDNN's matmul through vLLM's own binding) on the TinyLlama
shapes that bf16_gemm_benchmark times, for putting tpserve's bf16 GEMM beside the peer's.

Run it with the Python of the vLLM venv that tools/bench_peers.sh installs:

  ~/.cache/tpserve-peers/vllm-venv/bin/python tools/peer_gemm.py [--rows 32,128,512]
      [--threads 2] [--sets tiny,tiny-tp2]

Each weight is created the way vLLM's CPU dispatch makes it
(vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm: create_onednn_mm on the
transposed bf16 weight), copied until the copies fill 512 MiB so that a call reads its
weight from memory, and each call takes the next copy. Prints the median milliseconds
of three passes over the copies, and GFLOP/s, per layer and row count.
"""
import argparse
import statistics
import time

import torch
from vllm import _custom_ops as ops

LAYERS = {  # set -> [(name, n_out, k)], as bf16_gemm_benchmark's kLayers
    "tiny": [("tiny qkv", 2560, 2048), ("tiny o", 2048, 2048),
             ("tiny gate_up", 11264, 2048), ("tiny down", 2048, 5632)],
    "tiny-tp2": [("tp2 qkv", 1280, 2048), ("tp2 o", 2048, 1024),
                 ("tp2 gate_up", 5632, 2048), ("tp2 down", 2048, 2816)],
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="32,128,512", help="row counts M, e.g. 1,32,512")
    parser.add_argument("--threads", type=int, default=2, help="torch/OpenMP threads")
    parser.add_argument("--sets", default="tiny", help="tiny, tiny-tp2 or both")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    print("%-13s %11s %5s %3s | %9s %7s" % ("layer", "n_out x k", "M", "thr", "vLLM ms",
                                            "GFLOP/s"))
    for set_name in args.sets.split(","):
        for name, n_out, k in LAYERS[set_name]:
            copies = max(2, (512 << 20) // (n_out * k * 2))
            handlers = [ops.create_onednn_mm(torch.randn(n_out, k, dtype=torch.bfloat16).t(), 32)
                        for _ in range(copies)]
            for m in rows:
                x = torch.randn(m, k, dtype=torch.bfloat16)
                ops.onednn_mm(handlers[0], x, None)  # first call: the primitive
                times = []
                for _ in range(3):
                    for h in handlers:
                        start = time.perf_counter()
                        ops.onednn_mm(h, x, None)
                        times.append(time.perf_counter() - start)
                ms = statistics.median(times) * 1e3
                print("%-13s %5dx%-5d %5d %3d | %9.3f %7.0f" % (name, n_out, k, m, args.threads,
                                                               ms, 2.0 * m * n_out * k / ms / 1e6))
            del handlers


if __name__ == "__main__":
    main()
