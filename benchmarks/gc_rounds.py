"""The garbage collector's young threshold (``KAIROS_GC_GEN0_THRESHOLD``) at real cluster sizes.

Usage: ``python -m benchmarks.gc_rounds [--sizes 1000x5000,5000x10000] [--repeat R]
[--thresholds 700,50000]``

For each size one process starts the service in process (the app behind httpx's ASGI
transport, embedded SQLite), builds the cluster of :mod:`benchmarks.scale` through the API and
times ``R`` rounds of dry-run ``POST .../schedule`` under each young-generation threshold in
turn (the service's thresholds replaced before each round: the thresholds alternate, so a change
in the host's other load touches every one alike). A dry run is the whole round but the job
starts: load, the learned policy's decision, the stored decision. Printed per threshold: the
median and best round, their ratio to the first threshold's median (the interpreter's own 700
by default, the baseline), and the full collections per round.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from typing import Any

from benchmarks.scale import NOW, build_cluster, parse_sizes


async def _rounds(nodes: int, jobs: int, thresholds: list[int], repeat: int) -> dict[int, Any]:
    import httpx

    from app.main import create_app
    from app.settings import Settings

    out: dict[int, dict[str, list[float]]] = {t: {"s": [], "full": []} for t in thresholds}
    with tempfile.TemporaryDirectory(prefix="kairos-gc-") as tmp:
        settings = Settings(
            DATABASE_URL=f"sqlite:///{tmp}/kairos.db",
            MAX_BODY_BYTES=256 * 1024 * 1024,
            MODELS_DIR=f"{tmp}/models",
            LOG_LEVEL="warning",
        )
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://kairos", timeout=3600
            ) as c:
                await build_cluster(c, "gc", nodes, jobs)
                body = {"now": NOW, "dry_run": True}
                r = await c.post("/v1/clusters/gc/schedule", json=body)
                assert r.status_code == 200, r.text[:300]
                kept = gc.get_threshold()
                try:
                    for _ in range(repeat):
                        for t in thresholds:
                            gc.set_threshold(t, kept[1], kept[2])
                            full = gc.get_stats()[2]["collections"]
                            started = time.perf_counter()
                            r = await c.post("/v1/clusters/gc/schedule", json=body)
                            out[t]["s"].append(time.perf_counter() - started)
                            out[t]["full"].append(gc.get_stats()[2]["collections"] - full)
                            assert r.status_code == 200, r.text[:300]
                            assert not r.json()["fallback"]["used"], r.json()["fallback"]
                finally:
                    gc.set_threshold(*kept)
    return out


def _print(nodes: int, jobs: int, out: dict[int, Any]) -> None:
    base = statistics.median(next(iter(out.values()))["s"])
    for t, cell in out.items():
        median = statistics.median(cell["s"])
        print(
            f"{f'{nodes}x{jobs}':>12}{t:>10}{median:>9.3f}{min(cell['s']):>9.3f}"
            f"{median / base:>8.2f}x{statistics.mean(cell['full']):>8.1f}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gc_rounds",
        description="Dry-run schedule rounds at real sizes under alternating young-generation "
        "thresholds of the garbage collector, in one process.",
    )
    parser.add_argument("--sizes", default="1000x5000,5000x10000", help="NODESxJOBS,...")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per threshold")
    parser.add_argument(
        "--thresholds",
        default="700,50000",
        help="young thresholds, the first the baseline (700: the interpreter's own)",
    )
    args = parser.parse_args(argv)
    thresholds = [int(t) for t in args.thresholds.split(",")]
    print("gc_rounds: dry-run rounds (s), ratio = median / the first threshold's median")
    print(f"{'size':>12}{'gen0':>10}{'median':>9}{'best':>9}{'ratio':>9}{'full/rd':>8}")
    for nodes, jobs in parse_sizes(args.sizes):
        _print(nodes, jobs, asyncio.run(_rounds(nodes, jobs, thresholds, args.repeat)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
