"""1,000 concurrent Server-Sent Events streams on tpserve --http-port, 30% of whose
clients disconnect after their first event, against the real server (tp 2, the demo
model).

Every stream kept gets its events to `data: [DONE]` with finish_reason "length"; the
server never needs more than a few dozen threads for them (a thread per stream would be
a thousand); and afterwards nothing is left held: no KV block in use, nothing running or
waiting (GetModelInfo), the metrics count 700 OK and 300 CANCELLED calls, and the
server's open file descriptors are back near where they started. The server then still
answers. The client is asyncio on raw sockets, so it needs no thousand threads either;
it raises its own file-descriptor limit (tpserve raises its own to the hard limit).
Then `tpserve-cli bench --backend openai` times the same API as another engine's would
be (--vocab-size, no gRPC --target reachable) and counts every token, and a "model" the
server does not serve fails each request.
"""
import asyncio
import json
import os
import random
import resource
import time

from harness import CLI, Server, metric_value, scrape_metrics, stubs

MODEL = "models/demo"
STREAMS = 1000
DISCONNECT_SHARE = 0.3
MAX_TOKENS = 12
DISCONNECT_MAX_TOKENS = 400
MAX_SERVER_THREADS = 64  # workers, gRPC and HTTP pools; a thread per stream would be 1000+


def count(path):
    return len(os.listdir(path))


async def one_stream(port, index, disconnect, stats):
    # A stream that will go away asks for far more tokens than the rest, so that it cannot
    # have finished (and count as OK) before the server notices the client has gone.
    body = json.dumps({"prompt": "And the %d" % index,
                       "max_tokens": DISCONNECT_MAX_TOKENS if disconnect else MAX_TOKENS,
                       "ignore_eos": True, "stream": True, "temperature": 0.7,
                       "seed": index}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: load\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"text/event-stream" in head.lower(), head
    data = b""
    events = []
    while b"data: [DONE]" not in data:
        # Chunked framing: a size line, the data, CRLF.
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            break
        data += (await reader.readexactly(size + 2))[:-2]
        while b"\n\n" in data and not data.startswith(b"data: [DONE]"):
            event, data = data.split(b"\n\n", 1)
            events.append(json.loads(event[len(b"data: "):]))
            if disconnect:
                writer.close()  # the client goes away mid-stream
                stats["disconnected"] += 1
                return
    writer.close()
    assert events and events[-1]["choices"][0]["finish_reason"] == "length", events[-1:]
    stats["completed"] += 1
    stats["events"] += len(events)


async def run_all(port, server_pid, stats):
    random.seed(7)
    disconnects = set(random.sample(range(STREAMS), int(STREAMS * DISCONNECT_SHARE)))
    tasks = [asyncio.create_task(one_stream(port, i, i in disconnects, stats))
             for i in range(STREAMS)]

    async def sample_threads():
        while not all(t.done() for t in tasks):
            stats["max_threads"] = max(stats["max_threads"], count("/proc/%d/task" % server_pid))
            stats["max_fds"] = max(stats["max_fds"], count("/proc/%d/fd" % server_pid))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample_threads())
    results = await asyncio.gather(*tasks, return_exceptions=True)
    await sampler
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]


def bench(port, *args):
    import subprocess
    out = subprocess.run([CLI, "--target", "127.0.0.1:1", "--json", "bench", "--backend",
                          "openai", "--openai-url", "http://127.0.0.1:%d/v1" % port,
                          "--vocab-size", "1000", "--num-prompts", "4", "--input-len", "8",
                          "--output-len", "6", "--concurrency", "2"] + list(args),
                         capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads(out.stdout)


def check_bench_without_target(port):
    code, report = bench(port)
    assert code == 0 and report["failed"] == 0, report
    assert report["output_tokens"] == 4 * 6, report
    code, report = bench(port, "--model", "not-served")
    assert code == 1 and report["failed"] == 4, report
    print("openai_load_test: tpserve-cli bench --backend openai --vocab-size counted %d tokens" % (4 * 6))


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The server starts with a soft limit of 512 (prlimit execs it) and must raise it.
    from harness import SERVER, WORKER
    server = Server(argv=["prlimit", "--nofile=512:%d" % max(hard, 4096), SERVER, "--model",
                          MODEL, "--tp", "2", "--device", "cpu", "--host", "127.0.0.1",
                          "--port", "0", "--worker-binary", WORKER, "--kv-blocks", "128",
                          "--http-port", "0", "--http-host", "127.0.0.1", "--max-queue", "2048",
                          "--metrics-port", "0"])
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
        port = server.http_port()
        pid = server.proc.pid
        fds_before = count("/proc/%d/fd" % pid)
        stats = {"completed": 0, "disconnected": 0, "events": 0, "max_threads": 0, "max_fds": 0}
        start = time.monotonic()
        asyncio.run(run_all(port, pid, stats))
        elapsed = time.monotonic() - start
        print("openai_load_test: %d streams in %.1f s: %d completed (%d events), %d "
              "disconnected; server peak %d threads, %d fds (before: %d)" %
              (STREAMS, elapsed, stats["completed"], stats["events"], stats["disconnected"],
               stats["max_threads"], stats["max_fds"], fds_before))
        assert stats["completed"] == STREAMS - int(STREAMS * DISCONNECT_SHARE), stats
        assert stats["max_threads"] <= MAX_SERVER_THREADS, stats
        assert stats["max_fds"] >= STREAMS * 0.9, stats  # the streams really were concurrent

        pb, pb_grpc = stubs()
        import grpc
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        deadline = time.monotonic() + 10
        while True:
            info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
            samples, _ = scrape_metrics(server.metrics_port())
            running = metric_value(samples, "tpserve_requests_running")
            waiting = metric_value(samples, "tpserve_requests_waiting")
            if (info.kv_blocks_in_use == 0 and running == 0 and waiting == 0) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert info.kv_blocks_in_use == 0, info
        assert running == 0 and waiting == 0, (running, waiting)
        ok = metric_value(samples, "tpserve_requests_total", code="OK")
        cancelled = metric_value(samples, "tpserve_requests_total", code="CANCELLED")
        assert ok == STREAMS - int(STREAMS * DISCONNECT_SHARE), (ok, cancelled)
        assert cancelled == int(STREAMS * DISCONNECT_SHARE), (ok, cancelled)
        fds_after = count("/proc/%d/fd" % pid)
        assert fds_after <= fds_before + 8, (fds_before, fds_after)
        # Still serving.
        answer = stub.GenerateUnary(pb.GenerateRequest(
            text="And God said", sampling=pb.SamplingParams(max_tokens=4, temperature=0)),
            timeout=60)
        assert len(answer.token_ids) == 4, answer
        check_bench_without_target(port)
    finally:
        assert server.stop() == 0
    print("openai_load_test: PASS")


if __name__ == "__main__":
    main()
