"""tpserve --device cpu --dtype bfloat16 (the layers' weights in bf16, fp32 compute) on a
golden fixture at tp 2: it serves, GetModelInfo says bfloat16, and its greedy tokens
agree with the fp32 server's wherever fp32's top-2 logprob gap is wider than bf16's
error could close (the first position closer than GAP ends the comparison: from there
on the two may rightly part). The same for --quantization int8 (int8 weights, one scale
per output channel) with its wider gap, GetModelInfo saying bfloat16 and int8. Then
--dtype auto, the default: a bf16 checkpoint serves
as bfloat16 and an fp32 one as float32, from config.json's dtype or, where the config
has none, from the weights' dtype. In bf16 and int8 mode 32 concurrent greedy requests
each return what they return alone: no kernel's rows depend on the batch; nor on the
rank's compute threads (--cpu-threads-per-rank 3 against 1, at tp 1).
"""
import json
import os
import shutil
import tempfile

from batching_test import check_concurrent_equals_alone
from harness import Server, stubs

MODEL = "tests/data/models/llama_gqa"
PROMPTS = [[1, 5, 9, 14], [3, 3, 7], [11, 2, 8, 4, 6]]
GAP = 0.1  # nats; bf16's relative error on these logits is below 1e-2 (model_golden_test)
INT8_GAP = 0.25  # int8's is below 2.1e-2 there


def greedy(stub, pb, prompt, logprobs):
    r = stub.GenerateUnary(pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=prompt),
        sampling=pb.SamplingParams(max_tokens=16, temperature=0, logprobs=logprobs)),
        timeout=120)
    return list(r.token_ids), r.logprobs


def main():
    pb, pb_grpc = stubs()
    import grpc
    runs = {}
    modes = {"float32": ["--dtype", "float32"], "bfloat16": ["--dtype", "bfloat16"],
             "int8": ["--quantization", "int8"]}
    for mode, args in modes.items():
        server = Server(MODEL, tp=2, extra_args=args)
        try:
            stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
            info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=30)
            assert info.dtype == ("float32" if mode == "float32" else "bfloat16"), info
            assert info.quantization == ("int8" if mode == "int8" else "none"), info
            runs[mode] = [greedy(stub, pb, p, 2) for p in PROMPTS]
            if mode != "float32":  # batching_test checks fp32
                check_concurrent_equals_alone(stub, pb, info.vocab_size)
                print("PASS %s: 32 concurrent greedy requests equal their solo runs" % mode,
                      flush=True)
        finally:
            assert server.stop() == 0
    compared = {mode: agreeing(runs["float32"], runs[mode], gap)
                for mode, gap in (("bfloat16", GAP), ("int8", INT8_GAP))}
    assert compared["bfloat16"] >= 8 and compared["int8"] >= 6, compared
    check_auto(pb, pb_grpc)
    check_thread_counts(pb, pb_grpc, modes)
    print("PASS bf16 and int8 at tp 1 on 3 compute threads a rank give 1 thread's ids and "
          "logprobs exactly", flush=True)
    print("bf16_test: %d bf16 greedy tokens agree with fp32 (gap > %.2f), %d int8 ones "
          "(gap > %.2f); auto follows the checkpoint; PASS"
          % (compared["bfloat16"], GAP, compared["int8"], INT8_GAP))


def check_thread_counts(pb, pb_grpc, modes):
    """--cpu-threads-per-rank splits every kernel's work without moving a bit: a tp 1
    rank on 3 threads answers exactly (ids and logprobs) what it does on 1, in bf16 and
    int8; its log says how many threads it runs."""
    import grpc
    for mode in ("bfloat16", "int8"):
        answers = {}
        for threads in (1, 3):
            server = Server(MODEL, tp=1, extra_args=modes[mode] + [
                "--cpu-threads-per-rank", str(threads)])
            try:
                assert any("compute threads: %d " % threads in line for line in server.lines), (
                    server.lines)
                stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
                answers[threads] = [greedy(stub, pb, p, 5) for p in PROMPTS]
            finally:
                assert server.stop() == 0
        assert answers[1] == answers[3], (mode, answers)


def agreeing(reference, other, gap):
    """How many greedy tokens of `other` were compared with (and equal) `reference`'s,
    up to each prompt's first position where the reference's top-2 gap is below `gap`."""
    compared = 0
    for (ids32, lp32), (ids, _) in zip(reference, other):
        for i, position in enumerate(lp32):
            top = sorted((t.logprob for t in position.top), reverse=True)
            if len(top) < 2 or top[0] - top[1] < gap:
                break
            assert ids[i] == ids32[i], (i, ids32, ids)
            compared += 1
    return compared


def served_dtype(pb, pb_grpc, model):
    import grpc
    server = Server(model, tp=1)  # no --dtype: auto
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        return stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=30).dtype
    finally:
        assert server.stop() == 0


def without_dtype_key(model, tmp):
    """A copy of `model` whose config.json has neither dtype nor torch_dtype."""
    dst = os.path.join(tmp, os.path.basename(model))
    shutil.copytree(model, dst)
    with open(os.path.join(dst, "config.json")) as f:
        config = json.load(f)
    config.pop("dtype", None)
    config.pop("torch_dtype", None)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f)
    return dst


def check_auto(pb, pb_grpc):
    bf16_model = "tests/data/models/llama_bf16_sharded"
    assert served_dtype(pb, pb_grpc, bf16_model) == "bfloat16"
    assert served_dtype(pb, pb_grpc, MODEL) == "float32"
    with tempfile.TemporaryDirectory() as tmp:
        assert served_dtype(pb, pb_grpc, without_dtype_key(bf16_model, tmp)) == "bfloat16"
        assert served_dtype(pb, pb_grpc, without_dtype_key(MODEL, tmp)) == "float32"


if __name__ == "__main__":
    main()
