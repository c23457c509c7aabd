"""A mixed load on one small server (tp 2, 24 KV blocks of 4 tokens, 6 sequences at a
time, prefix caching on), all at once: greedy requests over three shared system prompts,
some asking for n = 2 or 3 completions, streams the client cancels after their first
chunk, calls whose deadline passes mid-generation, and bad requests. Every call that
succeeds answers exactly what a roomy server with --no-prefix-caching answers for it
alone; the others end with their own status (CANCELLED, DEADLINE_EXCEEDED,
INVALID_ARGUMENT) and no other call notices; afterwards no KV block is held, nothing is
running or waiting, /metrics counts every call, and the server still serves.
"""
import random
import threading

import grpc

from harness import Server, metric_value, scrape_metrics, stubs

MODEL = "tests/data/models/llama_gqa"


def make_calls(vocab):
    rng = random.Random(11)
    systems = [[rng.randrange(vocab) for _ in range(rng.randint(12, 20))] for _ in range(3)]
    calls = []
    for i in range(48):
        prompt = rng.choice(systems) + [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]
        kind = ["greedy", "greedy", "greedy", "n", "cancel", "deadline", "bad"][i % 7]
        calls.append({"kind": kind, "prompt": prompt, "max_tokens": rng.randint(2, 10),
                      "n": rng.randint(2, 3) if kind == "n" else 1})
    return calls


def request(pb, call):
    sampling = pb.SamplingParams(max_tokens=call["max_tokens"], temperature=0, ignore_eos=True,
                                 n=call["n"])
    if call["kind"] == "bad":
        sampling.temperature = -1
    if call["kind"] in ("cancel", "deadline"):
        sampling.ClearField("max_tokens")  # up to the context: still running when it ends
    return pb.GenerateRequest(token_ids=pb.TokenIds(ids=call["prompt"]), sampling=sampling)


def run(stub, pb, call):
    """("OK", [ids per completion]) or (status code name, None)."""
    try:
        if call["kind"] == "cancel":
            stream = stub.Generate(request(pb, call), timeout=120)
            next(stream)
            stream.cancel()
            for _ in stream:
                pass
            return "OK", None  # finished before the cancel reached it
        if call["kind"] == "deadline":
            for _ in stub.Generate(request(pb, call), timeout=0.5):
                pass
            return "OK", None
        response = stub.GenerateUnary(request(pb, call), timeout=300)
        choices = response.choices or [response]
        return "OK", [list(c.token_ids) for c in choices]
    except grpc.RpcError as e:
        return e.code().name, None


def main():
    pb, pb_grpc = stubs()
    small = Server(MODEL, tp=2, extra_args=["--kv-blocks", "24", "--kv-block-size", "4",
                                            "--max-sequences", "6", "--metrics-port", "0"])
    reference = Server(MODEL, tp=2, extra_args=["--no-prefix-caching"])
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(small.address))
        ref = pb_grpc.InferenceStub(grpc.insecure_channel(reference.address))
        port = small.metrics_port()
        vocab = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).vocab_size
        calls = make_calls(vocab)
        results = [None] * len(calls)

        def worker(i):
            results[i] = run(stub, pb, calls[i])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        want = {"greedy": {"OK"}, "n": {"OK"}, "cancel": {"CANCELLED", "OK"},
                "deadline": {"DEADLINE_EXCEEDED", "OK"}, "bad": {"INVALID_ARGUMENT"}}
        compared = 0
        for i, (call, (code, ids)) in enumerate(zip(calls, results)):
            assert code in want[call["kind"]], (i, call["kind"], code)
            if ids is None:
                continue
            alone = ref.GenerateUnary(request(pb, call), timeout=300)
            expected = [list(c.token_ids) for c in (alone.choices or [alone])]
            assert ids == expected, (i, call, ids, expected)
            compared += 1
        assert compared == sum(c["kind"] in ("greedy", "n") for c in calls), compared
        print("PASS %d calls at once: %d answers equal the uncached server's, the rest "
              "ended with their own status" % (len(calls), compared), flush=True)

        def idle(m):
            return all(metric_value(m, name) == 0 for name in (
                "tpserve_kv_blocks_in_use", "tpserve_requests_running", "tpserve_requests_waiting"))

        for _ in range(100):
            m, _ = scrape_metrics(port)
            if idle(m) and sum(v for (name, _), v in m.items()
                               if name == "tpserve_requests_total") == len(calls):
                break
            threading.Event().wait(0.1)
        assert idle(m), m
        # A call that ends as its client gives up may have finished on the server just
        # before: the codes of those can differ by side, their number cannot.
        def counted(*codes):
            return sum(metric_value(m, "tpserve_requests_total", code=c) or 0 for c in codes)

        def seen(*codes):
            return sum(1 for code, _ in results if code in codes)

        assert counted("INVALID_ARGUMENT") == seen("INVALID_ARGUMENT"), m
        ended = ("OK", "CANCELLED", "DEADLINE_EXCEEDED")
        assert counted(*ended) == seen(*ended), m
        assert metric_value(m, "tpserve_preemptions_total") > 0, m  # the cache was really short
        after = stub.GenerateUnary(pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=[141, 51, 173]),
            sampling=pb.SamplingParams(max_tokens=8, temperature=0)), timeout=60)
        assert list(after.token_ids) == [185, 264, 15, 239, 185, 230, 260, 122], after
        print("PASS afterwards: no block held, nothing queued, /metrics agrees, still serving",
              flush=True)
    finally:
        for server in (small, reference):
            assert server.stop() == 0


if __name__ == "__main__":
    main()
