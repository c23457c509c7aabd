"""Before the worker pool is ready the server already listens, but health is
NOT_SERVING and generation is UNAVAILABLE; a pool that never becomes ready (here: no
external worker attaches within --start-timeout-s) makes tpserve exit non-zero. Bad
flags exit 2 with the flag named. generation_config.json's eos ids end generations (as in
Hugging Face's generate) and its max_new_tokens is the length tpserve-cli's generate
defaults to (else 256, within the context); a broken one stops the start, naming the file
and the key. The pool warms up before it serves (--warmup-tokens). A
checkpoint that would be served wrong does not start: an unknown config.json key, a
tokenizer with ids past the model's vocabulary, tensors config.json does not account for,
a non-finite weight; each names the file and the rule."""
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time

import grpc

from harness import SERVER, HealthWatch, Server, cli, health_status, stubs

MODEL = "tests/data/models/llama_gqa"


def check_not_serving_until_ready(pb, pb_grpc):
    server = Server(MODEL, extra_args=["--external-workers", "--start-timeout-s", "4"],
                    until="listening")
    try:
        assert health_status(server.address) == "NOT_SERVING"
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        try:
            stub.GenerateUnary(pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1])), timeout=10)
            raise AssertionError("generated before the pool was ready")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        assert info.vocab_size == 320 and info.tp == 2, info
        code = server.proc.wait(60)
        assert code == 1, code
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def check_warm_up(pb, pb_grpc):
    """The pool runs its warm-up (two 64-token prompts, two decode steps: four engine
    steps) before health turns SERVING, and leaves no KV block behind; --warmup-tokens 0
    serves cold."""
    for tokens, steps in ((None, 4), ("0", 0)):
        server = Server(MODEL, extra_args=["--warmup-tokens", tokens] if tokens else [])
        try:
            text = "".join(server.lines)
            warmed = text.find("warmed up: a 64-token prefill took ")
            assert (warmed >= 0) == (steps > 0), text
            assert warmed < text.find("serving on"), text
            stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
            info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
            assert (info.engine_steps, info.kv_blocks_in_use, info.kv_blocks_cached) == (
                steps, 0, 0), info
        finally:
            assert server.stop() == 0


def check_bad_flags():
    for args, message in [([], "--model is required"),
                          (["--model", MODEL, "--port", "0", "--tp", "3"], "heads"),
                          (["--model", MODEL, "--port", "0", "--device", "tpu"], "--device"),
                          (["--model", MODEL, "--port", "0", "--max-context", "513"],
                           "--max-context 513 exceeds the model's max_position_embeddings 512")]:
        out = subprocess.run([SERVER] + args, capture_output=True, text=True, timeout=60)
        assert out.returncode in (1, 2), (args, out.returncode)
        assert message in out.stderr, (args, out.stderr)


def model_copy(name, generation_config):
    """MODEL copied with `generation_config` (a dict, or raw text) as its
    generation_config.json."""
    path = os.path.join(os.environ["TEST_TMPDIR"], name)
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(MODEL, path)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        f.write(generation_config if isinstance(generation_config, str)
                else json.dumps(generation_config))
    return path


def generate_with_cli_defaults(server, pb, pb_grpc, prompt):
    """The server's ModelInfo, and `tpserve-cli generate` of `prompt` (greedy, EOS
    ignored) with no --max-tokens, as JSON."""
    info = pb_grpc.InferenceStub(grpc.insecure_channel(server.address)).GetModelInfo(
        pb.GetModelInfoRequest(), timeout=30)
    rc, out, err = cli(server.address, "--json", "generate", "--token-ids",
                       ",".join(map(str, prompt)), "--temperature", "0", "--ignore-eos")
    assert rc == 0, (out, err)
    return info, json.loads(out)


