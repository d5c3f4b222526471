"""Micro-batching under concurrent load: does the learned policy answer, and do queued requests
share inferences?

Usage: ``python -m benchmarks.batching [--clients 32] [--seconds 6] [--workers 2]
[--policy NAME] [--skip-redis] [--no-decision]``

``clients`` closed-loop keep-alive clients send ``POST /v1/decide`` with the 16-node x 64-job
snapshot of :mod:`benchmarks.decide` to three servers started here: the parse-only FastAPI
``ceiling``, the ``embedded`` default (one process, in-process batcher) and ``redis`` (one API
process and ``--workers`` ``kairos worker`` processes, against ``KAIROS_BENCH_REDIS_URL``,
default ``redis://127.0.0.1:6379/0``, under a fresh key prefix). The ceiling is measured before
and after the others and their ratio is to the mean of its two cells, so that a change in the
host's other load during the run shows as a gap between the two ceilings (printed).

For each cell: throughput, p50/p99 latency, the share of answers decided by the requested
(learned) policy, the fallback's answers by reason, the mean batch (requests per batch, from
the API's ``kairos_batch_size`` histogram, scraped before and after the cell: in-process
batches for the embedded server, the workers' batches for Redis), the ratio to the ceiling and
the server CPU per answered request. ``--no-decision`` adds the embedded service with every
decision replaced by an empty one (:func:`benchmarks.decide.no_decision_app`): what the service
costs around a decision.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.decide import NO_DECISION, Result, Server, load, measured, model_dir, start

_METRIC = re.compile(r"^kairos_batch_size_(sum|count)(?:\{[^}]*\})? (\S+)$", re.M)


def batch_totals(url: str) -> tuple[float, float]:
    """``(requests, batches)`` so far, from the server's ``kairos_batch_size`` histogram."""
    return parse_batch_totals(httpx.get(f"{url}/metrics", timeout=10).text)


def parse_batch_totals(text: str) -> tuple[float, float]:
    """``(requests, batches)`` of a Prometheus text page's ``kairos_batch_size``."""
    totals = {"sum": 0.0, "count": 0.0}
    for kind, value in _METRIC.findall(text):
        totals[kind] += float(value)
    return totals["sum"], totals["count"]


@dataclass
class Cell:
    name: str
    result: Result
    #: requests per batch during the cell (None for the ceiling, which has no batcher)
    mean_batch: float | None
    batches: int

    @property
    def learned(self) -> float:
        """Share of the answers the requested policy gave itself (errors count against it)."""
        r = self.result
        return (r.answered - r.fallback_count - r.errors) / max(1, r.answered)


def run_cell(server: Server, clients: int, seconds: float, policy: str) -> Cell:
    counted = server.name != "ceiling"
    before = batch_totals(server.url) if counted else (0.0, 0.0)
    result = measured(server, load(server.url, clients, seconds, policy))
    if not counted:
        return Cell(server.name, result, None, 0)
    after = batch_totals(server.url)
    batches = int(after[1] - before[1])
    mean = (after[0] - before[0]) / batches if batches else 0.0
    return Cell(server.name, result, mean, batches)


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _reasons(result: Result) -> str:
    if not result.reasons:
        return "-"
    return ", ".join(f"{k} {v}" for k, v in sorted(result.reasons.items(), key=lambda kv: -kv[1]))


def report(cells: list[Cell], clients: int, seconds: float, policy: str) -> list[str]:
    ceilings = [c.result for c in cells if c.name == "ceiling"]
    ceiling = sum(r.rps for r in ceilings) / len(ceilings)
    cpus = [r.cpu_ms for r in ceilings if r.cpu_ms is not None]
    ceiling_cpu = sum(cpus) / len(cpus) if cpus else None
    lines = [
        f"/v1/decide, 16 nodes x 64 jobs, {clients} keep-alive clients, {seconds:.0f} s per "
        f"cell, policy {policy}",
        f"ceiling (parse-only FastAPI, one process): {ceiling:.0f} req/s, mean of "
        + " and ".join(f"{r.rps:.0f}" for r in ceilings)
        + f"; server CPU {_ms(ceiling_cpu)} ms per request, cores "
        + " and ".join(r.cores for r in ceilings),
        f"{'config':<10} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'learned':>8} "
        f"{'mean batch':>10} {'batches':>7} {'x ceiling':>9} {'cpu ms':>7} "
        f"{'cores api / workers':>20}  fallback reasons",
    ]
    for cell in cells:
        r = cell.result
        if cell.name == "ceiling":
            continue
        mean = "-" if cell.mean_batch is None else f"{cell.mean_batch:.2f}"
        lines.append(
            f"{cell.name:<10} {r.rps:7.1f} {r.p50_ms:7.1f} {r.p99_ms:7.1f} {cell.learned:8.1%} "
            f"{mean:>10} {cell.batches:7d} {r.rps / ceiling:9.2f} {_ms(r.cpu_ms):>7} "
            f"{r.cores:>20}  {_reasons(r)}"
        )
    lines.append(
        "(cpu ms: server CPU per answered request, every process of the configuration; on a "
        "shared host it depends far less than req/s on how the cores are shared out)"
    )
    lines += ["", "targets (issue 19, item 5)"]
    for cell in cells:
        if cell.name in ("ceiling", NO_DECISION):
            continue
        ok = cell.learned >= 0.99 and (cell.mean_batch or 0.0) >= 2.0
        lines.append(
            f"  {'met' if ok else 'NOT met'}: {cell.name}: learned policy >= 99 % "
            f"({cell.learned:.1%}) and mean batch >= 2 ({cell.mean_batch or 0.0:.2f})"
        )
    embedded = next((c for c in cells if c.name == "embedded"), None)
    if embedded is not None:
        ratio = embedded.result.rps / ceiling
        cpu = embedded.result.cpu_ms
        by_cpu = (
            ""
            if cpu is None or ceiling_cpu is None
            else f"; by CPU per request, less moved by how the host shares its cores: "
            f"{ceiling_cpu / cpu:.2f}"
        )
        lines.append(
            f"  {'met' if ratio >= 0.2 else 'NOT met'}: embedded >= 0.2 x ceiling "
            f"({ratio:.2f}{by_cpu})"
        )
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batching")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=6.0, help="per cell")
    parser.add_argument("--workers", type=int, default=2, help="kairos workers of the Redis cell")
    parser.add_argument("--policy", default=None, help="default: the shipped ONNX model")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("KAIROS_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    )
    parser.add_argument("--skip-redis", action="store_true")
    parser.add_argument(
        "--no-decision",
        action="store_true",
        help="also the embedded service with every decision replaced by an empty one: the most "
        "any policy could reach against the ceiling in one process",
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp:
        work = Path(tmp)
        models, onnx_name = model_dir(work)
        policy = args.policy or onnx_name
        specs: list[tuple[str, str | None, int]] = [("ceiling", None, 0), ("embedded", None, 0)]
        if args.no_decision:
            specs.append((NO_DECISION, None, 0))
        if not args.skip_redis:
            specs.append(("redis", args.redis_url, args.workers))
        servers = [start(name, work, models, url, workers) for name, url, workers in specs]
        try:
            order = [*servers, servers[0]]  # the ceiling again last: the host's drift shows
            cells = [run_cell(s, args.clients, args.seconds, policy) for s in order]
        finally:
            for server in servers:
                server.stop()
    for line in report(cells, args.clients, args.seconds, policy):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


__all__ = ["Cell", "batch_totals", "main", "parse_batch_totals", "report", "run_cell"]
