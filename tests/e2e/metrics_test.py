"""tpserve --metrics-port: Prometheus's GET /metrics on the real server (tp 2).

The text parses with the official Prometheus client's parser (Debian's
python3-prometheus-client), every family has its type, and after a known mix of calls
(unary and streamed, one refused, one sharing a cached prefix, one cancelled by its
deadline) the counters equal what the clients saw: calls by status code, finished
requests by reason, prompt, generated and cached tokens from the usage, one TTFT and
duration observation per successful call, and the engine's figures as GetModelInfo has
them. Per finished completion, the queue, prefill, decode and length histograms count
each once (their buckets cumulative to +Inf), the length histograms' sums equal the
usage, and the inter-token latency histogram counts every gap after a first token;
tpserve_kv_cache_usage_ratio is in [0, 1] (in_use / total, mid-stream and idle), and
the process_* figures are this server's (RSS over 1 MB, open fds, its start time).
Other paths are 404, other methods 405; a scrape answers within 1 s while 100
idle connections and a slowloris client are open (the times are printed), and those
are dropped within a few seconds; a port already taken stops the start.
"""
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import grpc

from harness import SERVER, WORKER, Server, metric_value as value, scrape_metrics, stubs

MODEL = "tests/data/models/llama_gqa"
IDLE_CONNECTIONS = 100
DROPPED_WITHIN_S = 8  # the server's idle and request timeouts are 5 s
TEST_START = time.time()


def scrape_times(port, count=5):
    """Seconds each of `count` sequential scrapes took."""
    times = []
    for _ in range(count):
        start = time.monotonic()
        scrape_metrics(port)
        times.append(time.monotonic() - start)
    return times


def trickle(sock, stop):
    """A slowloris client: a request head that never ends, a header line each 0.2 s."""
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        while not stop.is_set():
            sock.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.2)
    except OSError:
        pass  # the server closed it


def seconds_until_closed(sock, start):
    """Reads until the server closes `sock`; the seconds from `start`, None if it stays
    open for DROPPED_WITHIN_S."""
    sock.settimeout(max(0.1, start + DROPPED_WITHIN_S - time.monotonic()))
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        return None
    except OSError:
        pass  # reset
    return time.monotonic() - start


def check_idle_connections(port):
    alone = scrape_times(port)
    start = time.monotonic()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10)
            for _ in range(IDLE_CONNECTIONS)]
    slow = socket.create_connection(("127.0.0.1", port), timeout=10)
    stop = threading.Event()
    trickler = threading.Thread(target=trickle, args=(slow, stop))
    trickler.start()
    try:
        time.sleep(0.2)
        crowded = scrape_times(port)
        print("scrape latency (5 scrapes, median / max): alone %.1f / %.1f ms; with %d idle "
              "connections and a slowloris client open %.1f / %.1f ms" % (
                  sorted(alone)[2] * 1e3, max(alone) * 1e3, IDLE_CONNECTIONS,
                  sorted(crowded)[2] * 1e3, max(crowded) * 1e3), flush=True)
        assert max(crowded) < 1, crowded
        dropped_idle = seconds_until_closed(idle[0], start)
        dropped_slow = seconds_until_closed(slow, start)
        assert dropped_idle is not None, "an idle connection stayed open"
        assert dropped_slow is not None, "the slowloris connection stayed open"
        print("idle connection dropped after %.1f s, slowloris after %.1f s" % (
            dropped_idle, dropped_slow), flush=True)
    finally:
        stop.set()
        trickler.join()
        for sock in idle + [slow]:
            sock.close()


def check_histogram(samples, name, count):
    """`name` has `count` observations, cumulative buckets ending at +Inf, sum ≥ 0; its
    sum."""
    buckets = sorted((float(dict(labels)["le"]), v) for (sample, labels), v in samples.items()
                     if sample == name + "_bucket")
    assert len(buckets) > 1 and buckets[-1][0] == float("inf"), (name, buckets)
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), (name, buckets)
    assert buckets[-1][1] == value(samples, name + "_count") == count, (name, buckets, count)
    total = value(samples, name + "_sum")
    assert total >= 0, (name, total)
    return total


