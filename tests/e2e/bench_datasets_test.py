"""tpserve-cli bench's datasets and run controls against the real server (the demo model,
tp 2, with its tokenizer), as vllm bench serve users use them:

- --dataset-name sharegpt reads a ShareGPT file (the repo's synthetic one): every request
  is a conversation's first turn, tokenized by the server, asking for its reply's length
  (or --sharegpt-output-len), within vLLM's length rules; bad files are named.
- --random-range-ratio spreads the random dataset's lengths over the asked range.
- --reset-prefix-cache makes a rerun with one seed as cold as the first run (without it
  the rerun hits the prefix cache); the reset-prefix-cache command and POST
  /reset_prefix_cache do the same.
- On a terminal, a progress line is redrawn as requests end; off a terminal, none.
"""
import json
import os
import pty
import subprocess
import urllib.request

import grpc

from harness import CLI, Server, cli, stubs

MODEL = "models/demo"
DATASET = "tests/data/bench/sharegpt_synthetic.json"


def bench(address, *args):
    rc, out, err = cli(address, "bench", "--json", *args)
    assert rc == 0, (args, out, err)
    report = json.loads(out)
    assert report["failed"] == 0, report
    return report


def sharegpt_pairs(stub, pb, max_context):
    """(prompt tokens, reply tokens) of every conversation bench may take from DATASET."""
    pairs = set()
    for entry in json.load(open(DATASET)):
        turns = entry["conversations"]
        if len(turns) < 2:
            continue
        prompt = len(stub.Tokenize(pb.TokenizeRequest(text=turns[0]["value"]), timeout=10).token_ids)
        reply = len(stub.Tokenize(pb.TokenizeRequest(text=turns[1]["value"],
                                                     add_special_tokens=False),
                                  timeout=10).token_ids)
        if 4 <= prompt <= min(1024, max_context) and reply >= 4 and \
                prompt + reply <= min(2048, max_context):
            pairs.add((prompt, reply))
    return pairs


def check_sharegpt(address, stub, pb):
    info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
    pairs = sharegpt_pairs(stub, pb, info.max_context)
    assert len(pairs) > 50, len(pairs)
    report = bench(address, "--dataset-name", "sharegpt", "--dataset-path", DATASET,
                   "--num-prompts", "8", "--concurrency", "8", "--seed", "3")
    assert report["completed"] == 8, report
    got = list(zip(report["input_lens"], report["output_lens"]))
    assert all(pair in pairs for pair in got), (got, sorted(pairs)[:10])
    assert len(set(got)) > 1, got
    assert report["input_tokens"] == sum(report["input_lens"]), report
    # The same seed takes the same conversations; another seed others.
    again = bench(address, "--dataset-name", "sharegpt", "--dataset-path", DATASET,
                  "--num-prompts", "8", "--concurrency", "8", "--seed", "3")
    assert sorted(zip(again["input_lens"], again["output_lens"])) == sorted(got)
    other = bench(address, "--dataset-name", "sharegpt", "--dataset-path", DATASET,
                  "--num-prompts", "8", "--concurrency", "8", "--seed", "4")
    assert sorted(zip(other["input_lens"], other["output_lens"])) != sorted(got)
    fixed = bench(address, "--dataset-name", "sharegpt", "--dataset-path", DATASET,
                  "--num-prompts", "4", "--sharegpt-output-len", "5")
    assert fixed["output_lens"] == [5, 5, 5, 5], fixed

    tmp = os.environ["TEST_TMPDIR"]
    broken = os.path.join(tmp, "broken.json")
    with open(broken, "w") as f:
        f.write('[{"conversations": [{"from": "human", "value": 3}]}]')
    missing = os.path.join(tmp, "missing.json")
    for path, why in ((broken, "conversations[0] must be an object with a string"),
                      (missing, missing)):
        rc, out, err = cli(address, "bench", "--dataset-name", "sharegpt", "--dataset-path", path)
        assert rc == 1 and path in err and why in err, (rc, out, err)
    for args, named in ((["--dataset-name", "sharegpt"], "--dataset-path"),
                        (["--dataset-name", "alpaca"], "--dataset-name"),
                        (["--dataset-path", DATASET], "--dataset-name sharegpt"),
                        (["--random-range-ratio", "1"], "--random-range-ratio")):
        rc, out, err = cli(address, "bench", *args)
        assert rc == 2 and named in err, (args, rc, err)


