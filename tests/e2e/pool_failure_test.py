"""A worker rank dying: in-flight requests end UNAVAILABLE and health is NOT_SERVING;
the server then rebuilds its pool (a new generation) and serves again, or, with
--exit-on-pool-failure, exits non-zero."""
import os
import signal
import time

import grpc

from harness import HealthWatch, Server, health_status, stubs

MODEL = "tests/data/models/llama_gqa"


def long_request(pb):
    return pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1, 2, 3]),
                              sampling=pb.SamplingParams(max_tokens=400, ignore_eos=True))


def wait_for(predicate, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def kill_a_worker_mid_stream(server, stub, pb):
    """Returns the status code the in-flight stream ended with."""
    stream = stub.Generate(long_request(pb), timeout=120)
    next(stream)
    pids = server.worker_pids()
    assert len(pids) == 2, pids
    os.kill(pids[1], signal.SIGKILL)
    try:
        for _ in stream:
            pass
    except grpc.RpcError as e:
        return e.code()
    raise AssertionError("the stream finished although a rank died")


def check_rebuild(pb, pb_grpc, make_server=lambda extra: Server(MODEL, extra_args=extra)):
    server = make_server(["--step-timeout-ms", "5000"])
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        # A prompt whose first KV block the prefix cache keeps (16-token blocks).
        prompt = pb.GenerateRequest(token_ids=pb.TokenIds(ids=list(range(5, 25))),
                                    sampling=pb.SamplingParams(max_tokens=4, temperature=0))
        before = stub.GenerateUnary(prompt, timeout=60)
        assert stub.GenerateUnary(prompt, timeout=60).usage.cached_prompt_tokens == 16
        old = set(server.worker_pids())
        watch = HealthWatch(server.address)
        wait_for(lambda: watch.seen == ["SERVING"], 10, "the health watch")
        assert kill_a_worker_mid_stream(server, stub, pb) == grpc.StatusCode.UNAVAILABLE

        def rebuilt():
            return (health_status(server.address) == "SERVING" and
                    len(server.worker_pids()) == 2 and not old & set(server.worker_pids()))

        wait_for(rebuilt, 120, "a new pool generation")
        wait_for(lambda: watch.seen[-1:] == ["SERVING"], 10, "the watch to see SERVING again")
        watch.cancel()
        assert "NOT_SERVING" in watch.seen, watch.seen  # between the loss and the rebuild
        ok = stub.GenerateUnary(pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=[141, 51, 173]),
            sampling=pb.SamplingParams(max_tokens=8, temperature=0)), timeout=60)
        assert list(ok.token_ids) == [185, 264, 15, 239, 185, 230, 260, 122], ok
        # The new ranks' KV cache starts empty, and so does the prefix cache: nothing the
        # lost pool computed is matched.
        after = stub.GenerateUnary(prompt, timeout=60)
        assert after.usage.cached_prompt_tokens == 0, after.usage
        assert list(after.token_ids) == list(before.token_ids), (after, before)
        assert stub.GenerateUnary(prompt, timeout=60).usage.cached_prompt_tokens == 16
    finally:
        assert server.stop() == 0


def check_exit_on_failure(pb, pb_grpc):
    server = Server(MODEL, extra_args=["--exit-on-pool-failure", "--step-timeout-ms", "5000"])
    stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
    assert kill_a_worker_mid_stream(server, stub, pb) == grpc.StatusCode.UNAVAILABLE
    code = server.proc.wait(60)
    assert code not in (0, None), code


def main():
    pb, pb_grpc = stubs()
    check_rebuild(pb, pb_grpc)
    print("PASS a lost rank: UNAVAILABLE, then a new generation serves", flush=True)
    check_exit_on_failure(pb, pb_grpc)
    print("PASS --exit-on-pool-failure exits non-zero", flush=True)


if __name__ == "__main__":
    main()
