"""The decision core at real cluster sizes: one ``decide()`` on the per-node matrix model.

Usage: ``python -m benchmarks.core_scale [--nodes N] [--jobs J] [--repeat R] [--seed S]
[--baseline REV] [--baseline-repeat B]``

The cluster: ``N`` nodes of cpu 64, memory_gb 256 and gpu in {0, 0, 4, 8}, a fifth of them
half busy with running jobs; ``J`` pending gangs of tasks in {1, 1, 2, 4, 16}, per task cpu in
{1, 4, 16}, memory_gb in {4, 16, 64} and, for one job in ten, one gpu.  The policies: FCFS and
F1 (ordering heuristics), a :class:`~app.domains.hpc.policy.RankingPolicy` scoring the first
view's precomputed arrays (what a learned ranker reads), and the shipped ranking model
``hpc-kernel`` through ONNX Runtime (encoding of every candidate, one inference, the walk), all
with EASY backfilling.  Printed: construction of the run (validation, matrices), construction
plus the first view, each whole decision, allocations, and the ratio to FCFS on the same
snapshot measured in the same run.  Times are wall, best of R.

``--baseline REV`` also times ``app/domains/hpc/decision.py`` as it was at the git revision
``REV`` (the rest of the tree shared), interleaved with the working tree's in the same run, and
checks that both decide identically; ``B`` rounds of the baseline (default 1: a slow baseline
can take minutes per decision at this size).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from app.domains.hpc import decision as current
from app.domains.hpc.decision import DecisionConfig
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
from benchmarks.decision_ab import module_at


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


def _onnx_ranker(work: Path) -> RankingPolicy | None:
    """The shipped ``hpc-kernel`` (a test model when ``models/`` has none), or ``None`` when it
    is not a ranking model."""
    from app.policy.onnx_policy import OnnxRankingPolicy, RuntimeOptions
    from app.policy.registry import PolicyRegistry
    from app.policy.selector import resolve
    from benchmarks.decide import model_dir

    models, name = model_dir(work)
    registry = PolicyRegistry(models, RuntimeOptions())
    registry.discover()
    policy = resolve(name, registry).onnx
    return policy if isinstance(policy, OnnxRankingPolicy) else None


def _row(label: str, t: float, base: float, out: Decision) -> str:
    reserved = out.reservations[0].job_id if out.reservations else "-"
    return (
        f"  {label:<42} {t * 1000:9.1f} ms  x{t / base:5.2f} fcfs  "
        f"{len(out.allocations):>6} allocations, reservation {reserved}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.core_scale")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", metavar="REV", help="git revision to A/B against")
    parser.add_argument("--baseline-repeat", type=int, default=1)
    parser.add_argument("--no-onnx", action="store_true", help="skip the hpc-kernel row")
    args = parser.parse_args(argv)
    state = snapshot(args.nodes, args.jobs, args.seed)
    config = DecisionConfig()
    modules: list[tuple[str, Any, int]] = [("working tree", current, args.repeat)]
    if args.baseline:
        modules.insert(0, (args.baseline, module_at(args.baseline), args.baseline_repeat))
    print(
        f"decide() on {args.nodes} nodes x {args.jobs} pending gangs (EASY, first-fit; "
        f"{len(state.running)} running), best of {args.repeat} (wall)"
    )
    policies: list[tuple[str, OrderingPolicy | RankingPolicy]] = [
        ("fcfs", get_heuristic("fcfs")),
        ("f1", get_heuristic("f1")),
        ("ranking (arrays)", ArrayRanker()),
    ]
    with tempfile.TemporaryDirectory(prefix="kairos-core-scale-") as tmp:
        onnx = None if args.no_onnx else _onnx_ranker(Path(tmp))
        if onnx is not None:
            policies.append((f"{onnx.ref.name} (onnx ranking)", onnx))
        for label, module, repeat in modules:

            def build(m: Any = module) -> object:
                return m.DecisionRun(state, config)

            def first_view(m: Any = module) -> object:
                return m.DecisionRun(state, config).view()

            t_build, _ = _best(build, repeat)
            t_view, _ = _best(first_view, repeat)
            print(f"  [{label}] DecisionRun (validation, matrices): {t_build * 1000:8.1f} ms")
            print(f"  [{label}] DecisionRun + first view:           {t_view * 1000:8.1f} ms")
        base: dict[str, float] = {}
        decided: dict[str, Decision] = {}
        for name, policy in policies:
            for label, module, repeat in modules:

                def run(p: OrderingPolicy | RankingPolicy = policy, m: Any = module) -> Decision:
                    out: Decision = m.decide(state, p, config)
                    return out

                t, out = _best(run, repeat)
                assert isinstance(out, Decision)
                if name in decided and out != decided[name]:
                    raise SystemExit(f"{name}: the two revisions decide differently")
                decided[name] = out
                base.setdefault(label, t)
                print(_row(f"{name} [{label}]" if args.baseline else name, t, base[label], out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
