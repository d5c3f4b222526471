"""Micro-benchmark of the scheduling core: the ONNX-style stepping path and the ordering path.

Usage: ``python -m benchmarks.core [--seconds S] [--batch B] [--only SIZE]``

Two snapshots:

* ``64x16``: the ``benchmarks/decide.py`` payload (16 nodes x 32 cpu, 64 pending jobs);
* ``500x256``: 256 nodes (cpu, memory, some with gpus), 200 running jobs, 500 pending gangs.

Two paths, each timed for the current code (``app.domain``) and for the pre-optimisation
reference kept frozen in ``tests/unit/domain/reference`` (the baseline, measured in this run):

* ``step``: what ``app.policy.selector.decide_many`` does for a batch of ``B`` requests:
  a ``DecisionRun`` per request, then per step ``encode_batch`` of every live view, one scoring
  (a fixed-weight linear model in numpy standing in for ONNX inference, so only the core is
  measured), ``masked_argmax`` and ``apply`` per request;
* ``order``: ``decide()`` with the F1 and FCFS ordering policies.

Every timed pair is checked to give identical decisions (allocations, placements, reservation).
Prints ms per decision (median of timed rounds) and the speed-up over the reference.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from app.domains.hpc import decision as new_decision
from app.domains.hpc import encoding as new_encoding
from app.domains.hpc.heuristics import HEURISTICS
from app.domains.hpc.types import (
    SINGLE_NODE_LABEL,
    ClusterState,
    Decision,
    Job,
    Node,
    Placement,
    PolicyRef,
    RunningJob,
)
from tests.unit.domain.reference import decision as ref_decision
from tests.unit.domain.reference import encoding as ref_encoding

REF = PolicyRef("linear", "bench", "onnx")
WEIGHTS = np.random.default_rng(7).normal(size=new_encoding.NUM_FEATURES).astype(np.float32)


def small_snapshot(seed: int) -> ClusterState:
    """The ``benchmarks/decide.py`` payload as a ``ClusterState``."""
    rng = np.random.default_rng(seed)
    now = 1_000_000.0
    nodes = tuple(Node(f"n{k:02d}", {"cpu": 32.0}) for k in range(16))
    pending = tuple(
        Job(
            f"j{i:03d}",
            {"cpu": float(rng.integers(1, 33))},
            walltime_s=float(rng.integers(60, 36_000)),
            submit_time=now - float(rng.integers(0, 20_000)),
        )
        for i in range(64)
    )
    return ClusterState(now, nodes, (), pending)


def large_snapshot(seed: int) -> ClusterState:
    """256 multi-resource nodes, 200 running gangs, 500 pending gangs (some single-node)."""
    rng = np.random.default_rng(seed)
    now = 5_000_000.0
    caps: list[dict[str, float]] = []
    for k in range(256):
        cap = {"cpu": 64.0, "memory_gb": 256.0}
        if k % 8 == 0:
            cap["gpu"] = 4.0
        caps.append(cap)
    used = [dict.fromkeys(c, 0.0) for c in caps]
    running: list[RunningJob] = []
    for r in range(200):
        per_task = {"cpu": float(rng.integers(1, 17)), "memory_gb": float(rng.integers(1, 65))}
        tasks = int(rng.integers(1, 5))
        placements = _first_fit(per_task, tasks, int(rng.integers(0, 256)), caps, used)
        if placements is None:
            continue
        walltime = float(rng.integers(600, 86_400))
        started = now - float(rng.integers(0, int(walltime)))
        job = Job(f"r{r:04d}", per_task, walltime, started - 10.0, tasks=tasks)
        running.append(RunningJob(job, placements, started))
    nodes = tuple(
        Node(f"n{k:03d}", caps[k], {n: v for n, v in used[k].items() if v}) for k in range(256)
    )
    pending: list[Job] = []
    for i in range(500):
        per_task = {"cpu": float(rng.integers(1, 33)), "memory_gb": float(rng.integers(1, 129))}
        if rng.random() < 0.1:
            per_task["gpu"] = float(rng.integers(1, 5))
        labels = {SINGLE_NODE_LABEL: "true"} if rng.random() < 0.2 else {}
        pending.append(
            Job(
                f"j{i:04d}",
                per_task,
                walltime_s=float(rng.integers(60, 172_800)),
                submit_time=now - float(rng.integers(0, 200_000)),
                tasks=int(rng.integers(1, 17)),
                priority=int(rng.integers(0, 3)),
                labels=labels,
            )
        )
    return ClusterState(now, nodes, tuple(running), tuple(pending))


def _first_fit(
    per_task: dict[str, float],
    tasks: int,
    start: int,
    caps: list[dict[str, float]],
    used: list[dict[str, float]],
) -> tuple[Placement, ...] | None:
    """Place a running gang first-fit from node ``start`` on (wrapping), updating ``used``."""
    placements: list[tuple[int, int]] = []
    left = tasks
    for k in [*range(start, len(caps)), *range(start)]:
        take = 0
        while left and all(
            used[k][n] + (take + 1) * v <= caps[k].get(n, 0.0) for n, v in per_task.items()
        ):
            take += 1
            left -= 1
        if take:
            placements.append((k, take))
        if not left:
            break
    if left:
        return None
    for k, take in placements:
        for n, v in per_task.items():
            used[k][n] += take * v
    return tuple(Placement(f"n{k:03d}", take) for k, take in placements)


def step_batch(states: Sequence[ClusterState], decision: Any, encoding: Any) -> list[Decision]:
    """The ``decide_many`` hot loop with a linear scorer instead of ONNX inference."""
    runs = [decision.DecisionRun(s) for s in states]
    active = [r for r in runs if not r.done]
    while active:
        encoded = encoding.encode_batch([r.view() for r in active])
        logits = (encoded.obs @ WEIGHTS).astype(np.float32)
        for b, run in enumerate(active):
            row = encoding.masked_argmax(logits[b], encoded.mask[b])
            assert row is not None
            run.apply(encoded.candidate(b, row))
        active = [r for r in active if not r.done]
    return [r.result(REF) for r in runs]


def order_one(states: Sequence[ClusterState], decision: Any, name: str) -> list[Decision]:
    return [decision.decide(s, HEURISTICS[name]) for s in states]


def _order_case(
    states: Sequence[ClusterState], name: str, decision: Any, _encoding: Any
) -> list[Decision]:
    return order_one(states, decision, name)


def _time_pair(
    ref: Callable[[], object], new: Callable[[], object], seconds: float, per_call: int
) -> tuple[float, float]:
    """Median ms per decision of ``ref`` and ``new``, timed alternately (so that load from
    other processes hits both alike) for about ``seconds`` each."""
    ref()  # warm-up
    new()
    samples: tuple[list[float], list[float]] = ([], [])
    spent = [0.0, 0.0]
    while min(spent) < seconds or len(samples[1]) < 5:
        for k, fn in enumerate((ref, new)):
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            spent[k] += dt
            samples[k].append(dt * 1000.0 / per_call)
    return statistics.median(samples[0]), statistics.median(samples[1])


def _same(a: Sequence[Decision], b: Sequence[Decision]) -> bool:
    return [(d.allocations, d.reservations) for d in a] == [
        (d.allocations, d.reservations) for d in b
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per timed cell")
    parser.add_argument("--batch", type=int, default=8, help="requests per stepping batch")
    parser.add_argument("--only", choices=("64x16", "500x256"), help="one snapshot size")
    args = parser.parse_args(argv)
    sizes = {"64x16": small_snapshot, "500x256": large_snapshot}
    print(f"{'case':<28}{'reference ms':>14}{'current ms':>12}{'speed-up':>10}  identical")
    ok = True
    for size, build in sizes.items():
        if args.only is not None and size != args.only:
            continue
        cases: list[tuple[str, Callable[[Any, Any], list[Decision]], int]] = []
        # the reference needs seconds per 500x256 stepped decision: one request there
        for batch in sorted({1, args.batch}) if size == "64x16" else [1]:
            states = [build(seed) for seed in range(batch)]
            cases.append((f"step {size} B={batch}", partial(step_batch, states), batch))
        one = [build(0)]
        for name in ("f1", "fcfs"):
            cases.append((f"order {name} {size}", partial(_order_case, one, name), 1))
        for label, fn, per_call in cases:
            same = _same(fn(ref_decision, ref_encoding), fn(new_decision, new_encoding))
            ok = ok and same
            ref_ms, new_ms = _time_pair(
                partial(fn, ref_decision, ref_encoding),
                partial(fn, new_decision, new_encoding),
                args.seconds,
                per_call,
            )
            print(
                f"{label:<28}{ref_ms:>14.3f}{new_ms:>12.3f}{ref_ms / new_ms:>9.2f}x  "
                f"{'yes' if same else 'NO'}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
