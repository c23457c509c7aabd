"""tpserve-cli bench against a server that answers GetModelInfo but never ends a Generate
stream (a fake, Python grpcio): every request fails as DEADLINE_EXCEEDED at --timeout-s
and the bench exits 1 with a report, instead of hanging; the warm-ups are bounded too."""
import json
import subprocess
import threading
import time
from concurrent import futures

import grpc

from harness import CLI, stubs


def main():
    pb, pb_grpc = stubs()
    release = threading.Event()

    class Hanging(pb_grpc.InferenceServicer):
        def GetModelInfo(self, request, context):
            return pb.ModelInfo(model_name="hang", vocab_size=100, max_context=64)

        def Generate(self, request, context):
            release.wait(120)  # until the test ends: no chunk, no end
            return iter(())

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    pb_grpc.add_InferenceServicer_to_server(Hanging(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        start = time.monotonic()
        out = subprocess.run([CLI, "--target", "127.0.0.1:%d" % port, "--timeout-s", "2",
                              "--json", "bench", "--num-prompts", "3", "--concurrency", "3",
                              "--input-len", "4", "--output-len", "4", "--num-warmups", "1"],
                             capture_output=True, text=True, timeout=60)
        took = time.monotonic() - start
        assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
        report = json.loads(out.stdout)
        assert report["failed"] == 3 and report["completed"] == 0, report
        assert report["errors"] == {"DEADLINE_EXCEEDED": 3}, report
        # One warm-up and one round of three, 2 s each.
        assert 3.5 < took < 20, took
        print("PASS hung streams fail at --timeout-s (%.1f s in all)" % took, flush=True)
    finally:
        release.set()
        server.stop(0)


if __name__ == "__main__":
    main()
