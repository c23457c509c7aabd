"""Every golden fixture under tests/data/models, served by tpserve at each tp size its
heads allow (1 to 4), answers `tpserve-cli generate --temperature 0 --json` with
Hugging Face's greedy ids. The goldens are transformers' fp32 computation, so the server
computes in fp32 too (--dtype float32: auto would serve the bf16 fixture in bf16, whose
agreement bf16_test checks where the top-2 gap allows)."""
import glob
import json
import os

from harness import Server, cli


def check_fixture(model, tp):
    golden = json.load(open(os.path.join(model, "golden.json")))
    server = Server(model, tp=tp, extra_args=["--dtype", "float32"])
    try:
        for case in golden["greedy"]:
            prompt = golden["prompts"][case["prompt_index"]]
            rc, out, err = cli(server.address, "generate", "--token-ids",
                               ",".join(map(str, prompt)), "--max-tokens",
                               str(len(case["output_ids"])), "--temperature", "0", "--json")
            assert rc == 0, (model, tp, out, err)
            ids = json.loads(out)["token_ids"]
            assert ids == case["output_ids"], (model, tp, case["prompt_index"], ids)
    finally:
        assert server.stop() == 0


def main():
    models = sorted(glob.glob("tests/data/models/*/golden.json"))
    assert models, "no fixtures"
    for path in models:
        model = os.path.dirname(path)
        for tp in [t for t in json.load(open(path))["tp_sizes"] if 1 <= t <= 4]:
            check_fixture(model, tp)
            print("PASS", model, "tp", tp, flush=True)


if __name__ == "__main__":
    main()