def check_per_completion_histograms(samples, usages, early, room):
    """The histograms of finished completions after main's calls: the 4 successful ones
    and the `early` completions of the deadline call that finished by length."""
    finished = sum(v for (name, _), v in samples.items()
                   if name == "tpserve_requests_finished_total")
    assert finished == 4 + early, (finished, early)
    stages = {stage: check_histogram(samples, "tpserve_request_%s_time_seconds" % stage, finished)
              for stage in ("queue", "prefill", "decode")}
    prompt = check_histogram(samples, "tpserve_request_prompt_tokens", finished)
    generated = check_histogram(samples, "tpserve_request_generation_tokens", finished)
    assert prompt == sum(u.prompt_tokens for u in usages) + early * 3 == \
        value(samples, "tpserve_prompt_tokens_total"), (prompt, usages)
    assert generated == sum(u.completion_tokens for u in usages) + early * room == \
        value(samples, "tpserve_generation_tokens_total"), (generated, usages)
    # One token per streamed chunk: each completion's tokens after its first are a gap.
    gaps = check_histogram(samples, "tpserve_inter_token_latency_seconds", generated - finished)
    print("PASS per completion: %d finished, queue %.3f s, prefill %.3f s, decode %.3f s in "
          "all, %d gaps (%.3f s), %d prompt and %d generated tokens" % (
              finished, stages["queue"], stages["prefill"], stages["decode"],
              generated - finished, gaps, prompt, generated), flush=True)


def check_kv_cache_usage(samples):
    ratio = value(samples, "tpserve_kv_cache_usage_ratio")
    assert 0 <= ratio <= 1, ratio
    assert ratio == value(samples, "tpserve_kv_blocks_in_use") / value(
        samples, "tpserve_kv_blocks"), samples


def check_process_metrics(samples, types, server):
    """process_* are the server's own: its RSS as /proc/PID/statm has it, open
    descriptors, CPU time, and a start time within the test's life."""
    for name in ("process_resident_memory_bytes", "process_virtual_memory_bytes",
                 "process_open_fds", "process_max_fds", "process_start_time_seconds"):
        assert types[name] == "gauge", (name, types.get(name))
    assert types["process_cpu_seconds"] == "counter", types  # the parser drops _total
    rss = value(samples, "process_resident_memory_bytes")
    assert rss > 1 << 20, rss
    assert value(samples, "process_virtual_memory_bytes") >= rss
    fds = value(samples, "process_open_fds")
    assert 0 < fds <= value(samples, "process_max_fds"), samples
    cpu = value(samples, "process_cpu_seconds_total")
    assert 0 < cpu < (time.time() - TEST_START) * os.cpu_count(), cpu
    # From /proc/stat's boot time (whole seconds) and the clock ticks since.
    started = value(samples, "process_start_time_seconds")
    assert TEST_START - 60 <= started <= time.time(), (started, TEST_START)
    with open("/proc/%d/statm" % server.proc.pid) as f:
        _, resident_pages = (int(x) for x in f.read().split()[:2])
    page = os.sysconf("SC_PAGE_SIZE")
    assert abs(rss - resident_pages * page) < 256 << 20, (rss, resident_pages * page)
    print("PASS process_*: RSS %.1f MB, %d open fds, started %.1f s into the test" % (
        rss / 1e6, fds, started - TEST_START), flush=True)