def check_range_ratio(address, max_context):
    report = bench(address, "--input-len", "20", "--output-len", "10", "--random-range-ratio",
                   "0.5", "--num-prompts", "16", "--concurrency", "16", "--seed", "8")
    assert all(10 <= n <= 30 for n in report["input_lens"]), report["input_lens"]
    assert all(5 <= n <= 15 for n in report["output_lens"]), report["output_lens"]
    assert len(set(report["input_lens"])) > 3 and len(set(report["output_lens"])) > 3, report
    # A range that could not fit the context is refused before anything is sent.
    rc, out, err = cli(address, "bench", "--input-len", str(max_context), "--output-len", "4",
                       "--random-range-ratio", "0.5")
    assert rc == 1 and "max_context" in err, (rc, out, err)


def check_reset(server, stub, pb):
    address = server.address
    run = ["--input-len", "48", "--output-len", "4", "--num-prompts", "4", "--seed", "11"]
    first = bench(address, *run, "--reset-prefix-cache")
    assert first["cached_prompt_tokens"] == 0, first
    warm = bench(address, *run)
    assert warm["cached_prompt_tokens"] > 0, warm
    cold = bench(address, *run, "--reset-prefix-cache")
    assert cold["cached_prompt_tokens"] == 0, cold
    assert stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).kv_blocks_cached > 0
    rc, out, err = cli(address, "reset-prefix-cache", "--json")
    assert rc == 0 and json.loads(out)["blocks_dropped"] > 0, (out, err)
    assert stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).kv_blocks_cached == 0
    # The HTTP API's route, as vLLM's.
    bench(address, *run)
    request = urllib.request.Request("http://127.0.0.1:%d/reset_prefix_cache" % server.http_port(),
                                     data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        assert json.loads(response.read())["blocks_dropped"] > 0
    assert stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).kv_blocks_cached == 0


def on_terminal(args):
    """Runs args with stderr on a pty; (the process, what it drew there)."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=follower, text=True,
                              timeout=120)
        os.close(follower)
        follower = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: no writer left
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return proc, drawn.decode()


def check_progress(address):
    """The progress line is drawn on a terminal (a pty here) and nowhere else."""
    args = [CLI, "--target", address, "bench", "--input-len", "8", "--output-len", "4",
            "--num-prompts", "6"]
    proc, drawn = on_terminal(args)
    assert proc.returncode == 0, proc
    assert "\rbench 6/6 [" in drawn and "100%" in drawn, repr(drawn)
    assert "completed 6" in proc.stdout and "\r" not in proc.stdout, proc.stdout
    plain = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and "\r" not in plain.stderr, plain
    proc, drawn = on_terminal(args + ["--disable-tqdm"])
    assert proc.returncode == 0 and drawn == "", (proc, repr(drawn))


def main():
    pb, pb_grpc = stubs()
    server = Server(MODEL, extra_args=["--allow-reset-prefix-cache", "--http-port", "0",
                                       "--http-host", "127.0.0.1"])
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        max_context = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).max_context
        for name, check in (
                ("sharegpt dataset", lambda: check_sharegpt(server.address, stub, pb)),
                ("random range ratio", lambda: check_range_ratio(server.address, max_context)),
                ("reset prefix cache", lambda: check_reset(server, stub, pb)),
                ("progress on a terminal", lambda: check_progress(server.address))):
            check()
            print("PASS", name, flush=True)
    finally:
        assert server.stop() == 0
    print("bench_datasets_test: ok")


if __name__ == "__main__":
    main()
