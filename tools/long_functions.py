#!/usr/bin/env python3
"""Lists C++ function bodies longer than a limit (default 80 lines).

A function is a top-level-ish `{ ... }` block whose opening line ends a
signature `...) {` or `...) const {` (also `-> T {` and lambdas assigned at
statement level count as part of their enclosing function). Heuristic, but
enough to keep functions short: tests and generated code are skipped.

Usage: tools/long_functions.py [--limit N] [--top K] [paths...]
"""
import argparse
import os
import re
import sys

SIG = re.compile(r"\)\s*(const)?\s*(override)?\s*(noexcept)?\s*(->\s*[\w:<>, *&]+)?\s*\{\s*$")
SKIP_DIRS = {"third_party", ".git", "bazel-bin", "bazel-out", "bazel-testlogs"}


def strip(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//")[0]


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    depth = 0
    start = None
    start_depth = 0
    name = ""
    for i, raw in enumerate(lines):
        line = strip(raw)
        if start is None and SIG.search(line) and not re.match(
                r"\s*(if|for|while|switch|catch)\b", line):
            # Find the signature's first line (name) going back.
            j = i
            while j > 0 and "(" not in strip(lines[j]):
                j -= 1
            name = strip(lines[j]).strip()[:70]
            start, start_depth = i, depth
        depth += line.count("{") - line.count("}")
        if start is not None and depth <= start_depth:
            yield name, start + 1, i - start + 1
            start = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("paths", nargs="*", default=["."])
    args = ap.parse_args()
    found = []
    for root in args.paths:
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
            for fn in files:
                if not fn.endswith((".cc", ".cu", ".h")) or fn.endswith(
                        "_test.cc") or "/tests" in d or fn.endswith(".pb.h"):
                    continue
                p = os.path.join(d, fn)
                for name, line, n in functions(p):
                    found.append((n, p, line, name))
    found.sort(reverse=True)
    over = [f for f in found if f[0] > args.limit]
    for n, p, line, name in (found[: args.top] if args.top else over):
        print(f"{n:5d} {p}:{line} {name}")
    return 1 if over and not args.top else 0


if __name__ == "__main__":
    sys.exit(main())
