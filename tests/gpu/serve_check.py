#!/usr/bin/env python3
"""End to end on the GPU: tpserve --device cuda (fp32, tp 1, KV cache sized from
--gpu-memory-fraction, 4-token blocks) on each fixture, driven by tpserve-cli; greedy ids
must equal the golden transformers generations, and again when each prompt comes back
and its whole blocks but the last token's are read from the prefix cache. Runs from the
repo root with gpu_bundle/ built.
   python3 tests/gpu/serve_check.py [FIXTURE ...]   (default: every fixture)"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading

BIN = os.environ.get("TPSERVE_BIN", "gpu_bundle/bin")
DEVICE = os.environ.get("TPSERVE_DEVICE", "cuda")  # cpu: to check this script without a GPU


def serve(model):
    proc = subprocess.Popen(
        [f"{BIN}/tpserve", "--model", model, "--tp", "1", "--device", DEVICE, "--dtype",
         "float32", "--gpu-memory-fraction", "0.05", "--host", "127.0.0.1", "--port", "0",
         "--worker-binary", f"{BIN}/tpserve_worker_cuda", "--start-timeout-s", "120",
         "--kv-block-size", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, found = [], threading.Event()
    address = []

    def pump():
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r" tpserve: serving on (\S+)", line)
            if m:
                address.append(m.group(1))
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    if not found.wait(150) or not address:
        proc.kill()
        raise SystemExit("%s: tpserve did not start:\n%s" % (model, "".join(lines[-20:])))
    return proc, address[0], lines


def main():
    fixtures = sys.argv[1:] or sorted(glob.glob("tests/data/models/*/golden.json"))
    fixtures = [os.path.dirname(f) if f.endswith(".json") else f for f in fixtures]
    failures = 0
    for model in fixtures:
        golden = json.load(open(os.path.join(model, "golden.json")))
        proc, address, lines = serve(model)
        try:
            # The second pass finds each prompt's blocks in the prefix cache.
            for again in (False, True):
                for case in golden["greedy"]:
                    prompt = golden["prompts"][case["prompt_index"]]
                    out = subprocess.run(
                        [f"{BIN}/tpserve-cli", "--target", address, "--json", "generate",
                         "--token-ids", ",".join(map(str, prompt)), "--max-tokens",
                         str(case["max_new_tokens"]), "--temperature", "0", "--ignore-eos"],
                        capture_output=True, text=True, timeout=60)
                    result = json.loads(out.stdout) if out.stdout else {}
                    got = result.get("token_ids")
                    cached = result.get("usage", {}).get("cached_prompt_tokens")
                    ok = got == case["output_ids"] and (
                        not again or cached == (len(prompt) - 1) // 4 * 4)
                    failures += not ok
                    print(f"{os.path.basename(model)} prompt {case['prompt_index']}"
                          f"{' again (%s cached)' % cached if again else ''}: "
                          f"{'ok' if ok else 'FAIL got %s want %s %s' % (got, case['output_ids'], out.stderr)}")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                failures += 1
                print(f"{model}: tpserve did not exit on SIGTERM")
    print(f"{failures} failed")
    sys.exit(1 if failures else 0)


main()
