"""cuda_library: .cu sources compiled by nvcc into a cc_library.

Each .cu file becomes one object through a genrule running the nvcc that
@local_config_cuda found, for CUDA_ARCHS (SASS for each, PTX for the highest).
Without a toolkit the macro creates an empty cc_library, so callers can depend
on it unconditionally; code that needs it is selected with CUDA_ENABLED.
"""

load("@local_config_cuda//:defs.bzl", "CUDA_ARCHS", "CUDA_ENABLED", "NVCC")

def _gencode_flags():
    flags = []
    for a in CUDA_ARCHS:
        flags.append("-gencode=arch=compute_%s,code=sm_%s" % (a, a))
    if CUDA_ARCHS:
        top = CUDA_ARCHS[-1]
        flags.append("-gencode=arch=compute_%s,code=compute_%s" % (top, top))
    return " ".join(flags)

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], nvcc_inputs = [], **kwargs):
    """nvcc_inputs: headers from other packages that the .cu files include."""
    if not CUDA_ENABLED:
        native.cc_library(name = name, hdrs = hdrs, **kwargs)
        return
    objs = []
    for src in srcs:
        base = src.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        obj = "_%s_objs/%s.pic.o" % (name, base)
        native.genrule(
            name = "%s_%s_nvcc" % (name, base),
            srcs = [src] + hdrs + nvcc_inputs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-std=c++17 -O3 -Xcompiler=-fPIC,-Wall -Werror=all-warnings",
                "-I. -I$(GENDIR)",
                _gencode_flags(),
                " ".join(copts),
                "-c $(location %s) -o $@" % src,
            ]),
            message = "nvcc %s" % src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_config_cuda//:cudart"],
        **kwargs
    )

def cuda_cc_library(name, **kwargs):
    """A cc_library that exists only where the CUDA toolkit was found."""
    if CUDA_ENABLED:
        native.cc_library(name = name, **kwargs)

def cuda_cc_test(name, **kwargs):
    """A cc_test that exists only where the CUDA toolkit was found. Its tests
    skip (GTEST_SKIP) when the machine has no GPU."""
    if CUDA_ENABLED:
        tags = kwargs.pop("tags", [])
        native.cc_test(name = name, tags = tags + ["gpu"], **kwargs)

def if_cuda(if_true, if_false = []):
    """`if_true` where the CUDA toolkit was found, else `if_false`."""
    return if_true if CUDA_ENABLED else if_false

def cuda_cc_binary(name, **kwargs):
    """A cc_binary that exists only where the CUDA toolkit was found."""
    if CUDA_ENABLED:
        native.cc_binary(name = name, **kwargs)
