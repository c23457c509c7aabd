"""tpserve as an operator meets it. Flags (CLI11): --help prints every flag with its
default and exits 0, --version names the release, revision and build, vLLM's serving
flag names and TPSERVE_* environment variables work, the model may be the one positional
argument, --port defaults to 50051, tpserve-cli has a help per command, and a bad flag
gets one precise line and exit 2. Logs (spdlog): every line has a timestamp, a level and
its process (workers by rank), one line per finished request with its figures, a stats
line every --log-stats-interval-s, the drain on SIGTERM, and --log-level filters."""
import os
import re
import subprocess
import time

import grpc

from harness import CLI, SERVER, WORKER, Server, cli, stubs

MODEL = "tests/data/models/llama_gqa"
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (debug|info|warning|error) "
                  r"(tpserve|tpserve_worker|tpserve_worker rank \d+/\d+): \S")


def run(argv, env=None):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def check_help_and_version():
    for binary, name in [(SERVER, "tpserve"), (CLI, "tpserve-cli"), (WORKER, "tpserve_worker")]:
        for flag in ["--help", "-h"]:
            out = run([binary, flag])
            assert out.returncode == 0 and "--version" in out.stdout, (binary, flag, out)
        out = run([binary, "--version"])
        assert out.returncode == 0, out
        assert re.fullmatch(r"%s \d+\.\d+\.\d+ \(git ([0-9a-f]{12}|unknown), (opt|fastbuild|dbg) "
                            r"build, [^)]+\)\n" % name, out.stdout), out.stdout
    usage = run([SERVER, "--help"]).stdout
    for text in ["--port INT=50051", "--tp,--tensor-parallel-size INT=1",
                 "--max-context,--max-model-len INT=0", "--max-sequences,--max-num-seqs INT=64",
                 "--device TEXT=cpu", "[env TPSERVE_TP]", "--log-level TEXT=info"]:
        assert text in usage, (text, usage)
    generate = run([CLI, "generate", "--help"])
    assert generate.returncode == 0 and "--max-tokens" in generate.stdout, generate
    assert "--num-prompts" not in generate.stdout, generate.stdout
    bench = run([CLI, "bench", "--help"]).stdout
    assert "--num-prompts INT=64" in bench and "--system" not in bench, bench


def check_bad_flags():
    env = dict(os.environ, TPSERVE_TP="two")
    for argv, message, environ in [
            ([CLI, "--bogus"], "unknown flag --bogus", None),
            ([CLI, "generate", "--num-prompts", "3"], "unknown flag --num-prompts", None),
            ([CLI, "bench", "--input-len", "x"], "--input-len needs an integer", None),
            ([SERVER, MODEL, "--tp", "x"], "--tp needs an integer", None),
            ([SERVER, MODEL, "--max-model-len", "99999999999999999999"],
             "--max-context needs an integer", None),
            ([SERVER, MODEL], "TPSERVE_TP (--tp) needs an integer", env),
            ([SERVER, MODEL, "--log-level", "loud"], "--log-level must be debug, info", None)]:
        out = run(argv, environ)
        assert out.returncode == 2, (argv, out)
        assert message in out.stderr, (argv, message, out.stderr)
        # One message and a pointer at --help, not every flag.
        assert len(out.stderr.splitlines()) <= 3 and "--help" in out.stderr, out.stderr


def wait_for_line(server, pattern, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for line in list(server.lines):
            if re.search(pattern, line):
                return line
        time.sleep(0.1)
    raise AssertionError("no line matching %r in %r" % (pattern, server.lines[-30:]))


def check_serving_from_vllm_names_and_environment(pb, pb_grpc):
    # Where to serve and which worker binary come from the environment, the rest from
    # vLLM's names, the model as the positional argument.
    saved = dict(os.environ)
    os.environ.update(TPSERVE_HOST="127.0.0.1", TPSERVE_PORT="0", TPSERVE_WORKER_BINARY=WORKER,
                      TPSERVE_KV_BLOCKS="128", TPSERVE_DEVICE="cpu")
    try:
        server = Server(argv=[SERVER, MODEL, "--tensor-parallel-size", "2", "--max-model-len", "256",
                              "--max-num-seqs", "4", "--max-num-batched-tokens", "512",
                              "--served-model-name", "ops-model", "--log-stats-interval-s", "1"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        assert (info.tp, info.max_context, info.max_sequences, info.max_batch_tokens,
                info.model_name, info.kv_blocks_total) == (2, 256, 4, 512, "ops-model", 128), info
        check_request_lines(server, stub, pb)
        wait_for_line(server, r" info tpserve: stats: prompt [0-9.]+ tok/s, generation [0-9.]+ tok/s,"
                              r" running \d+, waiting \d+, KV cache [0-9.]+% \(\d+/128 blocks\)")
        for rank in (0, 1):
            wait_for_line(server, r" info tpserve_worker rank %d/2: ready: \d+ KV blocks" % rank)
        assert server.stop() == 0
        for pattern in [r" info tpserve: SIGTERM: shutting down$",
                        r" info tpserve: draining: health NOT_SERVING, 0 generations in flight",
                        r" info tpserve: stopped$"]:
            wait_for_line(server, pattern)
        odd = [line for line in server.lines if not LINE.match(line)]
        assert not odd, odd
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def check_request_lines(server, stub, pb):
    code, out, err = cli(server.address, "generate", "--token-ids", "1,2,3", "--max-tokens", "4",
                         "--temperature", "0", "--request-id", "ops-1")
    assert code == 0, (out, err)
    wait_for_line(server, r" info tpserve: request \d+ id=ops-1 status=OK completions=1 "
                          r"prompt_tokens=3 cached_tokens=\d+ completion_tokens=4 queue_ms=[0-9.]+ "
                          r"ttft_ms=[0-9.]+ duration_ms=[0-9.]+ finish=length$")
    # A refused request is logged with its status and why; the client's id cannot forge
    # a field or a line.
    try:
        stub.GenerateUnary(pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1]), request_id="x y=1",
                                              sampling=pb.SamplingParams(top_p=2)), timeout=10)
        raise AssertionError("top_p 2 was accepted")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    wait_for_line(server, r" info tpserve: request \d+ id=x\\x20y=1 status=INVALID_ARGUMENT .* "
                          r"error=\".*top_p.*\"$")


def check_log_level():
    # --log-level warning: nothing on stdout; the pool that never comes is an error line.
    out = run([SERVER, MODEL, "--port", "0", "--host", "127.0.0.1", "--external-workers",
               "--start-timeout-s", "2", "--log-level", "warning"])
    assert out.returncode == 1, out
    assert out.stdout == "", out.stdout
    lines = out.stderr.splitlines()
    assert lines and all(LINE.match(line) for line in lines), lines
    assert any(" error tpserve: " in line for line in lines), lines


def main():
    pb, pb_grpc = stubs()
    check_help_and_version()
    check_bad_flags()
    check_serving_from_vllm_names_and_environment(pb, pb_grpc)
    check_log_level()
    print("operability_test: ok")


if __name__ == "__main__":
    main()
