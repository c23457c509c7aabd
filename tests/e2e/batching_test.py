"""Continuous batching through the real server (tp 2): 32 concurrent greedy requests
each return exactly what they return alone; seeded sampling is reproducible alone and
batched; a deadline mid-stream ends the call with DEADLINE_EXCEEDED and frees its KV
blocks; a full admission queue answers RESOURCE_EXHAUSTED while the server keeps serving.
"""
import random
import threading
import time

import grpc

from harness import Server, stubs

MODEL = "tests/data/models/llama_gqa"


def generate(stub, pb, ids, max_tokens, **sampling):
    response = stub.GenerateUnary(pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=ids),
        sampling=pb.SamplingParams(max_tokens=max_tokens, ignore_eos=True, **sampling)),
        timeout=300)
    return list(response.token_ids)


def run_concurrently(fn, args_list):
    results = [None] * len(args_list)
    errors = []

    def worker(i, args):
        try:
            results[i] = fn(*args)
        except Exception as e:  # reported below with its request
            errors.append((i, e))

    threads = [threading.Thread(target=worker, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def check_concurrent_equals_alone(stub, pb, vocab, count=32):
    rng = random.Random(7)
    requests = [([rng.randrange(vocab) for _ in range(rng.randint(1, 40))], rng.randint(1, 24))
                for _ in range(count)]
    alone = [generate(stub, pb, ids, n, temperature=0) for ids, n in requests]
    together = run_concurrently(lambda ids, n: generate(stub, pb, ids, n, temperature=0), requests)
    for i, (a, b) in enumerate(zip(alone, together)):
        assert a == b, (i, requests[i], a, b)


def check_seeded_batched(stub, pb, vocab):
    rng = random.Random(8)
    requests = [([rng.randrange(vocab) for _ in range(rng.randint(1, 20))], 12, seed)
                for seed in range(12)]

    def sample(ids, n, seed):
        return generate(stub, pb, ids, n, temperature=0.9, top_p=0.95, seed=seed)

    alone = [sample(*r) for r in requests]
    together = run_concurrently(sample, requests)
    assert alone == together, (alone, together)
    assert len({tuple(a) for a in alone}) > 1


def check_deadline_frees_blocks(stub, pb):
    stream = stub.Generate(pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=[1, 2, 3]),
        sampling=pb.SamplingParams(ignore_eos=True)), timeout=0.3)  # up to the context
    try:
        for _ in stream:
            time.sleep(0.05)  # a slow reader: the deadline passes mid-stream
        raise AssertionError("the stream outlived its deadline")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e
    for _ in range(100):
        if stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).kv_blocks_in_use == 0:
            return
        time.sleep(0.05)
    raise AssertionError("KV blocks still in use after the deadline")


def check_preemption_keeps_outputs(pb, pb_grpc):
    """A KV cache too small for the batch (and prefill chunks smaller than the prompts):
    sequences are preempted and recomputed, and seeded sampling with every penalty on
    still gives what each request gives alone — the recomputed tokens stay output for
    the penalties and for the seed's step. The penalties must matter, too."""
    server = Server(MODEL, extra_args=["--kv-blocks", "10", "--kv-block-size", "16",
                                       "--max-batch-tokens", "48"])
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        vocab = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).vocab_size
        rng = random.Random(9)
        requests = [([rng.randrange(vocab) for _ in range(rng.randint(30, 60))], 30, seed)
                    for seed in range(8)]
        penalties = dict(temperature=0.8, top_k=50, presence_penalty=0.6,
                         frequency_penalty=0.4, repetition_penalty=1.3)

        def sample(ids, n, seed):
            return generate(stub, pb, ids, n, seed=seed, **penalties)

        def preemptions():
            return stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).preemptions

        alone = [sample(*r) for r in requests]
        assert preemptions() == 0  # each fits alone
        together = run_concurrently(sample, requests)
        assert preemptions() > 0, "the batch never ran out of KV blocks"
        assert alone == together, (alone, together)
        plain = [generate(stub, pb, ids, n, seed=seed, temperature=0.8, top_k=50)
                 for ids, n, seed in requests]
        assert plain != alone, "the penalties changed nothing"
    finally:
        assert server.stop() == 0


def check_queue_full(pb, pb_grpc):
    server = Server(MODEL, tp=1, extra_args=["--max-sequences", "1", "--max-queue", "1"])
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        codes = []

        def one(i):
            try:
                generate(stub, pb, [1 + i, 2, 3], 64, temperature=0)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())

        run_concurrently(one, [(i,) for i in range(8)])
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes, codes
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
        assert codes.count(grpc.StatusCode.OK) >= 1, codes
        assert len(generate(stub, pb, [4, 5, 6], 4, temperature=0)) == 4  # still serving
    finally:
        assert server.stop() == 0


def main():
    pb, pb_grpc = stubs()
    server = Server(MODEL)
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        vocab = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).vocab_size
        check_concurrent_equals_alone(stub, pb, vocab)
        print("PASS 32 concurrent greedy requests equal their solo runs", flush=True)
        check_seeded_batched(stub, pb, vocab)
        print("PASS seeded sampling is the same alone and batched", flush=True)
        check_deadline_frees_blocks(stub, pb)
        print("PASS a deadline mid-stream is DEADLINE_EXCEEDED and frees its blocks", flush=True)
    finally:
        assert server.stop() == 0
    check_queue_full(pb, pb_grpc)
    print("PASS a full queue is RESOURCE_EXHAUSTED and the server keeps serving", flush=True)
    check_preemption_keeps_outputs(pb, pb_grpc)
    print("PASS preempted and recomputed, seeded sampling with penalties equals solo runs",
          flush=True)


if __name__ == "__main__":
    main()
