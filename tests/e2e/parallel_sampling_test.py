"""SamplingParams.n through the real server (tp 2, 4-token KV blocks).

- Greedy with n = 4: every completion is Hugging Face's greedy generation (golden.json),
  and completions 1..3 take the prompt's whole blocks from the prefix cache.
- Seeded sampling with n = 4 and seed s: completion i is exactly what one request with
  seed s + i returns; Generate's interleaved chunks, put together by index, equal
  GenerateUnary's choices; each completion ends once, with its usage.
- tpserve-cli generate --n prints every completion (--json: "choices"); --stream with
  --n > 1 and an n past 16 are refused, naming the flag and the field.
"""
import json

import grpc

from harness import Server, cli, stubs
from prefix_cache_test import close

MODEL = "tests/data/models/llama_gqa"


def request(pb, ids, max_tokens, **sampling):
    return pb.GenerateRequest(token_ids=pb.TokenIds(ids=ids), sampling=pb.SamplingParams(
        max_tokens=max_tokens, ignore_eos=True, **sampling))


def check_greedy_n(stub, pb):
    golden = json.load(open(MODEL + "/golden.json"))
    case = max(golden["greedy"], key=lambda c: len(golden["prompts"][c["prompt_index"]]))
    prompt = golden["prompts"][case["prompt_index"]]
    response = stub.GenerateUnary(request(pb, prompt, len(case["output_ids"]), temperature=0,
                                          logprobs=0, n=4), timeout=300)
    assert len(response.choices) == 4 and not response.token_ids, response
    for i, choice in enumerate(response.choices):
        assert choice.index == i, choice
        assert list(choice.token_ids) == case["output_ids"], (i, choice.token_ids)
        lps = [lp.logprob for lp in choice.logprobs]
        assert close(lps, case["output_logprobs"]), lps
        assert choice.usage.prompt_tokens == len(prompt), choice.usage
    cached = [c.usage.cached_prompt_tokens for c in response.choices]
    assert cached[1:] == [(len(prompt) - 1) // 4 * 4] * 3, cached


def check_seeded_n(stub, pb, vocab):
    prompt = [(7 * i + 3) % vocab for i in range(13)]
    sampling = dict(temperature=0.9, top_p=0.95)
    alone = [list(stub.GenerateUnary(request(pb, prompt, 10, seed=100 + i, **sampling),
                                     timeout=300).token_ids) for i in range(4)]
    assert len({tuple(a) for a in alone}) > 1, alone  # the seeds matter
    unary = stub.GenerateUnary(request(pb, prompt, 10, seed=100, n=4, **sampling), timeout=300)
    assert [list(c.token_ids) for c in unary.choices] == alone, (unary, alone)
    streamed = {i: [] for i in range(4)}
    ends = {i: 0 for i in range(4)}
    for chunk in stub.Generate(request(pb, prompt, 10, seed=100, n=4, **sampling), timeout=300):
        assert ends[chunk.index] == 0, "a chunk after completion %d ended" % chunk.index
        streamed[chunk.index] += list(chunk.token_ids)
        if chunk.finish_reason:
            ends[chunk.index] += 1
            assert chunk.usage.completion_tokens == 10, chunk.usage
    assert [streamed[i] for i in range(4)] == alone, (streamed, alone)
    assert list(ends.values()) == [1, 1, 1, 1], ends


def check_cli(address):
    rc, out, err = cli(address, "generate", "--token-ids", "1,2,3,4,5", "--max-tokens", "3",
                       "--temperature", "0", "--n", "3", "--json")
    assert rc == 0, (rc, out, err)
    choices = json.loads(out)["choices"]
    assert len(choices) == 3 and all(c["token_ids"] == choices[0]["token_ids"] for c in choices)
    assert all(c["usage"]["completion_tokens"] == 3 for c in choices), choices
    rc, out, err = cli(address, "generate", "--token-ids", "1,2,3", "--n", "2", "--stream")
    assert rc == 2 and "--stream" in err, (rc, out, err)
    rc, out, err = cli(address, "generate", "--token-ids", "1,2,3", "--n", "17", "--json")
    assert rc == 1 and "INVALID_ARGUMENT" in out and "sampling.n" in out, (rc, out, err)


def main():
    pb, pb_grpc = stubs()
    server = Server(MODEL, tp=2, extra_args=["--kv-block-size", "4"])
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        check_greedy_n(stub, pb)
        print("PASS n = 4 greedy: each completion is HF's, three from the prefix cache",
              flush=True)
        vocab = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).vocab_size
        check_seeded_n(stub, pb, vocab)
        print("PASS n = 4 seeded: completion i is seed + i's; streamed equals unary", flush=True)
        check_cli(server.address)
        print("PASS tpserve-cli --n", flush=True)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        assert info.kv_blocks_in_use == 0, info
    finally:
        assert server.stop() == 0


if __name__ == "__main__":
    main()
