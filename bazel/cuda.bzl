"""cuda_library: compiles .cu files with the toolkit's nvcc into a cc_library.

Bazel 4 has no CUDA rules, so each .cu becomes one genrule that calls nvcc and the
objects are linked through a plain cc_library. Code is built for Hopper (sm_90) with a
compute_90 PTX fallback.
"""

_NVCC = "/usr/local/cuda/bin/nvcc"

_NVCC_FLAGS = " ".join([
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC",
    "-I.",
    "-I$(GENDIR)",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "--expt-relaxed-constexpr",
])

def cuda_library(name, srcs, hdrs = [], deps = [], textual_hdrs = [], **kwargs):
    objs = []
    for src in srcs:
        obj = "_nvcc_%s_%s.pic.o" % (name, src.replace("/", "_").replace(".cu", ""))
        native.genrule(
            name = obj.replace(".", "_"),
            srcs = [src] + hdrs + textual_hdrs,
            outs = [obj],
            cmd = "%s %s -c $(location %s) -o $@" % (_NVCC, _NVCC_FLAGS, src),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        textual_hdrs = textual_hdrs,
        deps = deps + ["@cuda//:cudart"],
        **kwargs
    )
