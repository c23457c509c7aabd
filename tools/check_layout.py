#!/usr/bin/env python3
"""Checks the floor plan that docs/design.md ("Layout") describes, on the source tree.

  python3 tools/check_layout.py [ROOT]

Rules (each violation is printed with the file and the rule; exit 1 if any):
  1. No include loop between folders: the graph "folder A has a file that includes a
     file of folder B" has no cycle (a folder including itself is fine). Tests (*_test.cc
     and tests/) are leaves and add no edges: they may include what they test, fakes
     and fixtures.
  2. server/ (the frontend) includes nothing under worker/ except the HF config reader
     (worker/loader/hf_config.h); the wire contract lives in proto/, the rendezvous
     store in rendezvous/.
  3. worker/'s root holds only the vocabulary every room shares (tensor, dtype,
     kv_cache, step_batch, their tests) and its BUILD.
  4. No class or struct is defined at namespace scope in two headers (an ODR trap when
     both are linked into one binary): top-level definitions only, by name.
tools/test.sh runs it before the build, so CI enforces it.
"""
import collections
import os
import re
import subprocess
import sys

SOURCE_EXTS = (".h", ".cc", ".cu", ".cuh")
SERVER_MAY_INCLUDE = {"worker/loader/hf_config.h"}
WORKER_ROOT = {"BUILD", "dtype.cc", "dtype.h", "dtype_test.cc", "kv_cache.cc", "kv_cache.h",
               "step_batch.cc", "step_batch.h", "step_batch_test.cc", "tensor.cc", "tensor.h",
               "tensor_test.cc"}
# Generated or system-rooted include prefixes, resolved to their folder in the tree.
INCLUDE_ROOTS = {"tpserve/v1/": "proto/tpserve/v1/"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
TYPE_RE = re.compile(
    r'^(?:struct|class)\s+(?:ABSL_\w+\s+)?(\w+)\b(?!::)(?:\s+final)?\s*(?::(?!:)[^;{]*)?\{', re.M)


def source_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, text=True, check=True)
        files = out.stdout.split()
    except (OSError, subprocess.CalledProcessError):
        files = [os.path.relpath(os.path.join(d, f), root)
                 for d, _, fs in os.walk(root) for f in fs]
    return sorted(f for f in files
                  if f.endswith(SOURCE_EXTS) and not f.startswith(("bazel-", "third_party/"))
                  and os.path.isfile(os.path.join(root, f)))


def resolve(include, files):
    for prefix, folder in INCLUDE_ROOTS.items():
        if include.startswith(prefix):
            include = folder + include[len(prefix):]
    return include if include in files else None


def find_cycles(edges):
    """Strongly connected components with more than one folder (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check(root):
    files = source_files(root)
    present = set(files)
    problems = []
    edges = collections.defaultdict(set)
    why = {}
    types = collections.defaultdict(list)
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        folder = os.path.dirname(f)
        edges[folder]
        # Tests are leaves: nothing includes them, so their includes cannot close a loop
        # of the code they test (a test may use a fixture from tests/ or a fake).
        is_test = f.endswith(("_test.cc", "_test.cu")) or f.startswith("tests/")
        for inc in INCLUDE_RE.findall(text):
            target = resolve(inc, present)
            if target is None:
                continue
            to = os.path.dirname(target)
            if to != folder and not is_test:
                edges[folder].add(to)
                why.setdefault((folder, to), f"{f} includes {inc}")
            if f.startswith("server/") and target.startswith("worker/") and \
                    target not in SERVER_MAY_INCLUDE:
                problems.append(f"{f}: includes {inc}; server/ may include only "
                                f"{', '.join(sorted(SERVER_MAY_INCLUDE))} under worker/")
        if f.endswith((".h", ".cuh")):
            for name in TYPE_RE.findall(text):
                types[name].append(f)
    for comp in find_cycles(edges):
        links = [why[(a, b)] for a in comp for b in comp if (a, b) in why]
        problems.append("include loop between folders " + " <-> ".join(comp) + ": " +
                        "; ".join(links))
    worker_root = os.path.join(root, "worker")
    if os.path.isdir(worker_root):
        for name in sorted(os.listdir(worker_root)):
            path = os.path.join(worker_root, name)
            if os.path.isfile(path) and name not in WORKER_ROOT:
                problems.append(f"worker/{name}: worker/'s root holds only the shared "
                                f"vocabulary ({', '.join(sorted(WORKER_ROOT))})")
    for name, where in sorted(types.items()):
        if len(where) > 1:
            problems.append(f"{name} is defined at namespace scope in {len(where)} headers: "
                            + ", ".join(where))
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = check(os.path.abspath(root))
    for p in problems:
        print("layout:", p)
    if problems:
        print(f"layout: {len(problems)} problem(s); the plan is in docs/design.md (Layout)")
        return 1
    print("layout: folders, includes and type names follow docs/design.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
