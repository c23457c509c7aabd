"""End-to-end test of tpserve: the real server (--tp 2, CPU, Gloo ranks) on a golden
fixture model, driven by tpserve-cli and by a Python grpcio client: greedy ids and
logprobs equal Hugging Face's, bad requests are INVALID_ARGUMENT naming the field while
the server keeps serving, health is SERVING, cancel frees the KV blocks, SIGTERM exits 0.
"""
import json
import os
import signal
import time

import grpc

from harness import Server, cli, health_status, stubs

MODEL = "tests/data/models/llama_gqa"
LOGPROB_TOLERANCE = 2e-3


def check_health_serving(address):
    assert health_status(address) == "SERVING"
    rc, out, _ = cli(address, "health")
    assert rc == 0 and out.strip() == "SERVING", (rc, out)


def check_cli_greedy(address, golden):
    for case in golden["greedy"]:
        prompt = golden["prompts"][case["prompt_index"]]
        n = len(case["output_ids"])
        rc, out, err = cli(address, "generate", "--token-ids", ",".join(map(str, prompt)),
                           "--max-tokens", str(n), "--temperature", "0", "--json")
        assert rc == 0, (rc, out, err)
        result = json.loads(out)
        assert result["token_ids"] == case["output_ids"], (result, case)
        assert result["finish_reason"] == "length", result
        usage = result["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (len(prompt), n), usage
        # Whole KV blocks an earlier request computed may be reused, never the last token.
        assert 0 <= usage["cached_prompt_tokens"] < len(prompt), usage


def check_grpc_stream_logprobs(stub, pb, golden):
    for case in golden["greedy"]:
        prompt = golden["prompts"][case["prompt_index"]]
        request = pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=prompt),
            sampling=pb.SamplingParams(max_tokens=len(case["output_ids"]), temperature=0,
                                       logprobs=3))
        ids, logprobs, chunks = [], [], list(stub.Generate(request, timeout=120))
        for chunk in chunks:
            ids += list(chunk.token_ids)
            logprobs += [lp.logprob for lp in chunk.logprobs]
            for lp in chunk.logprobs:
                assert len(lp.top) == 3 and lp.top[0].token_id == lp.token_id, lp
        assert ids == case["output_ids"], (ids, case)
        worst = max(abs(a - b) for a, b in zip(logprobs, case["output_logprobs"]))
        assert worst < LOGPROB_TOLERANCE, (logprobs, case["output_logprobs"])
        assert chunks[-1].finish_reason == pb.FINISH_REASON_LENGTH


def bad_requests(pb, vocab, context):
    ids = pb.TokenIds(ids=[1, 2, 3])
    s = pb.SamplingParams
    return [
        ("empty prompt", pb.GenerateRequest(token_ids=pb.TokenIds(ids=[])), "token_ids.ids"),
        ("no prompt", pb.GenerateRequest(), "prompt"),
        ("id beyond vocab", pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1, vocab])),
         "token_ids.ids[1]"),
        ("max_tokens 0", pb.GenerateRequest(token_ids=ids, sampling=s(max_tokens=0)),
         "sampling.max_tokens"),
        ("beyond context", pb.GenerateRequest(token_ids=ids, sampling=s(max_tokens=context)),
         "max_context"),
        ("temperature nan", pb.GenerateRequest(token_ids=ids, sampling=s(temperature=float("nan"))),
         "sampling.temperature"),
        ("negative temperature", pb.GenerateRequest(token_ids=ids, sampling=s(temperature=-1)),
         "sampling.temperature"),
        ("top_p 0", pb.GenerateRequest(token_ids=ids, sampling=s(top_p=0)), "sampling.top_p"),
        ("top_p 1.5", pb.GenerateRequest(token_ids=ids, sampling=s(top_p=1.5)), "sampling.top_p"),
        ("top_k -2", pb.GenerateRequest(token_ids=ids, sampling=s(top_k=-2)), "sampling.top_k"),
        ("min_p 2", pb.GenerateRequest(token_ids=ids, sampling=s(min_p=2)), "sampling.min_p"),
        ("repetition 0", pb.GenerateRequest(token_ids=ids, sampling=s(repetition_penalty=0)),
         "sampling.repetition_penalty"),
        ("presence 3", pb.GenerateRequest(token_ids=ids, sampling=s(presence_penalty=3)),
         "sampling.presence_penalty"),
        ("frequency -3", pb.GenerateRequest(token_ids=ids, sampling=s(frequency_penalty=-3)),
         "sampling.frequency_penalty"),
        ("logprobs 21", pb.GenerateRequest(token_ids=ids, sampling=s(logprobs=21)),
         "sampling.logprobs"),
        ("prompt_logprobs 21", pb.GenerateRequest(token_ids=ids, sampling=s(prompt_logprobs=21)),
         "sampling.prompt_logprobs"),
        ("17 stop strings", pb.GenerateRequest(token_ids=ids, sampling=s(stop=["x"] * 17)),
         "sampling.stop"),
        ("stop id beyond vocab", pb.GenerateRequest(token_ids=ids, sampling=s(stop_token_ids=[vocab])),
         "sampling.stop_token_ids"),
        # The ranks refuse it too: let through, it would take the pool down.
        ("top_k beyond vocab", pb.GenerateRequest(token_ids=ids, sampling=s(top_k=vocab + 1)),
         "sampling.top_k"),
    ]


