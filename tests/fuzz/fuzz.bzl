"""aq_fuzz_target: a libFuzzer binary over one entry of entries.h."""

def aq_fuzz_target(name, entry, deps):
    """Defines `name`, a fuzz binary calling `entry` (a function of entries.h).

    Tagged manual, so `bazel build //...` and `bazel test //...` skip it.
    tools/fuzz.sh builds it under --config=fuzz, which instruments
    everything for coverage, ASan and UBSan and whose :libfuzzer setting
    links libFuzzer (and its main) into these binaries only. Built without it (gcc), the binary runs the files it is given
    once each (standalone_main.cc), to reproduce a crash.

    Args:
      name: the binary, e.g. "spec_fuzzer".
      entry: the entry function's name in aqueduct::fuzz, e.g. "SpecEntry".
      deps: the library defining the entry.
    """
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = ["fuzzer_main.cc"] + select({
            ":libfuzzer": [],
            "//conditions:default": ["standalone_main.cc"],
        }),
        local_defines = ["AQ_FUZZ_ENTRY=" + entry],
        linkopts = select({
            ":libfuzzer": ["-fsanitize=fuzzer,address,undefined"],
            "//conditions:default": [],
        }),
        tags = ["manual"],
        deps = deps + [
            ":entries",
            "//common:logging",
            "//common:status",
            "//third_party/systemlibs:protobuf",
        ],
    )
