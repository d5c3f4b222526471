"""One DAG scheduling round at growing sizes: the learned policy against Fair, and the learned
policy's executor head scored for the chosen job alone (the split graph) against the whole graph.

Usage: ``python -m benchmarks.dag_round [--sizes 50x200,200x1000,500x4000] [--whole-max 1000]
[--seed S]``

Each size is ``DAGS x FREE``: a round on a cluster of ``FREE`` idle executor slots with ``DAGS``
DAGs waiting (2-12 stages each, 1-40 tasks per stage, random parents; seeded). The round is
decided by :func:`app.policy.deciders.decide_requests`, the function the service's pipeline and
``kairos worker`` call, as the service would: once with ``fair`` (the DAG fallback, the
baseline), once with the shipped ``dag-v1`` as the service loads it (its graph split), and, up to
``--whole-max`` free slots, once with ``dag-v1`` scoring through its whole graph (the executor
head over every job). Printed per policy: the seconds of the round, the grants it made, who
decided, and the ratios to Fair and (for the split) to the whole graph. The decisions of the
split and the whole graph are compared, and must be equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.scale import parse_sizes

ROOT = Path(__file__).resolve().parents[1]


def snapshot(dags: int, free: int, seed: int) -> Any:
    """The round's ``DagClusterState`` (see the module docstring)."""
    from app.domains.dag.types import DagClusterState, DagSpec, DagState, StageSpec

    rng = random.Random(seed)
    states = []
    for i in range(dags):
        n = rng.randint(2, 12)
        stages = tuple(
            StageSpec(
                f"s{k}",
                rng.randint(1, 40),
                rng.uniform(1.0, 30.0),
                tuple(f"s{p}" for p in range(k) if rng.random() < 0.3),
            )
            for k in range(n)
        )
        states.append(DagState(DagSpec(f"d{i}", stages, submit_time=1_000.0 + i)))
    return DagClusterState(now=2_000.0, executors=free, free_slots=free, dags=tuple(states))


def _timed(request: Any, registry: Any) -> tuple[float, Any]:
    from app.policy.deciders import decide_requests

    started = time.perf_counter()
    (outcome,) = decide_requests([request], registry)
    return time.perf_counter() - started, outcome


def run(sizes: list[tuple[int, int]], whole_max: int, seed: int) -> int:
    from app.domains.dag.types import DagConfig
    from app.outcomes import DecisionRequest
    from app.policy.onnx_policy import RuntimeOptions
    from app.policy.registry import PolicyRegistry

    registry = PolicyRegistry(ROOT / "models", RuntimeOptions())
    registry.discover()
    entry = registry.find_or_load("dag-v1")
    if entry is None or entry.dag is None:
        print("dag_round: no loadable dag-v1 under models/", file=sys.stderr)
        return 1
    split_model = entry.dag
    print(
        f"dag_round: one round per size, decide_requests (the pipeline's decider); "
        f"dag-v1 {'split' if split_model.split is not None else 'NOT split'}"
    )
    print(f"{'size':>10} {'policy':<16} {'seconds':>8} {'grants':>7} {'x fair':>7} {'x whole':>8}")
    status = 0
    for dags, free in sizes:
        state = snapshot(dags, free, seed)

        def request(policy: str, state: Any = state) -> Any:
            return DecisionRequest(
                "bench", state, DagConfig(), policy=policy, fallback="fair", domain="dag"
            )

        fair_s, fair = _timed(request("fair"), registry)
        split_s, split = _timed(request("dag-v1"), registry)
        rows: list[tuple[str, float, Any, str]] = [
            ("fair", fair_s, fair, ""),
        ]
        whole_s = None
        if free <= whole_max:
            entry.dag = dataclasses.replace(split_model, split=None)
            try:
                whole_s, whole = _timed(request("dag-v1"), registry)
            finally:
                entry.dag = split_model
            rows.append(("dag-v1 whole", whole_s, whole, ""))
            if whole.decision != split.decision:
                print(f"{dags}x{free}: the split and the whole graph decided differently")
                status = 1
        rows.append(
            ("dag-v1 split", split_s, split, "" if whole_s is None else f"{split_s / whole_s:.3f}")
        )
        for name, seconds, outcome, vs_whole in rows:
            grants = len(outcome.decision.allocations) + len(outcome.decision.reservations)
            who = outcome.policy.name + (" (fallback)" if outcome.fallback_used else "")
            print(
                f"{f'{dags}x{free}':>10} {name:<16} {seconds:8.3f} {grants:7d} "
                f"{seconds / fair_s:7.2f} {vs_whole:>8}  {who}"
            )
    return status


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dag_round", description=__doc__)
    parser.add_argument("--sizes", default="50x200,200x1000,500x4000", help="DAGSxFREE,...")
    parser.add_argument(
        "--whole-max",
        type=int,
        default=1000,
        help="time the whole graph only up to this many free slots (it grows with DAGs x slots)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return run(parse_sizes(args.sizes), args.whole_max, args.seed)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