def main():
    pb, pb_grpc = stubs()
    server = Server(MODEL, tp=2, extra_args=["--metrics-port", "0", "--kv-block-size", "4"])
    try:
        port = server.metrics_port()
        samples, types = scrape_metrics(port)
        assert value(samples, "tpserve_serving") == 1, samples
        assert types["tpserve_time_to_first_token_seconds"] == "histogram", types
        assert types["tpserve_requests"] == "counter", types  # the parser drops _total
        assert value(samples, "tpserve_kv_blocks") == 128, samples
        info = [k for k in samples if k[0] == "tpserve_info"]
        assert len(info) == 1 and ("tp", "2") in info[0][1] and ("device", "cpu") in info[0][1]

        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        prompt = list(range(3, 23))  # 20 tokens, then one of its own: 5 whole blocks shared
        usages = []
        for i in range(3):
            r = stub.GenerateUnary(pb.GenerateRequest(
                token_ids=pb.TokenIds(ids=prompt + [100 + i]),
                sampling=pb.SamplingParams(max_tokens=5, temperature=0, ignore_eos=True)),
                timeout=120)
            usages.append(r.usage)
        streamed = []
        for response in stub.Generate(pb.GenerateRequest(
                token_ids=pb.TokenIds(ids=[1, 2, 3]),
                sampling=pb.SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)),
                timeout=120):
            if not streamed:
                check_kv_cache_usage(scrape_metrics(port)[0])
            streamed.append(response)
        usages.append(streamed[-1].usage)
        try:
            stub.GenerateUnary(pb.GenerateRequest(
                token_ids=pb.TokenIds(ids=[1, 2]),
                sampling=pb.SamplingParams(max_tokens=4, temperature=-1)), timeout=30)
            raise AssertionError("temperature -1 was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        try:
            # 16 completions up to the context: seconds of work, past a 0.3 s deadline.
            for _ in stub.Generate(pb.GenerateRequest(
                    token_ids=pb.TokenIds(ids=[1, 2, 3]),
                    sampling=pb.SamplingParams(ignore_eos=True, n=16)), timeout=0.3):
                pass
            raise AssertionError("the stream outlived its deadline")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e
        assert sum(u.cached_prompt_tokens for u in usages) == 40, usages  # 2 x 20

        # The server ends the call that passed its deadline at its next look (within
        # 50 ms) or at the engine's next step, and records it as it returns.
        for _ in range(100):
            samples, _ = scrape_metrics(port)
            calls = sum(v for (name, _), v in samples.items() if name == "tpserve_requests_total")
            if value(samples, "tpserve_kv_blocks_in_use") == 0 and calls == 6:
                break
            time.sleep(0.1)
        assert value(samples, "tpserve_kv_blocks_in_use") == 0, samples
        assert value(samples, "tpserve_requests_total", code="OK") == 4, samples
        assert value(samples, "tpserve_requests_total", code="INVALID_ARGUMENT") == 1, samples
        assert value(samples, "tpserve_requests_total", code="DEADLINE_EXCEEDED") == 1, samples
        # Completions of the deadline call that reached the end of the context before the
        # deadline count as finished by length, with all their tokens: on an idle machine
        # the first of them can (each runs alone in the 512-token cache), the rest cannot.
        early = value(samples, "tpserve_requests_finished_total", reason="length") - 4
        assert 0 <= early < 16, samples
        room = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).max_context - 3
        assert value(samples, "tpserve_prompt_tokens_total") == sum(
            u.prompt_tokens for u in usages) + early * 3, samples
        assert value(samples, "tpserve_generation_tokens_total") == sum(
            u.completion_tokens for u in usages) + early * room, samples
        assert value(samples, "tpserve_prompt_tokens_cached_total") == 40, samples
        assert value(samples, "tpserve_time_to_first_token_seconds_count") == 4, samples
        assert value(samples, "tpserve_time_to_first_token_seconds_bucket", le="+Inf") == 4
        assert value(samples, "tpserve_request_duration_seconds_count") == 4, samples
        assert value(samples, "tpserve_time_per_output_token_seconds_count") == 4, samples
        model_info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        assert value(samples, "tpserve_prefix_cache_hit_tokens_total") == \
            model_info.prefix_cache_hit_tokens == 40, (samples, model_info)
        assert value(samples, "tpserve_engine_steps_total") == model_info.engine_steps, samples
        assert value(samples, "tpserve_kv_blocks_cached") == model_info.kv_blocks_cached > 0
        print("PASS /metrics counts every call as its client saw it", flush=True)
        check_per_completion_histograms(samples, usages, early, room)
        check_kv_cache_usage(samples)
        check_process_metrics(samples, types, server)

        try:
            urllib.request.urlopen("http://127.0.0.1:%d/other" % port, timeout=10)
            raise AssertionError("/other answered")
        except urllib.error.HTTPError as e:
            assert e.code == 404, e
        try:
            urllib.request.urlopen(urllib.request.Request(
                "http://127.0.0.1:%d/metrics" % port, data=b"x", method="POST"), timeout=10)
            raise AssertionError("POST answered")
        except urllib.error.HTTPError as e:
            assert e.code == 405, e
        check_idle_connections(port)

        # A second server asked for the same metrics port does not start.
        taken = subprocess.run(
            [SERVER, "--model", MODEL, "--tp", "1", "--device", "cpu", "--host", "127.0.0.1",
             "--port", "0", "--worker-binary", WORKER, "--metrics-port", str(port)],
            capture_output=True, text=True, timeout=120)
        assert taken.returncode == 1 and "--metrics-port" in taken.stderr, (
            taken.returncode, taken.stderr)
        print("PASS 404, 405, scrapes within 1 s beside 100 idle connections and a "
              "slowloris client (both dropped), and a taken --metrics-port exits 1", flush=True)
    finally:
        assert server.stop() == 0
    # Gone with the server.
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


if __name__ == "__main__":
    main()