def check_generation_config_eos(pb, pb_grpc):
    golden = json.load(open(os.path.join(MODEL, "golden.json")))
    case = golden["greedy"][0]
    prompt, greedy = golden["prompts"][case["prompt_index"]], case["output_ids"]
    # config.json says eos 2; the generation config adds the third greedy token.
    model = model_copy("eos_model", {"eos_token_id": [2, greedy[2]], "max_new_tokens": 5})
    server = Server(model, tp=1)
    try:
        # max_new_tokens is the length tpserve-cli's generate defaults to.
        info, result = generate_with_cli_defaults(server, pb, pb_grpc, prompt)
        assert info.generation_max_new_tokens == 5, info
        assert result["token_ids"] == greedy[:5], (result, greedy)
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))

        def generate(**extra):
            return stub.GenerateUnary(pb.GenerateRequest(
                token_ids=pb.TokenIds(ids=prompt),
                sampling=pb.SamplingParams(max_tokens=len(greedy), temperature=0, **extra)),
                timeout=60)

        stopped = generate()
        assert list(stopped.token_ids) == greedy[:3], (stopped.token_ids, greedy)
        assert stopped.finish_reason == pb.FINISH_REASON_EOS, stopped
        assert list(generate(ignore_eos=True).token_ids) == greedy
    finally:
        assert server.stop() == 0
    for key, value in (("eos_token_id", "two"), ("max_new_tokens", 0)):
        broken = model_copy("bad_generation_model", {key: value})
        out = subprocess.run([SERVER, "--model", broken, "--port", "0"], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode != 0, out
        assert "generation_config.json" in out.stderr and key in out.stderr, out.stderr
    # Without max_new_tokens generate asks for 256 tokens, or what the context has room
    # for past the prompt: never more than the server accepts.
    server = Server(MODEL, tp=1)
    try:
        info, result = generate_with_cli_defaults(server, pb, pb_grpc, prompt)
        assert info.generation_max_new_tokens == 0, info
        want = min(256, info.max_context - len(prompt))
        assert result["usage"]["completion_tokens"] == want, (result["usage"], want)
    finally:
        assert server.stop() == 0


def copy_model(name, source):
    path = os.path.join(os.environ["TEST_TMPDIR"], name)
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(source, path)
    return path


def edit_config(path, edit):
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    edit(config)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)


def start_fails(model, *messages, tp=1):
    out = subprocess.run([SERVER, "--model", model, "--port", "0", "--tp", str(tp),
                          "--start-timeout-s", "60"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0, (model, out)
    for message in messages:
        assert message in out.stderr, (model, message, out.stderr)


def poison(model, tensor):
    """Writes a NaN into the first element of `tensor` (F32) in model.safetensors."""
    path = os.path.join(model, "model.safetensors")
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        entry = json.loads(f.read(n))[tensor]
        assert entry["dtype"] == "F32", entry
        f.seek(8 + n + entry["data_offsets"][0])
        f.write(struct.pack("<f", float("nan")))


def check_bad_checkpoints():
    unknown = copy_model("unknown_key", MODEL)
    edit_config(unknown, lambda c: c.update(logits_scaling=8.0))
    start_fails(unknown, "config.json", "logits_scaling")

    big_tokenizer = copy_model("big_tokenizer", MODEL)  # vocab_size 320
    shutil.copy("models/demo/tokenizer.json", big_tokenizer)  # ids up to 1023
    start_fails(big_tokenizer, "tokenizer.json has token ids up to 1023",
                "past vocab_size 320", "config.json")

    # Its mlp biases would be served as zeros without the key.
    no_key = copy_model("lost_mlp_bias", "tests/data/models/llama_mlp_bias_gelu")
    edit_config(no_key, lambda c: c.pop("mlp_bias"))
    start_fails(no_key, "does not account for", "mlp.down_proj.bias", tp=2)

    # Served, every request would fail on non-finite logits and take the pool down.
    nan = copy_model("nan_weight", MODEL)
    poison(nan, "model.norm.weight")
    start_fails(nan, "model.norm.weight", "non-finite value (nan) at [0]")


def check_hub_cache_id(pb, pb_grpc):
    """--model org/name is found offline in a Hugging Face hub cache (refs/main ->
    snapshots/<commit>/, whose files link into blobs/), served, and reported by its id."""
    cache = os.path.join(os.environ["TEST_TMPDIR"], "hub")
    repo = os.path.join(cache, "models--tiny-org--llama-gqa")
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = os.path.join(repo, "snapshots", commit)
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(os.path.join(repo, "blobs"))
    os.makedirs(os.path.join(repo, "refs"))
    os.makedirs(snapshot)
    for name in os.listdir(MODEL):
        blob = os.path.join(repo, "blobs", "blob-" + name)
        shutil.copy(os.path.join(MODEL, name), blob)
        os.symlink(os.path.relpath(blob, snapshot), os.path.join(snapshot, name))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)
    os.environ["HF_HUB_CACHE"] = cache
    try:
        server = Server("tiny-org/llama-gqa", tp=2)
        try:
            stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
            info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
            assert info.model_name == "tiny-org/llama-gqa", info
            assert commit in info.model_path, info
            golden = json.load(open(os.path.join(MODEL, "golden.json")))
            case = golden["greedy"][0]
            out = stub.GenerateUnary(pb.GenerateRequest(
                token_ids=pb.TokenIds(ids=golden["prompts"][case["prompt_index"]]),
                sampling=pb.SamplingParams(max_tokens=len(case["output_ids"]), temperature=0,
                                           ignore_eos=True)), timeout=60)
            assert list(out.token_ids) == case["output_ids"], (out.token_ids, case)
        finally:
            assert server.stop() == 0
        missing = subprocess.run([SERVER, "--model", "tiny-org/absent", "--port", "0"],
                                 capture_output=True, text=True, timeout=60)
        assert missing.returncode != 0, missing
        assert "models--tiny-org--absent" in missing.stderr and "HF_HUB_CACHE" in missing.stderr, \
            missing.stderr
    finally:
        del os.environ["HF_HUB_CACHE"]


def check_sigterm_with_a_watch_open(pb, pb_grpc):
    """An open Health.Watch stream does not hold the drain: with nothing in flight,
    SIGTERM exits at once instead of after --drain-grace-ms (20 s here); a Generate call
    in flight still finishes with its tokens."""
    prompt = json.load(open(os.path.join(MODEL, "golden.json")))["prompts"][0]
    server = Server(MODEL, tp=1)
    watch = HealthWatch(server.address)
    deadline = time.time() + 10
    while "SERVING" not in watch.seen and time.time() < deadline:
        time.sleep(0.05)
    assert "SERVING" in watch.seen, watch.seen
    start = time.time()
    assert server.stop() == 0
    took = time.time() - start
    assert took < 5, "exit took %.1f s with a Watch open" % took
    print("  SIGTERM with a Watch open: exit in %.2f s" % took)

    server = Server(MODEL, tp=1)
    watch = HealthWatch(server.address)
    stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
    results = []

    def stream():
        chunks = stub.Generate(pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=prompt),
            sampling=pb.SamplingParams(max_tokens=300, ignore_eos=True, temperature=0)),
            timeout=60)
        n = 0
        try:
            for c in chunks:
                n += len(c.token_ids)
            results.append(("ok", n))
        except grpc.RpcError as e:
            results.append((e.code(), n))

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(0.3)
    server.proc.send_signal(signal.SIGTERM)
    t.join(60)
    assert server.proc.wait(60) == 0
    # The whole completion: the drain waited for it (well inside its grace).
    assert results == [("ok", 300)], results


