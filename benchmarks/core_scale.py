"""The decision core at real cluster sizes: one ``decide()`` on the per-node matrix model.

Usage: ``python -m benchmarks.core_scale [--nodes N] [--jobs J] [--repeat R] [--seed S]``

The cluster: ``N`` nodes of cpu 64, memory_gb 256 and gpu in {0, 0, 4, 8}, a fifth of them
half busy with running jobs; ``J`` pending gangs of tasks in {1, 1, 2, 4, 16}, per task cpu in
{1, 4, 16}, memory_gb in {4, 16, 64} and, for one job in ten, one gpu.  The policies: F1 (an
ordering heuristic) and a :class:`~app.domains.hpc.policy.RankingPolicy` scoring the first
view's precomputed arrays (what a learned ranker reads), both with EASY backfilling.  Printed:
construction of the run (validation, matrices), the whole decision, allocations, and the
ratio to FCFS on the same snapshot measured in the same run.  Rates use wall time (best of R).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np

from app.domains.hpc.decision import DecisionConfig, DecisionRun, decide
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.policy import OrderingPolicy, RankingPolicy, StepView
from app.domains.hpc.types import (
    ClusterState,
    Decision,
    Job,
    Node,
    Placement,
    PolicyRef,
    RunningJob,
)


def snapshot(nodes: int, jobs: int, seed: int = 0) -> ClusterState:
    """The benchmark's cluster (see the module docstring); deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([0.0, 0.0, 4.0, 8.0], size=nodes)
    node_list: list[Node] = []
    running: list[RunningJob] = []
    for i in range(nodes):
        capacity = {"cpu": 64.0, "memory_gb": 256.0, "gpu": float(gpus[i])}
        node_id = f"n{i:05d}"
        if i % 5 == 0:  # half busy until a known end
            job = Job(
                f"r{i:05d}",
                {"cpu": 32.0, "memory_gb": 128.0},
                float(rng.choice([600.0, 3600.0, 7200.0])),
                -100.0,
            )
            running.append(RunningJob(job, (Placement(node_id, 1),), -50.0))
            allocated = {"cpu": 32.0, "memory_gb": 128.0}
        else:
            allocated = {}
        node_list.append(Node(node_id, capacity, allocated))
    tasks = rng.choice([1, 1, 2, 4, 16], size=jobs)
    cpu = rng.choice([1.0, 4.0, 16.0], size=jobs)
    mem = rng.choice([4.0, 16.0, 64.0], size=jobs)
    gpu = rng.random(jobs) < 0.1
    wall = rng.choice([60.0, 600.0, 3600.0, 14400.0], size=jobs)
    pending = tuple(
        Job(
            f"j{k:06d}",
            {"cpu": float(cpu[k]), "memory_gb": float(mem[k])} | ({"gpu": 1.0} if gpu[k] else {}),
            float(wall[k]),
            float(k),
            tasks=int(tasks[k]),
        )
        for k in range(jobs)
    )
    return ClusterState(now=0.0, nodes=tuple(node_list), running=tuple(running), pending=pending)


class ArrayRanker:
    """A ranking policy over the first view's arrays: shortest walltime x size first."""

    ref = PolicyRef("array-ranker", "1", "benchmark")

    def rank(self, view: StepView) -> list[int]:
        arrays = view.arrays
        mask = np.asarray(view.mask, dtype=np.bool_)
        if arrays is None:
            out: list[int] = np.flatnonzero(mask).tolist()
            return out
        score = arrays.walltime * arrays.total_demand.sum(axis=1)
        rows = np.flatnonzero(mask)
        ranked: list[int] = rows[np.argsort(score[rows], kind="stable")].tolist()
        return ranked


def _best(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.core_scale")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    state = snapshot(args.nodes, args.jobs, args.seed)
    config = DecisionConfig()
    print(
        f"decide() on {args.nodes} nodes x {args.jobs} pending gangs (EASY, first-fit; "
        f"{len(state.running)} running), best of {args.repeat} (wall)"
    )
    t_build, _ = _best(lambda: DecisionRun(state, config), args.repeat)
    print(f"  DecisionRun construction (validation, matrices): {t_build * 1000:8.1f} ms")
    policies: list[tuple[str, OrderingPolicy | RankingPolicy]] = [
        ("fcfs", get_heuristic("fcfs")),
        ("f1", get_heuristic("f1")),
        ("ranking (arrays)", ArrayRanker()),
    ]
    base = 0.0
    for name, policy in policies:

        def run(p: OrderingPolicy | RankingPolicy = policy) -> Decision:
            return decide(state, p, config)

        t, out = _best(run, args.repeat)
        assert isinstance(out, Decision)
        base = base or t
        reserved = out.reservations[0].job_id if out.reservations else "-"
        print(
            f"  {name:<18} {t * 1000:8.1f} ms  x{t / base:4.2f} fcfs   "
            f"{len(out.allocations):>6} allocations, reservation {reserved}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
