"""vLLM's CPU linear layers (oneDNN's matmul through vLLM's own binding) beside tpserve's
bf16 GEMM (MatMulBf16, loaded from a shared library) on the TinyLlama shapes that
bf16_gemm_benchmark times, in one process, the calls alternating.

Run it with the Python of the vLLM venv that tools/bench_peers.sh installs, after
`bazel build -c opt //worker/kernels/cpu:libtpserve_bf16_gemm.so`:

  ~/.cache/tpserve-peers/vllm-venv/bin/python tools/peer_gemm.py [--rows 32,128,512]
      [--threads 1] [--sets tiny,tiny-tp2] [--seconds 3]
      [--ours bazel-bin/worker/kernels/cpu/libtpserve_bf16_gemm.so | --ours none]

Each weight is created the way vLLM's CPU dispatch makes it
(vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm: create_onednn_mm on the
transposed bf16 weight) and packed by tpserve from the same bf16 values
(PackedBf16Weight::FromBf16), each copied until the copies fill 512 MiB, so that a call
reads its weight from memory; each call takes the next copy. Each engine gets its own
input and output types: vLLM bf16 in and out, tpserve fp32 in and out (as a rank calls
it). The two are called in turn, which one goes first alternating (on a shared host the
second of two back-to-back calls tends to run faster), for at least --seconds per row
count. Prints each engine's median milliseconds and GFLOP/s and the median over the pairs
of tpserve's speed over vLLM's ("ours/vLLM"; above 1: tpserve faster), with its 10th and
90th percentiles. With --ours none, vLLM alone.

Both libraries run OpenMP teams (torch's bundled libgomp and Debian's): with --threads
above 1, OMP_WAIT_POLICY=passive is set before either starts, so that one's idle team does
not spin on the cores while the other's works.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

LAYERS = {  # set -> [(name, n_out, k)], as bf16_gemm_benchmark's kLayers
    "tiny": [("tiny qkv", 2560, 2048), ("tiny o", 2048, 2048),
             ("tiny gate_up", 11264, 2048), ("tiny down", 2048, 5632)],
    "tiny-tp2": [("tp2 qkv", 1280, 2048), ("tp2 o", 2048, 1024),
                 ("tp2 gate_up", 5632, 2048), ("tp2 down", 2048, 2816)],
}
COPY_BYTES = 512 << 20  # per engine


def load_ours(path):
    lib = ctypes.CDLL(path)
    lib.tpserve_bf16_gemm_new.restype = ctypes.c_void_p
    lib.tpserve_bf16_gemm_new.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                          ctypes.c_int32]
    lib.tpserve_bf16_gemm_free.argtypes = [ctypes.c_void_p]
    lib.tpserve_bf16_gemm_threads.argtypes = [ctypes.c_int32]
    lib.tpserve_bf16_gemm_run.restype = ctypes.c_int32
    lib.tpserve_bf16_gemm_run.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p,
                                          ctypes.c_int64, ctypes.c_void_p]
    return lib


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="32,128,512", help="row counts M, e.g. 1,32,512")
    parser.add_argument("--threads", type=int, default=1, help="threads for each engine")
    parser.add_argument("--sets", default="tiny", help="tiny, tiny-tp2 or both")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="least time per row count (at least 12 pairs)")
    parser.add_argument("--ours", default="bazel-bin/worker/kernels/cpu/libtpserve_bf16_gemm.so",
                        help="tpserve's GEMM library, or none for vLLM alone")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    if args.threads > 1:
        os.environ["OMP_WAIT_POLICY"] = "passive"  # read when each OpenMP runtime starts
    import torch  # after OMP_WAIT_POLICY
    from vllm import _custom_ops as ops

    ours = None
    if args.ours != "none":
        if not os.path.exists(args.ours):
            sys.exit("%s not found: bazel build -c opt //worker/kernels/cpu:"
                     "libtpserve_bf16_gemm.so, or --ours none" % args.ours)
        ours = load_ours(os.path.abspath(args.ours))
        ours.tpserve_bf16_gemm_threads(args.threads)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = [int(r) for r in args.rows.split(",")]
    print("%-13s %11s %5s %3s | %9s %7s | %9s %7s | %9s %11s" % (
        "layer", "n_out x k", "M", "thr", "vLLM ms", "GFLOP/s", "ours ms", "GFLOP/s",
        "ours/vLLM", "p10 - p90"))
    for set_name in args.sets.split(","):
        for name, n_out, k in LAYERS[set_name]:
            copies = max(2, COPY_BYTES // (n_out * k * 2))
            w = torch.randn(n_out, k, dtype=torch.bfloat16)
            handlers = [ops.create_onednn_mm(w.clone().t(), 32) for _ in range(copies)]
            packed = None
            if ours is not None:
                bits = w.view(torch.int16).contiguous()
                packed = ours.tpserve_bf16_gemm_new(bits.data_ptr(), n_out, k, copies)
                if not packed:
                    sys.exit("tpserve_bf16_gemm_new failed (see above)")
            for m in rows:
                x32 = torch.randn(m, k, dtype=torch.float32)
                x16 = x32.to(torch.bfloat16)
                y32 = torch.empty(m, n_out, dtype=torch.float32)

                def run_vllm(copy):
                    ops.onednn_mm(handlers[copy], x16, None)

                def run_ours(copy):
                    if ours.tpserve_bf16_gemm_run(packed, copy, x32.data_ptr(), m,
                                                  y32.data_ptr()) != 0:
                        sys.exit("tpserve_bf16_gemm_run failed (see above)")

                engines = [run_vllm] + ([run_ours] if ours is not None else [])
                for run in engines:  # first calls: primitives, scratch buffers
                    run(0)
                if ours is not None:  # both compute the same product, to bf16's precision
                    ref = x16.float() @ w.float().t()
                    scale = ref.abs().max().item()
                    for engine, y in (("vLLM", ops.onednn_mm(handlers[0], x16, None).float()),
                                      ("tpserve", y32)):
                        err = (y - ref).abs().max().item()
                        if err > 0.02 * scale:
                            sys.exit("%s: %s's product is off by %g (of %g)" % (name, engine,
                                                                             err, scale))
                times = [[] for _ in engines]
                start = time.perf_counter()
                i = 0
                while i < 12 or time.perf_counter() - start < args.seconds:
                    copy = (i + 1) % copies
                    order = range(len(engines)) if i % 2 == 0 else reversed(range(len(engines)))
                    for e in order:
                        t0 = time.perf_counter()
                        engines[e](copy)
                        times[e].append(time.perf_counter() - t0)
                    i += 1
                flop = 2.0 * m * n_out * k
                line = "%-13s %5dx%-5d %5d %3d | %9.3f %7.0f" % (
                    name, n_out, k, m, args.threads, statistics.median(times[0]) * 1e3,
                    flop / statistics.median(times[0]) / 1e9)
                if ours is not None:
                    ratios = [v / o for v, o in zip(times[0], times[1])]
                    line += " | %9.3f %7.0f | %8.2fx %5.2f-%.2f" % (
                        statistics.median(times[1]) * 1e3,
                        flop / statistics.median(times[1]) / 1e9, statistics.median(ratios),
                        percentile(ratios, 0.1), percentile(ratios, 0.9))
                print(line, flush=True)
            del handlers
            if packed:
                ours.tpserve_bf16_gemm_free(packed)


if __name__ == "__main__":
    main()
