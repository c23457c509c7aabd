"""Prefix caching through the real server (tp 2, 4-token KV blocks).

- A repeated golden prompt reuses all its whole blocks but the last token's, and a prompt
  that continues an earlier generation reuses the blocks that generation computed; both
  still answer Hugging Face's greedy ids and logprobs (tests/data golden.json).
- Concurrent requests sharing a system prompt, and the same requests against a cache so
  small that cached blocks are evicted and sequences preempted, answer exactly what a
  server with --no-prefix-caching answers.
- Usage.cached_prompt_tokens and GetModelInfo's counters say what was reused; a request
  for prompt logprobs computes its whole prompt; no KV block stays held afterwards.
"""
import json
import random

from batching_test import run_concurrently
from harness import Server, stubs

MODEL = "tests/data/models/llama_gqa"
BLOCK = 4
TOLERANCE = 2e-4  # logprobs vs transformers (fp32) and vs the uncached server


def generate(stub, pb, ids, max_tokens, **sampling):
    response = stub.GenerateUnary(pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=ids),
        sampling=pb.SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0,
                                   logprobs=0, **sampling)),
        timeout=300)
    return response


def ids_and_logprobs(response):
    return list(response.token_ids), [lp.logprob for lp in response.logprobs]


def info(stub, pb):
    return stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)


def close(a, b, tolerance=TOLERANCE):
    return len(a) == len(b) and all(abs(x - y) <= tolerance for x, y in zip(a, b))


def check_golden_reuse(stub, pb, model=MODEL, block=BLOCK, tolerance=TOLERANCE):
    """Each golden prompt twice, then continuing its generation, then with prompt
    logprobs, on a server with `block`-token KV blocks; checks the answers, the reuse and
    the counters' growth."""
    def whole_blocks_before_last(n):
        return (n - 1) // block * block

    golden = json.load(open(model + "/golden.json"))
    before = info(stub, pb)
    queried = hits = 0
    for case in golden["greedy"]:
        prompt = golden["prompts"][case["prompt_index"]]
        want_ids, want_lps = case["output_ids"], case["output_logprobs"]
        n = len(want_ids)
        seen_before = info(stub, pb).prefix_cache_hit_tokens
        first = generate(stub, pb, prompt, n)
        queried += len(prompt)
        hits += first.usage.cached_prompt_tokens
        again = generate(stub, pb, prompt, n)
        queried += len(prompt)
        hits += again.usage.cached_prompt_tokens
        assert again.usage.cached_prompt_tokens == whole_blocks_before_last(len(prompt)), (
            case["prompt_index"], again.usage)
        for response in (first, again):
            ids, lps = ids_and_logprobs(response)
            assert ids == want_ids, (case["prompt_index"], ids, want_ids)
            assert close(lps, want_lps, tolerance), (case["prompt_index"], lps, want_lps)
        # A prompt that continues the generation: the blocks the first request computed
        # past its prompt (generated tokens) are reused too.
        k = n // 2
        cont = generate(stub, pb, prompt + want_ids[:k], n - k)
        queried += len(prompt) + k
        hits += cont.usage.cached_prompt_tokens
        assert cont.usage.cached_prompt_tokens == whole_blocks_before_last(len(prompt) + k), (
            case["prompt_index"], cont.usage)
        ids, lps = ids_and_logprobs(cont)
        assert ids == want_ids[k:], (case["prompt_index"], ids, want_ids[k:])
        assert close(lps, want_lps[k:], tolerance), (case["prompt_index"], lps, want_lps[k:])
        if cont.usage.cached_prompt_tokens > 0:
            assert info(stub, pb).prefix_cache_hit_tokens > seen_before
        # Prompt logprobs need every position: nothing is taken from the cache.
        scored = stub.GenerateUnary(pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=prompt),
            sampling=pb.SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0)),
            timeout=300)
        assert scored.usage.cached_prompt_tokens == 0, scored.usage
        assert len(scored.prompt_logprobs) == len(prompt), len(scored.prompt_logprobs)
        assert list(scored.token_ids) == want_ids[:1]
    now = info(stub, pb)
    grew = (now.prefix_cache_queried_tokens - before.prefix_cache_queried_tokens,
            now.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens)
    assert grew == (queried, hits), (now, before, queried, hits)
    assert hits > 0 and now.kv_blocks_in_use == 0 and now.kv_blocks_cached > 0, now
    return hits


