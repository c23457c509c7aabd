"""tpserve --device cuda end to end, without a GPU: tpserve_worker_emu is the real worker
with its CUDA stack (kernels, cuBLAS calls, the metadata stager, decode graphs, the
device sampler, NCCL between the rank processes) built on the CPU emulator of
testing/cuda_emu. Served at tp 2 in fp32 (and tp 3 where the heads allow), it must
give Hugging Face's greedy ids and logprobs (bf16: teacher-forced logprobs), batch 16 concurrent requests exactly as it
runs them alone, reproduce seeded sampling alone and batched, free KV blocks at a
deadline, reuse cached prefix blocks with the same answers, lose a rank with UNAVAILABLE
and rebuild, and give the same ids with --enforce-eager. What only a GPU checks: the hardware's numerics, and speed."""
import json
import os
import subprocess

import grpc

import batching_test
import parallel_sampling_test
import pool_failure_test
import prefix_cache_test
from e2e_test import check_cli_greedy, check_grpc_stream_logprobs, check_prompt_logprobs
from harness import SERVER, Server, stubs

WORKER_EMU = "worker/rank/tpserve_worker_emu"
# bf16 weights and activations against an fp32 reference: logits within ~1e-2 relative
# (the forward tool's tests), which moves a log-softmax by a few hundredths.
BF16_LOGPROB_TOLERANCE = 0.1


def cuda_argv(model, tp, extra=(), dtype="float32", kv_blocks=128):
    return ([SERVER, "--model", model, "--tp", str(tp), "--device", "cuda", "--dtype", dtype,
             "--host", "127.0.0.1", "--port", "0", "--worker-binary", WORKER_EMU,
             "--max-sequences", "16", "--drain-grace-ms", "20000"] +
            (["--kv-blocks", str(kv_blocks)] if kv_blocks else []) + list(extra))


def cuda_server(model, tp, extra=(), dtype="float32"):
    return Server(argv=cuda_argv(model, tp, extra, dtype))


def check_gpu_memory_fraction(pb, pb_grpc, model):
    """Without --kv-blocks each rank sizes its KV cache from --gpu-memory-fraction of its
    device (an emulated 256 MiB one) less what its weights and activations took, so 0.2
    more of the fraction is 0.2 × 256 MiB more of KV blocks; a fraction that leaves
    nothing stops the start with RESOURCE_EXHAUSTED naming the numbers."""
    device_mb = 256
    os.environ["TPSERVE_EMU_DEVICE_MB"] = str(device_mb)
    try:
        blocks = {}
        for fraction in (0.3, 0.5):
            server = Server(argv=cuda_argv(model, 2, ["--gpu-memory-fraction", str(fraction)],
                                           kv_blocks=None))
            try:
                stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
                info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
                blocks[fraction] = info.kv_blocks_total
                check_cli_greedy(server.address, golden(model))
            finally:
                assert server.stop() == 0
        config = json.load(open(os.path.join(model, "config.json")))
        kv_heads_per_rank = max(config["num_key_value_heads"] // 2, 1)
        # K and V, every layer, 16 slots a block, fp32.
        block_bytes = (2 * config["num_hidden_layers"] * 16 * kv_heads_per_rank *
                       config["head_dim"] * 4)
        want = int(0.2 * (device_mb << 20) / block_bytes)
        got = blocks[0.5] - blocks[0.3]
        assert abs(got - want) <= 1, (blocks, want)
        assert blocks[0.5] * block_bytes <= 0.5 * (device_mb << 20), blocks
        out = subprocess.run(cuda_argv(model, 2, ["--gpu-memory-fraction", "0.001",
                                                  "--start-timeout-s", "60"], kv_blocks=None),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode != 0, out
        assert "gpu memory fraction 0.001" in out.stderr and "RESOURCE_EXHAUSTED" in out.stderr, (
            out.stderr[-2000:])
        return blocks
    finally:
        del os.environ["TPSERVE_EMU_DEVICE_MB"]


def golden(model):
    return json.load(open(os.path.join(model, "golden.json")))


def check_bf16_teacher_forced(stub, pb, g):
    """bf16 (the CUDA default) against HF's fp32 logprobs, teacher-forced so that a flipped
    argmax cannot derail the comparison: the prompt logprobs of prompt + HF's greedy ids
    at the generated positions must be HF's within bf16's error. Returns the worst."""
    worst = 0.0
    for case in g["greedy"]:
        prompt = g["prompts"][case["prompt_index"]]
        response = stub.GenerateUnary(pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=prompt + case["output_ids"]),
            sampling=pb.SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0)),
            timeout=120)
        got = [lp.logprob for lp in response.prompt_logprobs][len(prompt):]
        assert len(got) == len(case["output_logprobs"]), (len(got), case)
        worst = max(worst, max(abs(a - b) for a, b in zip(got, case["output_logprobs"])))
    assert worst < BF16_LOGPROB_TOLERANCE, worst
    return worst


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
        check_prompt_logprobs(stub, pb, model, golden(model))
        print("PASS --device cuda tp 2: greedy ids, streamed and prompt logprobs equal HF's",
              flush=True)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        assert info.device == "cuda" and info.tp == 2, info
        batching_test.check_concurrent_equals_alone(stub, pb, info.vocab_size, count=16)
        print("PASS 16 concurrent greedy requests equal their solo runs", flush=True)
        batching_test.check_seeded_batched(stub, pb, info.vocab_size)
        print("PASS seeded sampling on the device is the same alone and batched", flush=True)
        parallel_sampling_test.check_seeded_n(stub, pb, info.vocab_size)
        print("PASS n = 4 on the device: completion i is seed + i's", flush=True)
        batching_test.check_deadline_frees_blocks(stub, pb)
        print("PASS a deadline mid-stream is DEADLINE_EXCEEDED and frees its blocks", flush=True)
    finally:
        assert server.stop() == 0

    server = cuda_server(model, 2, dtype="bfloat16")
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        worst = check_bf16_teacher_forced(stub, pb, golden(model))
    finally:
        assert server.stop() == 0
    print("PASS bf16 at tp 2: teacher-forced logprobs within %.3f of HF's fp32" % worst,
          flush=True)

    server = cuda_server(model, 2, ["--kv-block-size", "4"])
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        hits = prefix_cache_test.check_golden_reuse(stub, pb, model, block=4)
    finally:
        assert server.stop() == 0
    print("PASS prefix caching on the device: %d prompt tokens reused, HF's ids and logprobs"
          % hits, flush=True)

    server = cuda_server(model, 2, ["--enforce-eager"])
    try:
        check_cli_greedy(server.address, golden(model))
    finally:
        assert server.stop() == 0
    print("PASS --enforce-eager gives the same greedy ids", flush=True)

    blocks = check_gpu_memory_fraction(pb, pb_grpc, model)
    print("PASS --gpu-memory-fraction sizes the KV cache (%s blocks at 0.3 / 0.5 of 256 MiB); "
          "too small a fraction stops the start" % blocks, flush=True)

    pool_failure_test.check_rebuild(pb, pb_grpc, make_server=lambda extra: cuda_server(
        pool_failure_test.MODEL, 2, extra))
    print("PASS a lost CUDA rank: UNAVAILABLE, then a new generation serves", flush=True)


if __name__ == "__main__":
    main()
