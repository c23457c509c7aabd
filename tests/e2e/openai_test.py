"""tpserve --http-port with the real `openai` Python SDK (tp 2, the demo model, Qwen2.5's
real chat template, the hermes tool-call parser, an API key).

The SDK is installed from PyPI into a venv of this test's own (OPENAI_VERSION, cached
under /tmp between runs; Debian's grpcio and protobuf come in through
--system-site-packages), and the script re-runs itself there.

Checked: /v1/models; completions and chat, whole and streamed (the streamed text equals
the whole), with usage (stream_options.include_usage); greedy token ids over HTTP equal
gRPC GenerateUnary's for the same prompt, and the gRPC Chat RPC answers the same chat
with the same text; n > 1 and seed reproducibility; logprobs in each endpoint's format;
stop strings; tools reaching the template (/tokenize counts them) and tool_choice
errors; errors as the SDK's exception classes with their status codes and the
parameter named (400, 401, 404); /health and /metrics on the same port; and a client
that disconnects mid-stream frees its KV blocks (GetModelInfo reads zero blocks in use).
Then, on a model scripted to answer with a Hermes tool call or with <think> reasoning
(scripted_model.py): tool_calls whole and streamed as deltas (finish_reason
"tool_calls"), the call and its result sent back, reasoning_content whole and
streamed, and the same call through the gRPC Chat RPC and `tpserve-cli chat`.
"""
import hashlib
import json
import os
import time
import urllib.error
import urllib.request

from pypi_venv import reexec_in_venv

OPENAI_VERSION = "3.57.0"
reexec_in_venv("openai", ["openai==" + OPENAI_VERSION], "openai")

import grpc  # noqa: E402
import openai  # noqa: E402

from harness import Server, stubs  # noqa: E402

MODEL = "models/demo"
TEMPLATE = "tests/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja"
KEY = "openai-test-key-" + hashlib.sha256(b"tpserve").hexdigest()[:16]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def stream_text(stream):
    """The concatenated text, finish reasons and the usage chunk of a streamed answer."""
    text, finish, usage = {}, {}, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            piece = c.text if hasattr(c, "text") else (c.delta.content or "")
            text[c.index] = text.get(c.index, "") + piece
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    return text, finish, usage


