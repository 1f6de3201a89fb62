"""cuda_library: compiles .cu files with nvcc and wraps the objects in a cc_library.

Includes and defines come from the deps' CcInfo, so a .cu file can include the same
headers as the C++ code. Machine code for sm_90a (Hopper fast paths) and sm_80 (Ampere,
the portable baseline), plus compute_80 PTX for anything newer; `--define=cuda_gencodes=sm_90a`
(`--config=sm90a`) builds Hopper machine code alone, for binaries carried to an H100 / H200.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

CUDA_GENCODES = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_80,code=compute_80",
]

# --define=cuda_gencodes=NAME: the machine code of one target only.
CUDA_GENCODES_BY_NAME = {
    "sm_90a": ["-gencode=arch=compute_90a,code=sm_90a"],
}

def _cuda_objects_impl(ctx):
    cc = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps]).compilation_context
    outs = []
    for src in ctx.files.srcs:
        out = ctx.actions.declare_file("_cuda_objs/%s/%s.o" % (ctx.label.name, src.basename[:-len(".cu")]))
        args = ctx.actions.args()
        args.add_all(["-c", src.path, "-o", out.path])
        args.add_all(["-std=c++17", "-O3", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC", "-lineinfo"])
        chosen = ctx.var.get("cuda_gencodes", "")
        if chosen and chosen not in CUDA_GENCODES_BY_NAME:
            fail("--define=cuda_gencodes=%s: known are %s" % (chosen, ", ".join(CUDA_GENCODES_BY_NAME.keys())))
        args.add_all(ctx.attr.gencodes or CUDA_GENCODES_BY_NAME.get(chosen, CUDA_GENCODES))
        args.add_all(ctx.attr.copts)
        args.add("-I.")
        args.add("-I" + ctx.bin_dir.path)
        args.add_all(cc.includes, format_each = "-I%s")
        args.add_all(cc.quote_includes, format_each = "-I%s")
        args.add_all(cc.system_includes, format_each = "-isystem=%s")
        args.add_all(cc.defines, format_each = "-D%s")
        # nvcc through a wrapper that gives it a temporary directory of its own
        # (nvcc_private_tmp.sh says why); its first argument names the compiler.
        ctx.actions.run(
            executable = ctx.executable._nvcc_wrapper,
            arguments = [NVCC, args],
            inputs = depset([src] + ctx.files.hdrs, transitive = [cc.headers]),
            outputs = [out],
            mnemonic = "NvccCompile",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "gencodes": attr.string_list(),
        "_nvcc_wrapper": attr.label(
            default = "//tools/bazel:nvcc_private_tmp.sh",
            allow_single_file = True,
            executable = True,
            cfg = "host",
        ),
    },
)

# nvcc's command line reads none of the C++ options that tell the sanitizer configurations apart
# from the plain one (--copt, --linkopt, --platform_suffix), so the objects are built in one
# configuration with those options fixed: `--config=asan|ubsan|sanitizers` then reuse the plain build's
# objects instead of compiling every kernel again (nvcc is most of a cold build on two cores), and
# nvcc's host code was never instrumented anyway. Any other suffix (--config=sm90a: other gencodes)
# keeps a folder of its own. Only options that always change are set, because Bazel names the
# folder after the options a transition changed: --linkopt, empty in the plain build, is left alone.
_SUFFIXES_SHARING_NVCC_OBJECTS = ["", "asan", "ubsan", "sanitizers"]

def _nvcc_configuration_impl(settings, attr):
    suffix = settings["//command_line_option:platform_suffix"] or ""
    return {
        "//command_line_option:copt": [],
        "//command_line_option:platform_suffix": "cuda" if suffix in _SUFFIXES_SHARING_NVCC_OBJECTS else "cuda-" + suffix,
    }

_nvcc_configuration = transition(
    implementation = _nvcc_configuration_impl,
    inputs = ["//command_line_option:platform_suffix"],
    outputs = [
        "//command_line_option:copt",
        "//command_line_option:platform_suffix",
    ],
)

def _objects_in_nvcc_configuration_impl(ctx):
    return [DefaultInfo(files = depset(transitive = [t[DefaultInfo].files for t in ctx.attr.objects]))]

_objects_in_nvcc_configuration = rule(
    implementation = _objects_in_nvcc_configuration_impl,
    attrs = {
        "objects": attr.label_list(cfg = _nvcc_configuration),
        "_allowlist_function_transition": attr.label(
            default = "@bazel_tools//tools/allowlists/function_transition_allowlist",
        ),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], gencodes = [], visibility = None, **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc (cudart linked statically).

    gencodes: replaces CUDA_GENCODES (e.g. sm_90a alone for wgmma kernels)."""
    _cuda_objects(
        name = name + "_nvcc",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:headers"],
        copts = copts,
        gencodes = gencodes,
    )
    _objects_in_nvcc_configuration(
        name = name + "_objs",
        objects = [":" + name + "_nvcc"],
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_objs"],
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        linkstatic = True,
        visibility = visibility,
        **kwargs
    )
