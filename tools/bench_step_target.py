"""Decode pace while a long prompt prefills, with and without --step-time-target-ms.

Run by tools/bench_step_target.sh against a running tpserve (gRPC). D requests decode
(streaming, greedy, EOS ignored); once each has streamed WARMUP tokens, one request with
a LONG-token prompt arrives. Prints, as JSON: the decoders' largest gap between
consecutive tokens (before and after the long prompt's arrival), their mean time per
token after it, and the long request's time to first token.
"""
import json
import sys
import threading
import time

sys.path.insert(0, "tests/e2e")
from harness import stubs  # noqa: E402


def main():
    address, decoders, long_len, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    warmup, decode_tokens = 4, 48
    pb, pb_grpc = stubs()
    import grpc
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.InferenceStub(channel)
    stamps = [[] for _ in range(decoders)]
    warm = threading.Barrier(decoders + 1)

    def decode(i):
        request = pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=[(i * 37 + j * 11) % vocab + 1 for j in range(16)]),
            sampling=pb.SamplingParams(max_tokens=decode_tokens, temperature=0, ignore_eos=True))
        waited = False
        for response in stub.Generate(request, timeout=1800):
            for _ in response.token_ids:
                stamps[i].append(time.monotonic())
            if not waited and len(stamps[i]) >= warmup:
                waited = True
                warm.wait()
        if not waited:
            warm.wait()

    threads = [threading.Thread(target=decode, args=(i,)) for i in range(decoders)]
    for t in threads:
        t.start()
    warm.wait()
    arrival = time.monotonic()
    long_request = pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=[(j * 7919) % vocab + 1 for j in range(long_len)]),
        sampling=pb.SamplingParams(max_tokens=1, temperature=0, ignore_eos=True))
    stub.GenerateUnary(long_request, timeout=1800)
    ttft = time.monotonic() - arrival
    for t in threads:
        t.join()
    gaps_after, tpot = [], []
    for s in stamps:
        after = [b - a for a, b in zip(s, s[1:]) if b > arrival]
        gaps_after += after
        if after:
            tpot.append(sum(after) / len(after))
    print(json.dumps({
        "long_prompt_ttft_s": round(ttft, 2),
        "decode_max_gap_s": round(max(gaps_after), 3),
        "decode_mean_tpot_ms": round(1e3 * sum(tpot) / len(tpot), 1),
    }))


if __name__ == "__main__":
    main()
