"""Before the worker pool is ready the server already listens, but health is
NOT_SERVING and generation is UNAVAILABLE; a pool that never becomes ready (here: no
external worker attaches within --start-timeout-s) makes tpserve exit non-zero. Bad
flags exit 2 with the flag named."""
import subprocess

import grpc

from harness import SERVER, Server, health_status, stubs

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


def check_bad_flags():
    for args, message in [([], "--model is required"),
                          (["--model", MODEL, "--port", "0", "--tp", "3"], "heads"),
                          (["--model", MODEL, "--port", "0", "--device", "tpu"], "--device")]:
        out = subprocess.run([SERVER] + args, capture_output=True, text=True, timeout=60)
        assert out.returncode in (1, 2), (args, out.returncode)
        assert message in out.stderr, (args, out.stderr)


def main():
    pb, pb_grpc = stubs()
    check_not_serving_until_ready(pb, pb_grpc)
    print("PASS NOT_SERVING and UNAVAILABLE until the pool is ready; no pool exits 1", flush=True)
    check_bad_flags()
    print("PASS bad flags name the flag", flush=True)


if __name__ == "__main__":
    main()
