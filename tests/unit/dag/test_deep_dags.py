"""A DAG deeper than Python's recursion limit: the critical paths and Decima's graph height are
computed iteratively."""

from __future__ import annotations

import sys

import numpy as np

from app.domains.dag.decima import _height
from app.domains.dag.heuristics import critical_paths
from app.domains.dag.policy import JobView, StageView

DEPTH = sys.getrecursionlimit() * 3


def _chain(depth: int) -> JobView:
    stages = tuple(
        StageView(
            index=i,
            unlaunched=1,
            demand=1,
            selectable=i == 0,
            runnable=i == 0,
            finished=False,
            duration_ms=2.0,
            children=(i + 1,) if i + 1 < depth else (),
        )
        for i in range(depth)
    )
    return JobView(id="deep", arrival_ms=0.0, supply=0, stages=stages)


def test_critical_paths_of_a_chain_deeper_than_the_recursion_limit() -> None:
    cps = critical_paths(_chain(DEPTH))
    assert cps[0] == 2.0 * DEPTH
    assert cps[-1] == 2.0
    assert cps == [2.0 * (DEPTH - i) for i in range(DEPTH)]


def test_critical_paths_of_a_diamond_take_the_longer_branch() -> None:
    def st(i: int, d: float, kids: tuple[int, ...], finished: bool = False) -> StageView:
        return StageView(i, 1, 1, i == 0, i == 0, finished, d, kids)

    job = JobView(
        "d", 0.0, 0, (st(0, 1.0, (1, 2)), st(1, 5.0, (3,)), st(2, 1.0, (3,)), st(3, 2.0, ()))
    )
    assert critical_paths(job) == [8.0, 7.0, 3.0, 2.0]


def test_height_of_a_chain_deeper_than_the_recursion_limit() -> None:
    n = DEPTH
    adj = np.zeros((n, n), dtype=np.float32)
    for i in range(n - 1):
        adj[i, i + 1] = 1.0
    assert _height(adj, n) == n - 1
