"""Run every benchmark module of this package, sorted by name.

Usage: ``python -m benchmarks [NAME...]``.
"""

from __future__ import annotations

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


def main(argv: list[str]) -> int:
    names = argv or discover()
    failed = []
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        entry = getattr(module, "main", None)
        if entry is None:
            continue
        print(f"=== benchmarks.{name}")
        t0 = time.perf_counter()
        code = cast(Callable[[list[str]], int], entry)([])
        print(f"=== benchmarks.{name}: exit {code} in {time.perf_counter() - t0:.1f} s\n")
        if code != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
