#!/usr/bin/env python3
"""check_layout.py on small made-up trees: each rule fires on a tree that breaks it and
stays quiet on one that keeps it. Run: python3 tools/check_layout_test.py"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layout  # noqa: E402


def tree(files):
    root = tempfile.mkdtemp(prefix="layout_test_")
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    return root


class CheckLayoutTest(unittest.TestCase):
    def test_a_clean_tree_passes(self):
        root = tree({"worker/tensor.h": "struct Tensor {};\n",
                     "worker/rank/a.h": '#include "worker/tensor.h"\n',
                     "server/s.cc": '#include "worker/loader/hf_config.h"\n',
                     "worker/loader/hf_config.h": "struct ModelConfig {};\n"})
        self.assertEqual(check_layout.check(root), [])

    def test_an_include_loop_between_folders_is_found(self):
        root = tree({"a/x.h": '#include "b/y.h"\n', "b/y.h": '#include "c/z.h"\n',
                     "c/z.h": '#include "a/x.h"\n'})
        problems = check_layout.check(root)
        self.assertEqual(len(problems), 1)
        self.assertIn("a <-> b <-> c", problems[0])

    def test_tests_are_leaves(self):
        root = tree({"a/x.h": '#include "b/y.h"\n', "b/y_test.cc": '#include "a/x.h"\n',
                     "b/y.h": ""})
        self.assertEqual(check_layout.check(root), [])

    def test_server_may_include_only_the_hf_config_under_worker(self):
        root = tree({"server/s.cc": '#include "worker/rank/r.h"\n', "worker/rank/r.h": ""})
        problems = check_layout.check(root)
        self.assertTrue(any("server/s.cc: includes worker/rank/r.h" in p for p in problems))

    def test_worker_root_holds_only_the_vocabulary(self):
        root = tree({"worker/sampler.h": ""})
        self.assertTrue(any("worker/sampler.h" in p for p in check_layout.check(root)))

    def test_a_type_defined_in_two_headers_is_found(self):
        root = tree({"a/x.h": "struct Step {\n};\n", "b/y.h": "struct Step {\n  int n;\n};\n",
                     "c/z.h": "struct Engine::Impl {\n};\nstruct Engine {\n};\n"})
        problems = check_layout.check(root)
        self.assertEqual(problems, ["Step is defined at namespace scope in 2 headers: a/x.h, b/y.h"])


if __name__ == "__main__":
    unittest.main()
