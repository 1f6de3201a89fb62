"""local_archive: a repository unpacked from an archive inside this tree (no download)."""

def _local_archive_impl(ctx):
    ctx.extract(ctx.path(ctx.attr.archive), output = "include")
    ctx.symlink(ctx.path(ctx.attr.build_file), "BUILD.bazel")

local_archive = repository_rule(
    implementation = _local_archive_impl,
    attrs = {
        "archive": attr.label(allow_single_file = True, mandatory = True),
        "build_file": attr.label(allow_single_file = True, mandatory = True),
    },
)
