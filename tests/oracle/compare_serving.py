"""Serves a fixture with the real tpserve at one tp size and checks that greedy
generation through tpserve-cli returns Hugging Face's greedy ids (golden.json).

  compare_serving.py FIXTURE_DIR --tp N [--bin bazel-bin] [--server-arg ARG]...

--server-arg appends a tpserve flag (a later flag wins), e.g. the CUDA worker on the CPU
emulator: --server-arg=--device=cuda --server-arg=--dtype=float32
--server-arg=--worker-binary=bazel-bin/worker/rank/tpserve_worker_emu

Needs only the Python standard library. Exit status 0 when every greedy case matches.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading


def serve(bin_dir, model, tp, extra):
    proc = subprocess.Popen(
        [os.path.join(bin_dir, "server/tpserve"), "--model", model, "--tp", str(tp),
         "--device", "cpu", "--host", "127.0.0.1", "--port", "0", "--kv-blocks", "256",
         "--worker-binary", os.path.join(bin_dir, "worker/rank/tpserve_worker")] + extra,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        m = re.search(r" tpserve: serving on (\S+)", line)
        if m:
            # Keep reading: the request log would otherwise fill the pipe and block it.
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, m.group(1)
    proc.wait()
    sys.exit("tpserve exited before serving (status %s)" % proc.returncode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--bin", default="bazel-bin")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="one more tpserve flag (repeatable; a later flag wins)")
    args = ap.parse_args()
    golden = json.load(open(os.path.join(args.fixture, "golden.json")))
    proc, address = serve(args.bin, args.fixture, args.tp, args.server_arg)
    failures = 0
    try:
        for case in golden["greedy"]:
            prompt = golden["prompts"][case["prompt_index"]]
            out = subprocess.run(
                [os.path.join(args.bin, "client/tpserve-cli"), "--target", address, "generate",
                 "--token-ids", ",".join(map(str, prompt)), "--max-tokens",
                 str(len(case["output_ids"])), "--temperature", "0", "--json"],
                capture_output=True, text=True)
            ids = json.loads(out.stdout).get("token_ids") if out.returncode == 0 else out.stdout
            if ids != case["output_ids"]:
                failures += 1
                print("prompt %d: served %s, HF %s" % (case["prompt_index"], ids, case["output_ids"]))
    finally:
        proc.terminate()
        proc.wait(60)
    name = os.path.basename(os.path.normpath(args.fixture))
    print("%s tp=%d serving greedy: %s" % (name, args.tp, "FAIL" if failures else "PASS"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
