"""Multi-host mode on one machine: tpserve --external-workers waits on a TCP control
address, two tpserve_worker processes started separately attach to it with the token
file the server reads too (--worker-token-file), take ranks and serve; greedy ids equal
Hugging Face's. A worker with another token is refused (exit 1, UNAUTHENTICATED) and
takes no rank. A worker that finds the pool full keeps trying and joins the next
generation once a rank is lost. When the server stops, the workers exit.
"""
import os
import subprocess
import time

import grpc

from harness import (WORKER, Server, check_golden_greedy, free_port, health_status, stubs,
                     token_file)

MODEL = "tests/data/models/llama_gqa"


def wait_serving(server):
    for _ in range(600):
        if health_status(server.address) == "SERVING":
            return
        time.sleep(0.1)
    raise AssertionError("not serving again: %r" % server.lines[-10:])


def check_standby(server, stub, pb, control, token, workers):
    """A third worker dials the full pool: refused UNAVAILABLE, it keeps trying (within
    --connect-timeout-s) instead of exiting. Killing a rank ends that generation; the
    survivor, sent Shutdown, is started again (as a cluster would) and, with the standby,
    makes the next one, which serves the golden ids; the standby was never restarted."""
    standby = subprocess.Popen([WORKER, "--frontend", control, "--worker-token-file", token,
                                "--connect-timeout-s", "120"])
    workers.append(standby)
    time.sleep(2)  # several refusals
    assert standby.poll() is None, "the standby worker gave up on a full pool"
    assert health_status(server.address) == "SERVING"
    workers[0].kill()
    workers[0].wait(30)
    assert workers[1].wait(30) == 0  # Shutdown by the lost pool
    workers[1] = subprocess.Popen([WORKER, "--frontend", control, "--worker-token-file", token])
    wait_serving(server)
    check_golden_greedy(stub, pb, MODEL)
    assert standby.poll() is None


def main():
    pb, pb_grpc = stubs()
    control = "127.0.0.1:%d" % free_port()
    token = token_file("worker_token", os.urandom(32).hex())
    server = Server(MODEL, tp=2, until="listening",
                    extra_args=["--external-workers", "--control-address", control,
                                "--worker-token-file", token])
    workers = []
    try:
        assert health_status(server.address) == "NOT_SERVING"
        rogue = subprocess.run(
            [WORKER, "--frontend", control, "--worker-token-file",
             token_file("other_token", os.urandom(32).hex())],
            capture_output=True, text=True, timeout=60)
        assert rogue.returncode == 1 and "UNAUTHENTICATED" in rogue.stderr, rogue
        assert health_status(server.address) == "NOT_SERVING"
        print("PASS a worker with another token is refused", flush=True)
        workers = [subprocess.Popen([WORKER, "--frontend", control, "--worker-token-file", token])
                   for _ in range(2)]
        for _ in range(600):
            if any("serving on" in line for line in server.lines):
                break
            time.sleep(0.1)
        assert health_status(server.address) == "SERVING", server.lines
        assert not server.worker_pids(), "external workers must not be the server's children"
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        check_golden_greedy(stub, pb, MODEL)
        print("PASS two external workers attach over TCP and serve golden greedy ids", flush=True)
        check_standby(server, stub, pb, control, token, workers)
        print("PASS a worker that finds the pool full waits, and joins the next generation "
              "when a rank is lost", flush=True)
    finally:
        assert server.stop() == 0
        for w in workers:
            w.wait(30)  # the workers end with the server (Shutdown or a lost stream)
    print("PASS the workers exit when the server stops", flush=True)


if __name__ == "__main__":
    main()
