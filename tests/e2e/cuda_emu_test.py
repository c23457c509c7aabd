"""tpserve --device cuda end to end, without a GPU: tpserve_worker_emu is the real worker
with its CUDA stack (kernels, cuBLAS calls, the metadata stager, decode graphs, the
device sampler, NCCL between the rank processes) built on the CPU emulator of
worker/kernels/cuda/emu. Served at tp 2 in fp32 (and tp 3 where the heads allow), it must
give Hugging Face's greedy ids and logprobs, batch 16 concurrent requests exactly as it
runs them alone, reproduce seeded sampling alone and batched, free KV blocks at a
deadline, lose a rank with UNAVAILABLE and rebuild, and give the same ids with
--enforce-eager. What only a GPU checks: the hardware's numerics, and speed."""
import json
import os

import grpc

import batching_test
import pool_failure_test
from e2e_test import check_cli_greedy, check_grpc_stream_logprobs
from harness import SERVER, Server, stubs

WORKER_EMU = "worker/tpserve_worker_emu"


def cuda_server(model, tp, extra=()):
    return Server(argv=[SERVER, "--model", model, "--tp", str(tp), "--device", "cuda",
                        "--dtype", "float32", "--host", "127.0.0.1", "--port", "0",
                        "--worker-binary", WORKER_EMU, "--kv-blocks", "128",
                        "--max-sequences", "16", "--drain-grace-ms", "20000"] + list(extra))


def golden(model):
    return json.load(open(os.path.join(model, "golden.json")))


def main():
    pb, pb_grpc = stubs()
    for model, tp in [("tests/data/models/qwen3_qknorm", 2), ("tests/data/models/mistral_swa", 2),
                      ("tests/data/models/odd_vocab_mha", 3)]:
        server = cuda_server(model, tp)
        try:
            check_cli_greedy(server.address, golden(model))
        finally:
            assert server.stop() == 0
        print("PASS --device cuda tp %d: %s greedy ids equal Hugging Face's" % (tp, model),
              flush=True)

    model = "tests/data/models/llama_gqa"
    server = cuda_server(model, 2)
    try:
        check_cli_greedy(server.address, golden(model))
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        check_grpc_stream_logprobs(stub, pb, golden(model))
        print("PASS --device cuda tp 2: greedy ids and streamed logprobs equal HF's", flush=True)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        assert info.device == "cuda" and info.tp == 2, info
        batching_test.check_concurrent_equals_alone(stub, pb, info.vocab_size, count=16)
        print("PASS 16 concurrent greedy requests equal their solo runs", flush=True)
        batching_test.check_seeded_batched(stub, pb, info.vocab_size)
        print("PASS seeded sampling on the device is the same alone and batched", flush=True)
        batching_test.check_deadline_frees_blocks(stub, pb)
        print("PASS a deadline mid-stream is DEADLINE_EXCEEDED and frees its blocks", flush=True)
    finally:
        assert server.stop() == 0

    server = cuda_server(model, 2, ["--enforce-eager"])
    try:
        check_cli_greedy(server.address, golden(model))
    finally:
        assert server.stop() == 0
    print("PASS --enforce-eager gives the same greedy ids", flush=True)

    pool_failure_test.check_rebuild(pb, pb_grpc, make_server=lambda extra: cuda_server(
        pool_failure_test.MODEL, 2, extra))
    print("PASS a lost CUDA rank: UNAVAILABLE, then a new generation serves", flush=True)


if __name__ == "__main__":
    main()