def check_bad_inputs(stub, pb, info):
    for name, request, field in bad_requests(pb, info.vocab_size, info.max_context):
        for call in (lambda r: list(stub.Generate(r, timeout=30)),
                     lambda r: stub.GenerateUnary(r, timeout=30)):
            try:
                call(request)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, e.code(), e.details())
                assert field in e.details(), (name, e.details())
            else:
                raise AssertionError("%s was accepted" % name)
    try:
        stub.GenerateUnary(pb.GenerateRequest(text="hello"), timeout=30)
        raise AssertionError("a text prompt without tokenizer was accepted")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, e
    ok = stub.GenerateUnary(pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1, 2]),
                                               sampling=pb.SamplingParams(max_tokens=2,
                                                                          ignore_eos=True)),
                            timeout=60)
    assert len(ok.token_ids) == 2, ok


def check_cli_error_json(address):
    rc, out, _ = cli(address, "generate", "--token-ids", "1,2", "--top-p", "1.5", "--json")
    assert rc != 0, out
    error = json.loads(out)["error"]
    assert error["code"] == "INVALID_ARGUMENT" and "sampling.top_p" in error["message"], error


def check_info_and_cancel(stub, pb):
    info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
    assert info.tp == 2 and info.device == "cpu" and info.kv_blocks_total > 0, info
    # What the harness serves: llama_gqa (its directory's name), fp32, --kv-blocks 128
    # of the default 16 tokens, the default step limits, its 512-token context.
    assert info.model_name == "llama_gqa" and info.model_path.endswith(MODEL), info
    assert info.architecture == "LlamaForCausalLM" and info.dtype == "float32", info
    assert (info.kv_blocks_total, info.kv_block_size) == (128, 16), info
    assert (info.max_batch_tokens, info.max_sequences, info.max_context) == (2048, 64, 512), info
    stream = stub.Generate(pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=[1, 2, 3]),
        sampling=pb.SamplingParams(max_tokens=200, ignore_eos=True)), timeout=120)
    next(stream)
    stream.cancel()
    for _ in range(100):
        if stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).kv_blocks_in_use == 0:
            break
        time.sleep(0.05)
    assert stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).kv_blocks_in_use == 0
    return info


def check_seeds(stub, pb):
    """The same seed gives the same tokens; an unset seed is drawn per request."""
    def sample(**seed):
        return list(stub.GenerateUnary(pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=[5, 6, 7]),
            sampling=pb.SamplingParams(max_tokens=16, temperature=1, **seed)),
            timeout=60).token_ids)
    assert sample(seed=42) == sample(seed=42)
    drawn = [sample() for _ in range(3)]
    assert len(set(map(tuple, drawn))) > 1, drawn


def check_prompt_logprobs(stub, pb, model_dir, golden):
    """prompt_logprobs against HF's recorded logits: one entry per prompt token, the first
    with logprob 0 and no alternatives, entry j the log-softmax of position j - 1 at
    prompt token j, with the top 2 alternatives HF's."""
    import numpy
    for i, prompt in enumerate(golden["prompts"]):
        logits = numpy.load(os.path.join(model_dir, "logits_%d.npy" % i)).astype(numpy.float64)
        peak = logits.max(axis=1, keepdims=True)
        want = logits - peak - numpy.log(numpy.exp(logits - peak).sum(axis=1, keepdims=True))
        response = stub.GenerateUnary(pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=prompt),
            sampling=pb.SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=2)),
            timeout=120)
        got = response.prompt_logprobs
        assert [lp.token_id for lp in got] == prompt, (i, [lp.token_id for lp in got])
        assert got[0].logprob == 0 and not got[0].top, got[0]
        for j in range(1, len(prompt)):
            row = want[j - 1]
            assert abs(got[j].logprob - row[prompt[j]]) < LOGPROB_TOLERANCE, (i, j, got[j])
            best = numpy.argsort(-row)[:2]
            assert [t.token_id for t in got[j].top] == list(best), (i, j, got[j].top, best)
            for t in got[j].top:
                assert abs(t.logprob - row[t.token_id]) < LOGPROB_TOLERANCE, (i, j, t)


