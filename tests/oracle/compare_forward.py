#!/usr/bin/env python3
"""Compare logits from the tpserve forward tool with a golden fixture.

Needs only numpy (no torch / transformers).

Mode 1, files you already produced (one .npy per prompt, in prompt order, or
one file with --prompt-index):

  compare_forward.py tests/data/models/llama_gqa ours_0.npy ours_1.npy ...
  compare_forward.py tests/data/models/llama_gqa --prompt-index 2 ours.npy

Mode 2, run the tool itself on every prompt of the fixture:

  compare_forward.py tests/data/models/llama_gqa --tool bazel-bin/worker/tools/forward \
      --tp 2 [--incremental]

  which runs, for each prompt,
      TOOL --model DIR --tp N --token-ids 1,2,3 --output OUT.npy [--incremental]
  (OUT.npy: fp32 [num_tokens, vocab_size]) and, unless --no-greedy, once more on
  prompt + greedy tokens, checking that the argmax at every decode position is
  the golden greedy token and that its log-softmax matches output_logprobs.

For each prompt it prints ||ours - hf|| / ||hf|| (Frobenius norm over the whole
[len, vocab] array) and exits 1 if any exceeds --tol (default 1e-4), or if a
shape is wrong, a value is not finite, or a greedy check fails.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def rel_err(ours, ref):
    ref64 = ref.astype(np.float64)
    num = np.linalg.norm(ours.astype(np.float64) - ref64)
    den = np.linalg.norm(ref64)
    return num / den if den > 0 else num


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def load_ours(path, rows, vocab):
    a = np.load(path)
    if a.ndim != 2 or a.shape != (rows, vocab):
        raise ValueError("%s: shape %s, expected (%d, %d) [num_tokens, vocab_size]%s"
                         % (path, a.shape, rows, vocab,
                            " (padded vocab leaked into the output?)"
                            if a.ndim == 2 and a.shape[0] == rows and a.shape[1] > vocab
                            else ""))
    if a.dtype != np.float32:
        raise ValueError("%s: dtype %s, expected float32" % (path, a.dtype))
    if not np.all(np.isfinite(a)):
        raise ValueError("%s: non-finite values" % path)
    return a


def run_tool(tool, model_dir, tp, ids, incremental, out_path, extra, timeout):
    cmd = [tool, "--model", model_dir, "--tp", str(tp),
           "--token-ids", ",".join(str(int(t)) for t in ids), "--output", out_path]
    if incremental:
        cmd.append("--incremental")
    cmd += extra
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    if r.returncode != 0:
        tail = r.stdout.decode(errors="replace")[-3000:]
        raise RuntimeError("forward tool failed (rc %d): %s\n%s"
                           % (r.returncode, " ".join(cmd), tail))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fixture", help="fixture directory (with golden.json)")
    p.add_argument("ours", nargs="*", help="our logits .npy files, one per prompt in order")
    p.add_argument("--prompt-index", type=int, default=None,
                   help="with a single .npy: which prompt it is")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--tool", help="path of the forward tool: run it instead of reading files")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--incremental", action="store_true")
    p.add_argument("--no-greedy", action="store_true", help="tool mode: skip the greedy check")
    p.add_argument("--logprob-tol", type=float, default=1e-3)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per tool run")
    p.add_argument("--tool-arg", action="append", default=[],
                   help="extra argument for the tool (repeatable)")
    p.add_argument("--keep-dir", help="tool mode: write the tool outputs here")
    args = p.parse_intermixed_args(argv)

    fixture = os.path.abspath(args.fixture)
    with open(os.path.join(fixture, "golden.json")) as f:
        golden = json.load(f)
    prompts = golden["prompts"]
    refs = [np.load(os.path.join(fixture, fn)) for fn in golden["logits"]]
    vocab = refs[0].shape[1]
    label = "%s tp=%d%s" % (golden["name"], args.tp, " incremental" if args.incremental else "")

    if args.tool and args.tp not in golden.get("tp_sizes", [args.tp]):
        print("note: tp=%d is not in the fixture's tp_sizes %s" % (args.tp, golden["tp_sizes"]))

    failures = 0
    if args.tool:
        tool = os.path.abspath(args.tool)
        if not os.access(tool, os.X_OK):
            print("error: forward tool %s not found or not executable" % tool)
            return 2
        work = args.keep_dir or tempfile.mkdtemp(prefix="tpserve_cmp_")
        os.makedirs(work, exist_ok=True)
        greedy = {g["prompt_index"]: g for g in golden.get("greedy", [])}
        for i, (ids, ref) in enumerate(zip(prompts, refs)):
            out = os.path.join(work, "ours_%d.npy" % i)
            try:
                run_tool(tool, fixture, args.tp, ids, args.incremental, out,
                         args.tool_arg, args.timeout)
                ours = load_ours(out, len(ids), vocab)
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                print("FAIL %s prompt %d: %s" % (label, i, e))
                failures += 1
                continue
            e = rel_err(ours, ref)
            ok = e <= args.tol
            failures += not ok
            print("%s %s prompt %d (len %d): rel err %.3g" % ("ok  " if ok else "FAIL", label,
                                                              i, len(ids), e))
            g = greedy.get(i)
            if g is None or args.no_greedy:
                continue
            seq = list(ids) + list(g["output_ids"][:-1])
            out = os.path.join(work, "ours_%d_greedy.npy" % i)
            try:
                run_tool(tool, fixture, args.tp, seq, args.incremental, out,
                         args.tool_arg, args.timeout)
                lg = load_ours(out, len(seq), vocab)
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                print("FAIL %s prompt %d greedy: %s" % (label, i, e))
                failures += 1
                continue
            dec = lg[len(ids) - 1:]
            got = [int(t) for t in dec.argmax(axis=-1)]
            lps = log_softmax(dec)[np.arange(len(got)), g["output_ids"]]
            lp_err = float(np.max(np.abs(lps - np.asarray(g["output_logprobs"]))))
            ok = got == g["output_ids"] and lp_err <= args.logprob_tol
            failures += not ok
            print("%s %s prompt %d greedy: %s%s, max |logprob err| %.3g" % (
                "ok  " if ok else "FAIL", label, i,
                "tokens match" if got == g["output_ids"] else "tokens %s != golden %s"
                % (got, g["output_ids"]), "", lp_err))
    else:
        if not args.ours:
            p.error("give .npy files or --tool")
        if args.prompt_index is not None:
            if len(args.ours) != 1:
                p.error("--prompt-index takes exactly one .npy")
            pairs = [(args.prompt_index, args.ours[0])]
        else:
            if len(args.ours) > len(prompts):
                p.error("%d files but only %d prompts" % (len(args.ours), len(prompts)))
            pairs = list(enumerate(args.ours))
        for i, path in pairs:
            if not 0 <= i < len(prompts):
                p.error("prompt index %d out of range" % i)
            try:
                ours = load_ours(path, len(prompts[i]), vocab)
            except ValueError as e:
                print("FAIL %s prompt %d: %s" % (golden["name"], i, e))
                failures += 1
                continue
            e = rel_err(ours, refs[i])
            ok = e <= args.tol
            failures += not ok
            print("%s %s prompt %d (len %d): rel err %.3g" % ("ok  " if ok else "FAIL",
                                                              golden["name"], i,
                                                              len(prompts[i]), e))
    print("%s: %s" % (label if args.tool else golden["name"],
                      "PASS" if failures == 0 else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