def check_temporary_folders():
    """The default control socket's tpserve-* folder goes at exit, and a start removes
    those of servers that died (their owner.pid names no live process)."""
    # Short: the socket path inside must fit a Unix socket address (107 bytes).
    tmp = tempfile.mkdtemp(prefix="tps", dir="/tmp")
    stale = os.path.join(tmp, "tpserve-stale1")
    os.makedirs(stale)
    dead = subprocess.Popen(["true"])
    dead.wait()
    with open(os.path.join(stale, "owner.pid"), "w") as f:
        f.write("%d\n" % dead.pid)
    alive = os.path.join(tmp, "tpserve-alive1")
    os.makedirs(alive)
    with open(os.path.join(alive, "owner.pid"), "w") as f:
        f.write("%d\n" % os.getpid())
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = tmp
    try:
        server = Server(MODEL, tp=1)
        ours = [d for d in os.listdir(tmp) if d.startswith("tpserve-")
                and d not in ("tpserve-alive1",)]
        assert len(ours) == 1 and not os.path.exists(stale), os.listdir(tmp)
        assert server.stop() == 0
    finally:
        if old is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = old
    assert sorted(os.listdir(tmp)) == ["tpserve-alive1"], os.listdir(tmp)
    shutil.rmtree(tmp)


def main():
    pb, pb_grpc = stubs()
    check_not_serving_until_ready(pb, pb_grpc)
    print("PASS NOT_SERVING and UNAVAILABLE until the pool is ready; no pool exits 1", flush=True)
    check_warm_up(pb, pb_grpc)
    print("PASS the pool warms up (four steps, no block left) before it serves; "
          "--warmup-tokens 0 serves cold", flush=True)
    check_bad_flags()
    print("PASS bad flags name the flag", flush=True)
    check_generation_config_eos(pb, pb_grpc)
    print("PASS generation_config.json's eos ids end generations and its max_new_tokens is "
          "the CLI's default length; a broken one names itself",
          flush=True)
    check_bad_checkpoints()
    print("PASS checkpoints that would be served wrong do not start, and say why", flush=True)
    check_sigterm_with_a_watch_open(pb, pb_grpc)
    print("PASS an open Health.Watch does not hold SIGTERM's exit; a stream in flight "
          "still finishes", flush=True)
    check_temporary_folders()
    print("PASS the control socket's folder goes at exit; dead servers' folders at start",
          flush=True)
    check_hub_cache_id(pb, pb_grpc)
    print("PASS a hub cache id is served offline from its snapshot; a missing one says where "
          "it looked", flush=True)


if __name__ == "__main__":
    main()
