"""Multi-host mode on one machine: tpserve --external-workers waits on a TCP control
address, two tpserve_worker processes started separately attach to it with the token
file the server reads too (--worker-token-file), take ranks and serve; greedy ids equal
Hugging Face's. A worker with another token is refused (exit 1, UNAUTHENTICATED) and
takes no rank. When the server stops, the workers exit.
"""
import os
import subprocess
import time

import grpc

from harness import (WORKER, Server, check_golden_greedy, free_port, health_status, stubs,
                     token_file)

MODEL = "tests/data/models/llama_gqa"


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
    finally:
        assert server.stop() == 0
        for w in workers:
            w.wait(30)  # the workers end with the server (Shutdown or a lost stream)
    print("PASS the workers exit when the server stops", flush=True)


if __name__ == "__main__":
    main()
