"""ssdq_fuzz_target: one libFuzzer harness, built two ways.

- <name>_fuzzer: the libFuzzer binary. Tagged manual: it only links under --config=fuzz (clang,
  -fsanitize=fuzzer); build it with fuzz/run_fuzzers.sh.
- <name>_corpus_test: the same harness behind a plain main that replays every file of
  fuzz/corpus/<name>, so the seeds and every input that once crashed run in the normal test set
  and under --config=asan / --config=ubsan.
"""

def ssdq_fuzz_target(name, srcs, deps, data = []):
    corpus = native.glob(["corpus/%s/**" % name])
    native.cc_library(
        name = name + "_harness",
        srcs = srcs,
        deps = deps + ["//fuzz:fuzz_support"],
        data = data,
        alwayslink = True,
        testonly = True,
    )
    native.cc_binary(
        name = name + "_fuzzer",
        deps = [":" + name + "_harness"],
        linkopts = ["-fsanitize=fuzzer"],
        data = data,
        tags = ["manual", "fuzzer"],
        testonly = True,
    )
    native.cc_test(
        name = name + "_corpus_test",
        srcs = ["corpus_replay_main.cc"],
        deps = [":" + name + "_harness"],
        data = corpus + data,
        args = ["fuzz/corpus/" + name],
    )
