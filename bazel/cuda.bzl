"""cuda_library: compiles .cu files with the toolkit's nvcc into a cc_library.

Bazel 4 has no CUDA rules, so each .cu becomes one genrule that calls nvcc and the
objects are linked through a plain cc_library. Code is built for Hopper (sm_90) with a
compute_90 PTX fallback.

cuda_emulated_library (or cuda_library's `emulated = True`, which adds NAME_emu): the
same sources as C++ on the CPU emulator, for tests in CI.

cuda_kernel: the stanza every kernel repeats, a cuda_library NAME (NAME.cu, NAME.h,
emulated) and its cuda_test NAME_test (NAME_test.cc against the kernel's CPU reference).

cuda_host_library: a cc_library of host code that calls CUDA, cuBLAS or NCCL, plus its
NAME_emu twin on the emulator and its shims, so that a whole stack (up to
//worker/rank:rank_builder_emu) runs there.
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

def cuda_library(name, srcs, hdrs = [], deps = [], textual_hdrs = [], emulated = False, dep_hdrs = [], **kwargs):
    """dep_hdrs: headers of other packages the .cu files include (nvcc runs in a genrule,
    which sees only the files it is given; the cc deps carry them for the C++ side)."""
    objs = _genrule_per_source(
        name,
        srcs,
        "_nvcc_%s_%s.pic.o",
        "%s %s -c $(location {src}) -o $@" % (_NVCC, _NVCC_FLAGS),
        hdrs + textual_hdrs + dep_hdrs,
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
    """The same .cu sources compiled as C++ for the CPU emulator (testing/cuda_emu).

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
        deps = deps + ["//testing/cuda_emu"],
        **kwargs
    )

# What each CUDA library becomes in an _emu twin: the emulated runtime and its shims.
_EMULATED_CUDA_LIBRARIES = {
    "@cuda//:cudart": "//testing/cuda_emu",
    "@cuda//:cublas": "//testing/cuda_emu:cublas",
    "@cuda//:nccl": "//testing/cuda_emu:nccl",
}

def _emulated_label(label):
    if label in _EMULATED_CUDA_LIBRARIES:
        return _EMULATED_CUDA_LIBRARIES[label]
    if ":" not in label:  # //a/b means //a/b:b
        label = label + ":" + label.split("/")[-1]
    return label + "_emu"

def cuda_host_library(name, deps = [], cuda_deps = [], cpu_deps = None, **kwargs):
    """A cc_library of host C++ that calls CUDA, plus NAME_emu: the same sources on the emulator.

    deps: what both link. cuda_deps: the CUDA side, each either @cuda//:cudart, :cublas or
    :nccl (the twin links the emulated runtime, cuBLAS or NCCL of testing/cuda_emu
    instead) or a target with an _emu twin of its own (a cuda_library with emulated = True,
    or another cuda_host_library), which the twin links instead. Test-only, the twin keeps
    the CUDA headers and links no CUDA library. cpu_deps, when given: NAME_cpu, the same
    sources with cpu_deps instead of cuda_deps (stand-ins that refuse CUDA), for binaries
    that must load no CUDA library.
    """
    native.cc_library(name = name, deps = deps + cuda_deps, **kwargs)
    if cpu_deps != None:
        native.cc_library(name = name + "_cpu", deps = deps + cpu_deps, **kwargs)
    emu_kwargs = dict(kwargs)
    emu_kwargs.pop("visibility", None)
    native.cc_library(
        name = name + "_emu",
        testonly = True,
        deps = deps + [_emulated_label(d) for d in cuda_deps] + ["@cuda//:headers"],
        visibility = kwargs.get("visibility"),
        **{k: v for k, v in emu_kwargs.items() if k != "testonly"}
    )

_CUDA_TEST_UTIL = "//worker/cuda:cuda_test_util"

def cuda_test(name, srcs, cuda_deps, deps = [], emu_args = [], **kwargs):
    """A GPU test and its twin on the CPU emulator, from the same sources.

    NAME (tagged "gpu": runs only where a device is, `--config=gpu`) links cuda_deps and
    :cuda_test_util; NAME with _test → _emu_test (untagged: CI runs it) links each
    cuda_dep's _emu twin and takes cuda_test_util.h as a source, so no CUDA library is
    linked. deps: what both link. emu_args: the twin's arguments only (a --gtest_filter
    for cases too slow to emulate). NAME must end in _test.
    """
    if not name.endswith("_test"):
        fail("cuda_test: %s must end in _test" % name)
    native.cc_test(
        name = name,
        srcs = srcs,
        linkstatic = True,
        tags = ["gpu"],
        deps = [_CUDA_TEST_UTIL] + cuda_deps + deps,
        **kwargs
    )
    native.cc_test(
        name = name[:-len("_test")] + "_emu_test",
        srcs = srcs + [_CUDA_TEST_UTIL + ".h"],
        linkstatic = True,
        deps = [_emulated_label(d) for d in cuda_deps] + deps,
        args = emu_args,
        **kwargs
    )

_KERNEL_TEXTUAL_HDRS = ["launch.cuh", "vec.cuh"]

def cuda_kernel(name, srcs = None, textual_hdrs = _KERNEL_TEXTUAL_HDRS, deps = [], dep_hdrs = [], test_deps = [], test_size = "medium"):
    """A kernel and its test: cuda_library NAME and cuda_test NAME_test (and their _emu twins).

    srcs: the .cu files (default NAME.cu); the header is NAME.h. textual_hdrs: the .cuh
    files it includes (default launch.cuh and vec.cuh). test_deps: what NAME_test.cc needs
    besides the kernel and gtest_main (its CPU reference, for one). deps/dep_hdrs: header
    libraries of other packages the kernel includes, and those headers (see cuda_library).
    """
    cuda_library(
        name = name,
        srcs = srcs or [name + ".cu"],
        hdrs = [name + ".h"],
        emulated = True,
        textual_hdrs = textual_hdrs,
        deps = ["@cuda//:headers"] + deps,
        dep_hdrs = dep_hdrs,
    )
    cuda_test(
        name = name + "_test",
        size = test_size,
        srcs = [name + "_test.cc"],
        cuda_deps = [":" + name],
        deps = ["//third_party:gtest_main"] + test_deps,
    )
