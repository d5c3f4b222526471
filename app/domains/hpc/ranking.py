"""Ranking policies in the simulators: the encoder's first-view features on node-count machines.

A ranking policy (ADR 0065) scores every queued job once per decision from the decision's first
:class:`~app.domains.hpc.policy.StepView`.  The simulators keep node counts, not snapshots, so they
build that view's ``obs`` rows directly: :func:`head_features` performs the encoder's float
operations on the same numbers, so the fast twin (:mod:`sim.kairos_fast`) is bit-identical to the
service (tested).  :func:`rls_picker` lets the same model pick jobs in RLScheduler's simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from app.domains.hpc.encoding import (
    EPS,
    NUM_FEATURES,
    QUEUE_SCALE,
    SLOWDOWN_MIN_RUNTIME_S,
    SLOWDOWN_SCALE,
    STATIC_FEATURES,
    WAIT_SCALE_S,
    LogitsArray,
    MaskArray,
    ObsArray,
    dominant_shares,
    rank_rows,
    static_features,
)
from app.domains.hpc.policy import StepView
from app.domains.hpc.types import PolicyRef


@runtime_checkable
class ScoringRanker(Protocol):
    """A ranking policy that exposes its batched scorer (e.g. ``OnnxRankingPolicy``)."""

    @property
    def ref(self) -> PolicyRef: ...

    def rank(self, view: StepView) -> list[int]: ...

    def score(self, obs: ObsArray, mask: MaskArray) -> LogitsArray: ...


_LOG_QUEUE = math.log1p(QUEUE_SCALE)


def head_features(
    now: float,
    submit: npt.NDArray[np.float64],
    walltime: npt.NDArray[np.float64],
    demand: npt.NDArray[np.float64],
    fits: npt.NDArray[np.bool_],
    capacity: float,
    free: float,
) -> ObsArray:
    """``obs[N, F]`` of a decision's first view on a one-resource machine, as the encoder makes it.

    Rows are the pending jobs (FCFS order) with their total demand, ``capacity`` the schedulable
    cpus and ``free`` the free cpus; the same float operations as ``encoding._fill_many`` (HEAD
    phase, no reservation, zero priority), so the values are bit-identical.
    """
    q = len(submit)
    out = np.zeros((q, NUM_FEATURES), dtype=np.float32)
    total = demand.reshape(q, 1)
    out[:, STATIC_FEATURES] = static_features(total, submit, walltime, np.zeros(q), now, [capacity])
    free_total = max(0.0, free)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out[:, 3] = np.where(fits, 1.0 - EPS, EPS)
        out[:, 4] = dominant_shares(total, np.full((q, 1), free_total))
    out[:, 5] = 1.0
    out[:, 10] = math.log1p(q) / _LOG_QUEUE
    out[:, 11] = min(free_total, capacity) / capacity if capacity > 0.0 else 0.0
    np.nan_to_num(out, copy=False, nan=0.0, posinf=1.0, neginf=0.0)
    np.clip(out, 0.0, 1.0, out=out)
    return out


_LOG_SLOWDOWN = math.log1p(SLOWDOWN_SCALE)


class HeadEncoder:
    """:func:`head_features` for the jobs of one sequence, with the per-job columns cached.

    The simulators call it at every decision point.  Columns that depend only on the job
    (walltime, size, priority) are computed once by :func:`static_features`; the others use the
    same element-wise float operations as the encoder, and one final clip (every value is finite
    here, and clipping in float32 after the cast equals the encoder's cast-then-clip), so the rows
    are bit-identical to :func:`head_features` (tested).
    """

    def __init__(
        self,
        submit: npt.NDArray[np.float64],
        walltime: npt.NDArray[np.float64],
        demand: npt.NDArray[np.float64],
        capacity: float,
    ) -> None:
        n = len(submit)
        static = static_features(
            demand.reshape(n, 1), submit, walltime, np.zeros(n), 0.0, [capacity]
        )
        self.submit = np.asarray(submit, dtype=np.float64)
        self.demand = np.asarray(demand, dtype=np.float64)
        self.slow_div = np.maximum(np.maximum(walltime, 0.0), SLOWDOWN_MIN_RUNTIME_S)
        self.col1 = static[:, 1].copy()
        self.col2 = static[:, 2].copy()
        self.col8 = static[:, 4].copy()
        self.capacity = capacity
        if (
            not (np.isfinite(self.submit).all() and np.isfinite(walltime).all())
            or not np.isfinite(self.demand).all()
        ):
            raise ValueError("HeadEncoder needs finite submit times, walltimes and demands")

    def encode(
        self, at: npt.NDArray[np.intp], now: float, fits: npt.NDArray[np.bool_], free: float
    ) -> ObsArray:
        q = len(at)
        out = np.zeros((q, NUM_FEATURES), dtype=np.float32)
        wait = np.maximum(now - self.submit[at], 0.0)
        out[:, 0] = wait / WAIT_SCALE_S
        out[:, 1] = self.col1[at]
        out[:, 2] = self.col2[at]
        out[:, 3] = np.where(fits, 1.0 - EPS, EPS)
        demand = self.demand[at]
        free_total = max(0.0, free)
        if free_total > 0.0:
            out[:, 4] = np.where(demand > 0.0, demand / free_total, 0.0)
        else:
            out[:, 4] = np.where(demand > 0.0, 1.0, 0.0)  # inf saturates at 1
        out[:, 5] = 1.0
        out[:, 7] = np.log1p(wait / self.slow_div[at]) / _LOG_SLOWDOWN
        out[:, 8] = self.col8[at]
        out[:, 10] = math.log1p(q) / _LOG_QUEUE
        capacity = self.capacity
        out[:, 11] = min(free_total, capacity) / capacity if capacity > 0.0 else 0.0
        np.clip(out, 0.0, 1.0, out=out)
        return out


Picker = Callable[[list[int], float, int], int]


def rls_picker(
    ranker: ScoringRanker,
    submit: list[int],
    request: list[int],
    nodes: list[int],
    total_nodes: int,
    procs_per_node: float,
) -> Picker:
    """``pick(queued, now, free_nodes) -> job`` for
    :func:`app.domains.hpc.rlscheduler.run_heuristic`.

    ``queued`` is in arrival (FCFS) order; the pick is the highest-scoring job, the earliest on
    ties.  Features as :func:`head_features`, with the trace's requested time as walltime.
    """
    need = np.asarray(nodes, dtype=np.int64)
    ppn = float(procs_per_node)
    encoder = HeadEncoder(
        np.asarray(submit, dtype=np.float64),
        np.maximum(np.asarray(request, dtype=np.float64), 0.0),
        np.asarray(need * ppn, dtype=np.float64),
        total_nodes * ppn,
    )

    def pick(queued: list[int], now: float, free: int) -> int:
        at = np.asarray(queued, dtype=np.intp)
        obs = encoder.encode(at, float(now), need[at] <= free, free * ppn)
        mask = np.ones((1, len(queued)), dtype=np.bool_)
        rows = rank_rows(np.asarray(ranker.score(obs[None], mask))[0], mask[0])
        if not rows:
            raise ValueError(f"{ranker.ref} gave non-finite scores")
        return queued[rows[0]]

    return pick
