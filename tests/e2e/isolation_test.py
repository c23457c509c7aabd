"""One request cannot hurt another. A request whose parameters could overflow the
logits (repetition_penalty 1e-38) is refused at the edge with its own INVALID_ARGUMENT
while four clients generate beside it, every 0.3 s for 20 s: no bystander call fails and the
worker pool is never rebuilt. And a sequence that fails on the rank itself (here every
logits row is infinite: a final-norm weight of 3e38, finite so the load takes it) ends
alone with INTERNAL naming the cause, while the pool stays up and SERVING."""
import json
import os
import shutil
import struct
import threading
import time

import grpc

from harness import Server, health_status, stubs

MODEL = "tests/data/models/llama_gqa"
SOAK_S = 20.0


def golden_case():
    golden = json.load(open(os.path.join(MODEL, "golden.json")))
    case = golden["greedy"][0]
    return golden["prompts"][case["prompt_index"]], case["output_ids"]


def check_poison_beside_clients(pb, pb_grpc):
    prompt, greedy = golden_case()
    server = Server(MODEL, tp=2)
    try:
        pids = sorted(server.worker_pids())
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        stop = time.time() + SOAK_S
        failures, calls, poisons = [], [0], []
        lock = threading.Lock()

        def client():
            while time.time() < stop:
                try:
                    out = stub.GenerateUnary(pb.GenerateRequest(
                        token_ids=pb.TokenIds(ids=prompt),
                        sampling=pb.SamplingParams(max_tokens=len(greedy), temperature=0,
                                                   ignore_eos=True)), timeout=60)
                    ok = list(out.token_ids) == greedy
                    with lock:
                        calls[0] += 1
                        if not ok:
                            failures.append(("wrong tokens", list(out.token_ids)))
                except grpc.RpcError as e:
                    with lock:
                        failures.append((e.code(), e.details()))

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        while time.time() < stop:
            try:
                stub.GenerateUnary(pb.GenerateRequest(
                    token_ids=pb.TokenIds(ids=prompt),
                    sampling=pb.SamplingParams(max_tokens=8, repetition_penalty=1e-38)),
                    timeout=30)
                poisons.append("accepted")
            except grpc.RpcError as e:
                poisons.append((e.code(), e.details()))
            time.sleep(0.3)
        for t in threads:
            t.join()
        assert not failures, failures[:5]
        assert calls[0] >= 8, calls
        assert len(poisons) >= 10, poisons
        for p in poisons:
            assert p != "accepted" and p[0] == grpc.StatusCode.INVALID_ARGUMENT, p
            assert "sampling.repetition_penalty" in p[1], p
        assert sorted(server.worker_pids()) == pids, "the pool was rebuilt"
        print("  %d bystander calls, %d poison requests refused alone" % (calls[0], len(poisons)))
        # A request_id that would forge a log line is refused by name.
        try:
            stub.GenerateUnary(pb.GenerateRequest(
                token_ids=pb.TokenIds(ids=prompt), request_id="x\ntpserve: forged",
                sampling=pb.SamplingParams(max_tokens=2)), timeout=30)
            raise AssertionError("a request_id with a newline was taken")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            assert "request_id" in e.details(), e.details()
    finally:
        assert server.stop() == 0


def check_rank_failure_of_one_sequence(pb, pb_grpc):
    model = os.path.join(os.environ["TEST_TMPDIR"], "inf_logits")
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(MODEL, model)
    path = os.path.join(model, "model.safetensors")
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        entry = json.loads(f.read(n))["model.norm.weight"]
        f.seek(8 + n + entry["data_offsets"][0])
        f.write(struct.pack("<f", 3e38))
    prompt, _ = golden_case()
    server = Server(model, tp=2)
    try:
        pids = sorted(server.worker_pids())
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        for _ in range(3):
            try:
                stub.GenerateUnary(pb.GenerateRequest(
                    token_ids=pb.TokenIds(ids=prompt), sampling=pb.SamplingParams(max_tokens=4)),
                    timeout=60)
                raise AssertionError("generated from infinite logits")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INTERNAL, e
                assert "not finite" in e.details(), e.details()
        assert health_status(server.address) == "SERVING"
        assert sorted(server.worker_pids()) == pids, "the pool was rebuilt"
    finally:
        assert server.stop() == 0


def main():
    pb, pb_grpc = stubs()
    check_poison_beside_clients(pb, pb_grpc)
    print("PASS poison requests beside four clients: refused alone, no bystander failed",
          flush=True)
    check_rank_failure_of_one_sequence(pb, pb_grpc)
    print("PASS a sequence the rank cannot sample ends alone (INTERNAL); the pool stays",
          flush=True)


if __name__ == "__main__":
    main()