def check_bench(address):
    for pacing in (["--concurrency", "4"], ["--request-rate", "50"]):
        rc, out, err = cli(address, "bench", "--num-prompts", "8", "--input-len", "8",
                           "--output-len", "8", "--json", *pacing)
        assert rc == 0, (out, err)
        report = json.loads(out)
        assert report["completed"] == 8 and report["failed"] == 0, report
        assert report["output_tokens"] == 64 and report["ttft_ms"]["mean"] > 0, report
    # vllm bench serve's options: warm-ups (not counted), chosen percentiles, goodput under
    # SLOs (one no request can meet, one every request meets), gamma arrivals, the report
    # written to a file as well.
    saved = os.path.join(os.environ["TEST_TMPDIR"], "bench.json")
    rc, out, err = cli(address, "bench", "--num-prompts", "6", "--input-len", "8",
                       "--output-len", "8", "--json", "--num-warmups", "2", "--percentiles",
                       "50,90", "--goodput", "ttft:0.001", "--request-rate", "40",
                       "--burstiness", "0.5", "--save-result", saved)
    assert rc == 0, (out, err)
    report = json.loads(out)
    assert report["completed"] == 6 and report["input_tokens"] == 48, report
    assert report["good_requests"] == 0 and report["request_goodput"] == 0, report
    assert report["total_token_throughput"] > report["output_throughput"], report
    assert set(report["tpot_ms"]) >= {"mean", "median", "std", "p50", "p90", "p99"}, report
    with open(saved) as f:
        assert json.load(f) == report
    rc, out, err = cli(address, "bench", "--num-prompts", "2", "--input-len", "8",
                       "--output-len", "4", "--json", "--goodput", "e2el:600000,ttft:600000")
    assert rc == 0 and json.loads(out)["good_requests"] == 2, (out, err)
    for bad, named in ((["--percentiles", "0"], "--percentiles"),
                       (["--goodput", "itl:5"], "--goodput"), (["--burstiness", "0"], "--burstiness")):
        rc, out, err = cli(address, "bench", "--num-prompts", "1", *bad)
        assert rc == 2 and named in err, (bad, rc, err)


def check_reflection(address):
    """Server reflection lists the services (raw bytes: Debian has no grpc_reflection)."""
    channel = grpc.insecure_channel(address)
    call = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
    list_services = b"\x3a\x00"  # ServerReflectionRequest{list_services: ""}
    response = next(iter(call(iter([list_services]), timeout=10)))
    for name in (b"tpserve.v1.Inference", b"grpc.health.v1.Health"):
        assert name in response, response


def check_drain(server, stub, pb):
    stream = stub.Generate(pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=[1, 2, 3]),
        sampling=pb.SamplingParams(max_tokens=100, ignore_eos=True)), timeout=120)
    first = next(stream)
    server.proc.send_signal(signal.SIGTERM)
    chunks = [first] + list(stream)
    assert sum(len(c.token_ids) for c in chunks) == 100, len(chunks)
    assert chunks[-1].finish_reason == pb.FINISH_REASON_LENGTH
    assert server.proc.wait(60) == 0


def check_drain_past_grace(pb, pb_grpc):
    """A request still running when the drain's grace ends finishes with
    FINISH_REASON_CANCELLED and its usage, not an error; the server exits 0."""
    server = Server(MODEL, extra_args=["--drain-grace-ms", "0"])
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        stream = stub.Generate(pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=[1, 2, 3]),
            sampling=pb.SamplingParams(ignore_eos=True)), timeout=120)  # up to the context
        first = next(stream)
        server.proc.send_signal(signal.SIGTERM)
        chunks = [first] + list(stream)
        tokens = sum(len(c.token_ids) for c in chunks)
        assert chunks[-1].finish_reason == pb.FINISH_REASON_CANCELLED, chunks[-1]
        assert chunks[-1].usage.completion_tokens == tokens, (chunks[-1].usage, tokens)
        assert chunks[-1].usage.prompt_tokens == 3, chunks[-1].usage
        assert tokens < 512 - 3, tokens  # the context (max_position_embeddings)
        assert server.proc.wait(60) == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def main():
    golden = json.load(open(os.path.join(MODEL, "golden.json")))
    pb, pb_grpc = stubs()
    server = Server(MODEL)
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        checks = [
            ("(d) health SERVING after start", lambda: check_health_serving(server.address)),
            ("(a) CLI greedy == golden", lambda: check_cli_greedy(server.address, golden)),
            ("(b) gRPC stream logprobs ~ golden", lambda: check_grpc_stream_logprobs(stub, pb, golden)),
            ("prompt logprobs ~ golden logits", lambda: check_prompt_logprobs(
                stub, pb, MODEL, golden)),
            ("info and cancel", lambda: check_info_and_cancel(stub, pb)),
            ("(c) bad inputs INVALID_ARGUMENT", lambda: check_bad_inputs(
                stub, pb, stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10))),
            ("CLI --json error", lambda: check_cli_error_json(server.address)),
            ("seeds: fixed repeat, unset drawn", lambda: check_seeds(stub, pb)),
            ("CLI bench", lambda: check_bench(server.address)),
            ("reflection lists the services", lambda: check_reflection(server.address)),
            ("(d) still SERVING", lambda: check_health_serving(server.address)),
            ("SIGTERM lets in-flight requests finish, exits 0", lambda: check_drain(
                server, stub, pb)),
        ]
        for name, check in checks:
            check()
            print("PASS", name, flush=True)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    check_drain_past_grace(pb, pb_grpc)
    print("PASS past the drain's grace, in-flight requests finish CANCELLED with usage",
          flush=True)


if __name__ == "__main__":
    main()
