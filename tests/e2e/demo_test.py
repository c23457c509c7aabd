"""The text path end to end on the bundled demo model (models/demo, with its own
tokenizer.json): tpserve at tp 2 tokenizes prompts as Hugging Face did, greedy
generation from text reproduces HF's ids and text, streamed text concatenates to the
unary text, stop strings end the request and are not returned, and the CLI refuses
text that is not UTF-8 with a JSON INVALID_ARGUMENT."""
import json

from harness import Server, cli, stubs

MODEL = "models/demo"


def check_samples(address, samples):
    for sample in samples["samples"]:
        rc, out, err = cli(address, "tokenize", sample["prompt"], "--json")
        assert rc == 0 and json.loads(out)["token_ids"] == sample["prompt_ids"], (out, err)
        rc, out, err = cli(address, "generate", sample["prompt"], "--temperature", "0",
                           "--max-tokens", str(samples["max_new_tokens"]), "--json")
        assert rc == 0, (out, err)
        result = json.loads(out)
        assert result["token_ids"] == sample["output_ids"], (sample["prompt"], result)
        assert result["text"] == sample["output_text"], (result["text"], sample["output_text"])
        rc, out, _ = cli(address, "detokenize", ",".join(map(str, sample["output_ids"])))
        assert rc == 0 and out.rstrip("\n") == sample["output_text"], out


def check_stream_and_stop(stub, pb, sample):
    request = pb.GenerateRequest(text=sample["prompt"],
                                 sampling=pb.SamplingParams(max_tokens=32, temperature=0))
    streamed = "".join(chunk.text for chunk in stub.Generate(request, timeout=60))
    assert streamed == sample["output_text"], streamed
    request.sampling.stop.append(",")
    chunks = list(stub.Generate(request, timeout=60))
    text = "".join(chunk.text for chunk in chunks)
    assert chunks[-1].finish_reason == pb.FINISH_REASON_STOP, chunks[-1]
    assert text == sample["output_text"].split(",")[0], text


def check_special_tokens_and_logprob_options(stub, pb, sample):
    """add_special_tokens and skip_special_tokens as Hugging Face has them (BOS <s> = 0,
    EOS </s> = 1 here), and logprobs: unset gives none, 0 the chosen token's alone."""
    ids = sample["prompt_ids"]
    assert ids[0] == 0
    got = stub.Tokenize(pb.TokenizeRequest(text=sample["prompt"]), timeout=10).token_ids
    assert list(got) == ids, got
    got = stub.Tokenize(pb.TokenizeRequest(text=sample["prompt"], add_special_tokens=False),
                        timeout=10).token_ids
    assert list(got) == ids[1:], got
    with_eos = ids + [1]
    text = stub.Detokenize(pb.DetokenizeRequest(token_ids=with_eos), timeout=10).text
    assert text == sample["prompt"], text
    text = stub.Detokenize(pb.DetokenizeRequest(token_ids=with_eos, skip_special_tokens=False),
                           timeout=10).text
    assert text == "<s>" + sample["prompt"] + "</s>", text

    def generate(**sampling):
        return stub.GenerateUnary(pb.GenerateRequest(
            text=sample["prompt"], add_special_tokens=sampling.pop("add_special", True),
            sampling=pb.SamplingParams(max_tokens=4, temperature=0, **sampling)), timeout=60)

    assert generate().usage.prompt_tokens == len(ids)
    assert generate(add_special=False).usage.prompt_tokens == len(ids) - 1
    assert len(generate().logprobs) == 0
    chosen = generate(logprobs=0).logprobs
    assert len(chosen) == 4 and all(not lp.top and lp.logprob < 0 for lp in chosen), chosen
    assert [lp.token_id for lp in chosen] == sample["output_ids"][:4], chosen


def check_invalid_utf8(address):
    rc, out, _ = cli(address, "generate", "ab\udcffc", "--json")
    error = json.loads(out)["error"]
    assert rc != 0 and error["code"] == "INVALID_ARGUMENT", (rc, out)
    assert "valid UTF-8" in error["message"], error


def check_raw_invalid_utf8(address):
    """A client that does not check UTF-8 (raw bytes on the wire) gets INVALID_ARGUMENT
    naming the field, from every RPC that takes text, and the server keeps serving."""
    import grpc
    channel = grpc.insecure_channel(address)
    bad_text = b"\x0a\x03a\xffb"                        # field 1 (text) = "a\xffb"
    bad_stop = b"\x0a\x01a" + b"\x1a\x04" + b"\x52\x02\xc0\xaf"  # sampling.stop = overlong "/"
    cases = [("GenerateUnary", bad_text, "text"), ("Tokenize", bad_text, "text"),
             ("GenerateUnary", bad_stop, "sampling.stop")]
    for method, request, field in cases:
        call = channel.unary_unary("/tpserve.v1.Inference/" + method,
                                   request_serializer=lambda x: x,
                                   response_deserializer=lambda x: x)
        try:
            call(request, timeout=10)
            raise AssertionError("%s accepted invalid UTF-8" % method)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, e)
            assert e.details() == field + " is not valid UTF-8", (method, e.details())
    stream = channel.unary_stream("/tpserve.v1.Inference/Generate",
                                  request_serializer=lambda x: x,
                                  response_deserializer=lambda x: x)
    try:
        list(stream(bad_text, timeout=10))
        raise AssertionError("Generate accepted invalid UTF-8")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e


def main():
    import grpc
    pb, pb_grpc = stubs()
    samples = json.load(open(MODEL + "/samples.json"))
    server = Server(MODEL)
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        check_samples(server.address, samples)
        print("PASS tokenize, greedy text and detokenize equal Hugging Face", flush=True)
        check_stream_and_stop(stub, pb, samples["samples"][0])
        print("PASS streamed text equals the whole; a stop string ends it", flush=True)
        check_special_tokens_and_logprob_options(stub, pb, samples["samples"][0])
        print("PASS add/skip_special_tokens as HF; logprobs unset: none, 0: chosen only",
              flush=True)
        check_invalid_utf8(server.address)
        print("PASS the CLI refuses invalid UTF-8 with INVALID_ARGUMENT", flush=True)
        check_raw_invalid_utf8(server.address)
        check_samples(server.address, samples)
        print("PASS raw invalid UTF-8 is INVALID_ARGUMENT naming the field; still serving",
              flush=True)
    finally:
        assert server.stop() == 0


if __name__ == "__main__":
    main()