def check_basics(client, base):
    models = client.models.list()
    assert [m.id for m in models.data] == ["demo"], models
    whole = client.completions.create(model="demo", prompt="And God said", max_tokens=16,
                                      temperature=0)
    assert whole.object == "text_completion" and whole.usage.completion_tokens == 16, whole
    assert whole.choices[0].finish_reason == "length"
    text, finish, usage = stream_text(client.completions.create(
        model="demo", prompt="And God said", max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert text == {0: whole.choices[0].text}, (text, whole)
    assert finish == {0: "length"} and usage.completion_tokens == 16, (finish, usage)
    assert usage.prompt_tokens == whole.usage.prompt_tokens

    messages = [{"role": "system", "content": "You answer in the words of the Bible."},
                {"role": "user", "content": "Who made the light?"}]
    chat = client.chat.completions.create(model="demo", messages=messages, max_tokens=20,
                                          temperature=0)
    assert chat.object == "chat.completion", chat
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content
    streamed, finish, usage = stream_text(client.chat.completions.create(
        model="demo", messages=messages, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert streamed == {0: chat.choices[0].message.content}, (streamed, chat)
    assert usage.total_tokens == chat.usage.total_tokens, (usage, chat.usage)
    print("openai_test: models, completions and chat (whole = streamed) ok")
    return messages, chat


def check_same_as_grpc(client, address, messages, chat):
    pb, pb_grpc = stubs()
    stub = pb_grpc.InferenceStub(grpc.insecure_channel(address))
    metadata = [("authorization", "Bearer " + KEY)]
    http = client.completions.create(model="demo", prompt="In the beginning", max_tokens=24,
                                     temperature=0, extra_body={"return_token_ids": True})
    ids = http.choices[0].model_extra["token_ids"]
    g = stub.GenerateUnary(pb.GenerateRequest(
        text="In the beginning", sampling=pb.SamplingParams(max_tokens=24, temperature=0)),
        metadata=metadata, timeout=60)
    assert list(g.token_ids) == ids, (list(g.token_ids), ids)
    assert g.text == http.choices[0].text
    request = pb.ChatRequest(sampling=pb.SamplingParams(max_tokens=20, temperature=0))
    for m in messages:
        request.messages.add(role=m["role"], content=m["content"])
    answer = stub.ChatUnary(request, metadata=metadata, timeout=60)
    assert answer.content == chat.choices[0].message.content, (answer.content, chat)
    print("openai_test: greedy ids over HTTP == gRPC Generate; gRPC Chat == HTTP chat")
    return stub, metadata, pb


def check_sampling(client):
    a = client.completions.create(model="demo", prompt="And the LORD", max_tokens=12, n=3,
                                  temperature=1.0, seed=1234)
    b = client.completions.create(model="demo", prompt="And the LORD", max_tokens=12, n=3,
                                  temperature=1.0, seed=1234)
    assert len(a.choices) == 3 and [c.index for c in a.choices] == [0, 1, 2]
    assert [c.text for c in a.choices] == [c.text for c in b.choices], (a, b)
    assert a.usage.completion_tokens == 36
    chat_a = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=10, n=2, seed=7)
    chat_b = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=10, n=2, seed=7)
    assert [c.message.content for c in chat_a.choices] == [c.message.content for c in chat_b.choices]

    lp = client.completions.create(model="demo", prompt="And God said", max_tokens=5,
                                   temperature=0, logprobs=2)
    logprobs = lp.choices[0].logprobs
    assert len(logprobs.tokens) == 5 and len(logprobs.token_logprobs) == 5, logprobs
    assert all(x <= 0 for x in logprobs.token_logprobs)
    assert "".join(logprobs.tokens) == lp.choices[0].text
    assert logprobs.text_offset[0] == 0 and all(len(t) >= 2 for t in logprobs.top_logprobs)
    chat_lp = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Hi"}],
                                             max_tokens=4, temperature=0, logprobs=True,
                                             top_logprobs=3)
    content = chat_lp.choices[0].logprobs.content
    assert len(content) == chat_lp.usage.completion_tokens, content
    assert all(len(c.top_logprobs) == 3 and c.logprob <= 0 for c in content), content

    greedy = client.completions.create(model="demo", prompt="And God said", max_tokens=16,
                                       temperature=0).choices[0].text
    stop = greedy.split()[2]  # a word the greedy text reaches
    stopped = client.completions.create(model="demo", prompt="And God said", max_tokens=16,
                                        temperature=0, stop=[stop])
    assert stopped.choices[0].finish_reason == "stop", stopped
    assert stopped.choices[0].text == greedy[:greedy.index(stop)], (stopped, greedy, stop)
    print("openai_test: n, seed, logprobs and stop ok")


def post(url, body, key=KEY):
    """POSTs raw bytes (or a JSON value); returns (status, body bytes)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Authorization": "Bearer " + key,
                                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def check_tools(client, base):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    without = json.loads(post(base + "/tokenize", {"messages": messages})[1])
    with_tools = json.loads(post(base + "/tokenize", {"messages": messages, "tools": TOOLS})[1])
    assert with_tools["count"] > without["count"] + 20, (without, with_tools)
    answer = client.chat.completions.create(model="demo", messages=messages, tools=TOOLS,
                                            max_tokens=8, temperature=0)
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls"), answer
    # A conversation with a tool call and its result renders and runs.
    history = messages + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}]
    client.chat.completions.create(model="demo", messages=history, tools=TOOLS, max_tokens=4)
    try:
        client.chat.completions.create(model="demo", messages=messages, tools=TOOLS, max_tokens=4,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
        raise AssertionError("an unknown function was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "tool_choice", e.body
    print("openai_test: tools reach the template; tool_choice checked")


def check_errors(client, base):
    cases = [
        (lambda: client.completions.create(model="demo", prompt="x", temperature=-1),
         openai.BadRequestError, 400, "temperature"),
        (lambda: client.completions.create(model="demo", prompt="x", max_tokens=100000),
         openai.BadRequestError, 400, "max_tokens"),
        (lambda: client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "x"}],
                                                top_p=0), openai.BadRequestError, 400, "top_p"),
        (lambda: client.completions.create(model="gpt-5", prompt="x"), openai.NotFoundError,
         404, "model"),
        (lambda: openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0)
         .completions.create(model="demo", prompt="x"), openai.AuthenticationError, 401, None),
    ]
    for call, kind, status, param in cases:
        try:
            call()
            raise AssertionError("accepted: expected %s" % kind.__name__)
        except kind as e:
            assert e.status_code == status, (e.status_code, e.body)
            if param:
                assert e.body["param"] == param, e.body
            assert e.body["message"], e.body
    status, body = post(base + "/v1/completions", b"{oops")
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error", body
    with urllib.request.urlopen(base + "/health", timeout=10) as response:
        assert response.status == 200
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert "tpserve_generation_tokens_total" in metrics, metrics[:300]
    print("openai_test: errors carry OpenAI's objects and statuses")


def check_disconnect(client, stub, metadata, pb):
    for endpoint in ("completions", "chat"):
        if endpoint == "completions":
            stream = client.completions.create(model="demo", prompt="And", max_tokens=900,
                                               stream=True, extra_body={"ignore_eos": True})
        else:
            stream = client.chat.completions.create(
                model="demo", messages=[{"role": "user", "content": "Tell me everything."}],
                max_tokens=900, stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        for _ in range(3):
            next(chunks)
        in_use = stub.GetModelInfo(pb.GetModelInfoRequest(), metadata=metadata).kv_blocks_in_use
        assert in_use > 0, in_use
        stream.close()  # the client goes away mid-stream
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if stub.GetModelInfo(pb.GetModelInfoRequest(), metadata=metadata).kv_blocks_in_use == 0:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("KV blocks still held after the client left (%s)" % endpoint)
    print("openai_test: a client that disconnects frees its KV blocks")


def check_scripted_model(key_file):
    """Tool calls and reasoning, from a model scripted to answer with them
    (scripted_model.py), through the SDK, the gRPC Chat RPC and tpserve-cli chat."""
    import scripted_model
    from harness import cli
    model = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "scripted_model")
    scripted_model.make(model)
    server = Server(model, tp=2, extra_args=[
        "--http-port", "0", "--http-host", "127.0.0.1", "--chat-template", TEMPLATE,
        "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
        "--api-key-file", key_file])
    try:
        base = "http://127.0.0.1:%d" % server.http_port()
        client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=120)
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        whole = client.chat.completions.create(model="scripted_model", messages=messages,
                                               tools=TOOLS, temperature=0)
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls", whole
        assert choice.message.content is None, whole
        call = choice.message.tool_calls[0]
        assert call.type == "function" and call.id.startswith("call_"), call
        assert call.function.name == "get_weather", call
        assert json.loads(call.function.arguments) == {"city": "Paris"}, call

        ids, names, arguments, finish = set(), set(), "", None
        for chunk in client.chat.completions.create(model="scripted_model", messages=messages,
                                                    tools=TOOLS, stream=True):
            for c in chunk.choices:
                for d in c.delta.tool_calls or []:
                    assert d.index == 0, d
                    if d.id:
                        ids.add(d.id)
                    if d.function.name:
                        names.add(d.function.name)
                    arguments += d.function.arguments or ""
                finish = c.finish_reason or finish
        assert len(ids) == 1 and names == {"get_weather"}, (ids, names)
        assert json.loads(arguments) == {"city": "Paris"} and finish == "tool_calls"

        # The call and its result go back; the template renders them.
        followup = messages + [choice.message.model_dump(exclude_none=True),
                               {"role": "tool", "tool_call_id": call.id, "content": "Sunny"}]
        again = client.chat.completions.create(model="scripted_model", messages=followup,
                                               tools=TOOLS)
        assert again.choices[0].finish_reason == "tool_calls", again

        # Reasoning: a prefill ending in "!" makes the model think aloud.
        think = client.chat.completions.create(
            model="scripted_model", messages=[{"role": "user", "content": "Think."},
                                              {"role": "assistant", "content": "!"}],
            extra_body={"continue_final_message": True, "add_generation_prompt": False})
        message = think.choices[0].message
        assert message.model_extra["reasoning_content"].strip() == "Let me think.", message
        assert message.content.strip() == "Done.", message
        reasoning, content = "", ""
        for chunk in client.chat.completions.create(
                model="scripted_model", messages=[{"role": "user", "content": "Think."},
                                                  {"role": "assistant", "content": "!"}],
                stream=True, extra_body={"continue_final_message": True,
                                         "add_generation_prompt": False}):
            for c in chunk.choices:
                reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
                content += c.delta.content or ""
        assert reasoning == message.model_extra["reasoning_content"], reasoning
        assert content == message.content, content

        # The gRPC Chat RPC and the CLI parse the same call.
        pb, pb_grpc = stubs()
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        request = pb.ChatRequest(tools=[pb.Tool(name="get_weather",
                                                parameters_json=json.dumps(TOOLS[0]["function"]["parameters"]))])
        request.messages.add(role="user", content="What is the weather in Paris?")
        answer = stub.ChatUnary(request, metadata=[("authorization", "Bearer " + KEY)], timeout=60)
        assert answer.finish_reason == pb.FINISH_REASON_TOOL_CALLS, answer
        assert answer.tool_calls[0].name == "get_weather", answer
        tools_file = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "tools.json")
        with open(tools_file, "w") as f:
            json.dump(TOOLS, f)
        code, out, err = cli(server.address, "--api-key-file", key_file, "--json", "chat",
                             "Weather in Paris?", "--tools-file", tools_file)
        assert code == 0, (code, out, err)
        printed = json.loads(out)
        assert printed["finish_reason"] == "tool_calls", printed
        assert json.loads(printed["tool_calls"][0]["arguments"]) == {"city": "Paris"}, printed
    finally:
        assert server.stop() == 0
    print("openai_test: tool calls and reasoning parsed (SDK whole and streamed, gRPC Chat, CLI)")


def check_drain(client, server):
    """SIGTERM with a stream in flight: the stream still ends with its finish_reason and
    [DONE] (the SDK sees a complete stream), new requests get 503, and tpserve exits 0."""
    import threading
    stream = client.completions.create(model="demo", prompt="And", max_tokens=600,
                                       stream=True, extra_body={"ignore_eos": True})
    chunks = iter(stream)
    next(chunks)
    exit_code = []
    stopper = threading.Thread(target=lambda: exit_code.append(server.stop()))
    stopper.start()
    finish = None
    for chunk in chunks:
        finish = chunk.choices[0].finish_reason or finish
    assert finish in ("length", "abort"), finish
    stopper.join()
    assert exit_code == [0], exit_code
    print("openai_test: a drain finishes the HTTP stream in flight (finish_reason %s)" % finish)


def main():
    key_file = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "openai_keys")
    with open(key_file, "w") as f:
        f.write(KEY + "\n")
    server = Server(MODEL, tp=2, extra_args=[
        "--http-port", "0", "--http-host", "127.0.0.1", "--chat-template", TEMPLATE,
        "--tool-call-parser", "hermes", "--api-key-file", key_file, "--max-context", "1024"])
    try:
        base = "http://127.0.0.1:%d" % server.http_port()
        client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=120)
        messages, chat = check_basics(client, base)
        stub, metadata, pb = check_same_as_grpc(client, server.address, messages, chat)
        check_sampling(client)
        check_tools(client, base)
        check_errors(client, base)
        check_disconnect(client, stub, metadata, pb)
        check_drain(client, server)
    finally:
        if server.proc.poll() is None:
            assert server.stop() == 0
    check_scripted_model(key_file)
    print("openai_test: PASS")


if __name__ == "__main__":
    main()
