"""cuda_library: compiles .cu files with the toolkit's nvcc into a cc_library.

Bazel 4 has no CUDA rules, so each .cu becomes one genrule that calls nvcc and the
objects are linked through a plain cc_library. Code is built for Hopper (sm_90) with a
compute_90 PTX fallback.

cuda_emulated_library (or cuda_library's `emulated = True`, which adds NAME_emu): the
same sources as C++ on the CPU emulator, for tests in CI.
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

def _genrule_per_source(name, srcs, out_pattern, cmd_pattern, extra_srcs = []):
    """One genrule per .cu: cmd_pattern ({src}: the .cu) writes out_pattern % (name, stem)."""
    outs = []
    for src in srcs:
        out = out_pattern % (name, src.replace("/", "_").replace(".cu", ""))
        native.genrule(
            name = out.replace(".", "_"),
            srcs = [src] + extra_srcs,
            outs = [out],
            cmd = cmd_pattern.format(src = src),
        )
        outs.append(out)
    return outs

def cuda_library(name, srcs, hdrs = [], deps = [], textual_hdrs = [], emulated = False, **kwargs):
    objs = _genrule_per_source(
        name,
        srcs,
        "_nvcc_%s_%s.pic.o",
        "%s %s -c $(location {src}) -o $@" % (_NVCC, _NVCC_FLAGS),
        hdrs + textual_hdrs,
    )
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        textual_hdrs = textual_hdrs,
        deps = deps + ["@cuda//:cudart"],
        **kwargs
    )
    if emulated:
        cuda_emulated_library(name + "_emu", srcs, hdrs, deps, textual_hdrs, **kwargs)

def cuda_emulated_library(name, srcs, hdrs = [], deps = [], textual_hdrs = [], **kwargs):
    """The same .cu sources compiled as C++ for the CPU emulator (worker/kernels/cuda/emu).

    Each .cu is copied unchanged to a .cc (Bazel's C++ rules take no .cu) and built with
    TPSERVE_CUDA_EMULATOR defined, which routes the kernels' launches, dynamic shared
    memory and cp.async to the emulator. Test-only; links no CUDA library.
    """
    ccs = _genrule_per_source(name, srcs, "_emu_%s_%s.cc", "cp $(location {src}) $@")
    native.cc_library(
        name = name,
        testonly = True,
        srcs = ccs,
        hdrs = hdrs,
        textual_hdrs = textual_hdrs,
        # CUDA code type-puns through reinterpret_cast (bf16 pairs as words, chunks as uint4),
        # which nvcc allows and g++ at -O2 may miscompile; #pragma unroll means nothing here.
        copts = [
            "-fno-strict-aliasing",
            "-Wno-unknown-pragmas",
        ],
        local_defines = ["TPSERVE_CUDA_EMULATOR"],
        deps = deps + ["//worker/kernels/cuda/emu"],
        **kwargs
    )
