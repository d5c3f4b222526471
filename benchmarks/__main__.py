"""Run every benchmark module of this package, sorted by name.

Usage: ``python -m benchmarks [NAME...]`` (``--help`` lists the names); ``python -m
benchmarks.NAME --help`` gives the options of one, and ``python -m benchmarks NAME OPTION...``
passes the options to that one benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from collections.abc import Callable
from typing import cast

import benchmarks


def discover() -> list[str]:
    return sorted(
        m.name
        for m in pkgutil.iter_modules(benchmarks.__path__)
        if not m.name.startswith("_") and not m.ispkg
    )


def parse(argv: list[str]) -> tuple[list[str], list[str]]:
    """The benchmarks to run (all when none is named) and the options for the one named;
    exits with help or a usage error."""
    known = discover()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run benchmarks, each printing ratios against a baseline measured in the "
        "same run; `python -m benchmarks.NAME --help` gives the options of one.",
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default: all): {', '.join(known)}",
    )
    # options start at the first argument that looks like one; before any name, it is ours
    split = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    if split == 0:
        split = len(argv)
    names: list[str] = parser.parse_args(argv[:split]).names
    options = argv[split:]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"no benchmark {', '.join(unknown)}; choose from {', '.join(known)}")
    if options and len(names) != 1:
        parser.error(f"options ({' '.join(options)}) need exactly one benchmark named before them")
    return names or known, options


def main(argv: list[str]) -> int:
    names, options = parse(argv)
    failed = []
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        entry = getattr(module, "main", None)
        if entry is None:
            continue
        print(f"=== benchmarks.{name}")
        t0 = time.perf_counter()
        code = cast(Callable[[list[str]], int], entry)(options)
        print(f"=== benchmarks.{name}: exit {code} in {time.perf_counter() - t0:.1f} s\n")
        if code != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