def shared_prefix_requests(seed, count, vocab, systems=1):
    rng = random.Random(seed)
    prefixes = [[rng.randrange(vocab) for _ in range(rng.randint(18, 30))] for _ in range(systems)]
    return [(rng.choice(prefixes) + [rng.randrange(vocab) for _ in range(rng.randint(0, 9))],
             rng.randint(1, 12)) for _ in range(count)]


def check_same_as_uncached(cached, uncached, requests, what):
    got = run_concurrently(lambda ids, n: generate(cached[0], cached[1], ids, n), requests)
    reused = 0
    for i, ((ids, n), response) in enumerate(zip(requests, got)):
        want = generate(uncached[0], uncached[1], ids, n)
        assert want.usage.cached_prompt_tokens == 0, want.usage
        a, b = ids_and_logprobs(response), ids_and_logprobs(want)
        assert a[0] == b[0], (what, i, a[0], b[0])
        assert close(a[1], b[1]), (what, i, a[1], b[1])
        reused += response.usage.cached_prompt_tokens
    assert reused > 0, what
    state = info(*cached)
    assert state.kv_blocks_in_use == 0, (what, state)
    print("PASS", what, "reused", reused, "prompt tokens; preemptions", state.preemptions,
          flush=True)


def check_reset_refused(stub, pb):
    """One client's reset would slow every other's prompts: a server not started with
    --allow-reset-prefix-cache refuses it, and its cache stays."""
    import grpc
    cached_before = info(stub, pb).kv_blocks_cached
    assert cached_before > 0
    try:
        stub.ResetPrefixCache(pb.ResetPrefixCacheRequest(), timeout=10)
        raise AssertionError("ResetPrefixCache was served")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, e
        assert "--allow-reset-prefix-cache" in e.details(), e.details()
    assert info(stub, pb).kv_blocks_cached == cached_before


def main():
    pb, pb_grpc = stubs()
    import grpc
    block_args = ["--kv-block-size", str(BLOCK)]
    uncached_server = Server(MODEL, tp=2, extra_args=block_args + ["--no-prefix-caching"])
    cached_server = Server(MODEL, tp=2, extra_args=block_args)
    # 16 blocks of 4 tokens: fewer than two of the longest requests.
    small_server = Server(MODEL, tp=2, extra_args=["--kv-block-size", str(BLOCK), "--kv-blocks",
                                                   "16", "--max-sequences", "3"])
    try:
        uncached = (pb_grpc.InferenceStub(grpc.insecure_channel(uncached_server.address)), pb)
        cached = (pb_grpc.InferenceStub(grpc.insecure_channel(cached_server.address)), pb)
        small = (pb_grpc.InferenceStub(grpc.insecure_channel(small_server.address)), pb)
        vocab = info(*cached).vocab_size

        check_golden_reuse(*cached)
        print("PASS golden reuse", flush=True)
        check_same_as_uncached(cached, uncached, shared_prefix_requests(1, 24, vocab),
                               "one shared system prompt, concurrent")
        check_same_as_uncached(small, uncached, shared_prefix_requests(2, 24, vocab, systems=3),
                               "three system prompts, 16-block cache")
        assert info(*small).preemptions > 0, info(*small)

        state = info(*uncached)
        assert (state.prefix_cache_queried_tokens, state.prefix_cache_hit_tokens,
                state.kv_blocks_cached) == (0, 0, 0), state
        check_reset_refused(*cached)
        print("PASS ResetPrefixCache refused without --allow-reset-prefix-cache", flush=True)
    finally:
        for server in (uncached_server, cached_server, small_server):
            assert server.stop() == 0


if __name__ == "__main__":
    main()
