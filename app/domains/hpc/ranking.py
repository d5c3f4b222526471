"""Ranking policies in the simulators: the encoder's first-view features on node-count machines.

A ranking policy (ADR 0065) scores every queued job once per decision from the decision's first
:class:`~app.domains.hpc.policy.StepView`.  The simulators keep node counts, not snapshots, so
:class:`HeadEncoder` builds that view's ``obs`` rows from the counts with the one feature formula
(:func:`app.domains.hpc.encoding.features`; HEAD phase, no reservation, zero priority), so the
rows equal the service's encoding of the same snapshot.  :func:`rls_picker` lets the same model
pick jobs in RLScheduler's simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from app.domains.hpc.encoding import (
    LogitsArray,
    MaskArray,
    ObsArray,
    features,
    free_fraction,
    queue_feature,
    rank_rows,
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


class HeadEncoder:
    """``obs[N, F]`` of a decision's first view on a one-resource machine, for the jobs of one
    sequence.

    ``submit``, ``walltime`` and ``demand`` (total cpus) are per job, ``capacity`` the
    schedulable cpus.  :meth:`encode` gives the rows of the pending jobs ``at`` (FCFS order):
    :func:`~app.domains.hpc.encoding.features` of the view whose only node has ``free`` cpus
    free (negative counts as 0) and in which the jobs ``fits`` can start now.
    """

    def __init__(
        self,
        submit: npt.NDArray[np.float64],
        walltime: npt.NDArray[np.float64],
        demand: npt.NDArray[np.float64],
        capacity: float,
    ) -> None:
        self.submit = np.asarray(submit, dtype=np.float64)
        self.walltime = np.asarray(walltime, dtype=np.float64)
        self.demand = np.asarray(demand, dtype=np.float64).reshape(len(self.submit), 1)
        self.capacity = float(capacity)

    def encode(
        self, at: npt.NDArray[np.intp], now: float, fits: npt.NDArray[np.bool_], free: float
    ) -> ObsArray:
        q = len(at)
        capacity = (self.capacity,)
        free_total = (max(0.0, free),)
        zeros = np.zeros(q, dtype=np.float64)
        return features(
            demand=self.demand[at],
            capacity=capacity,
            free=free_total,
            submit=self.submit[at],
            walltime=self.walltime[at],
            priority=zeros,
            fits=fits,
            is_reserved=zeros,
            now=now,
            has_reservation=False,
            reservation_start=0.0,
            backfill_phase=0.0,
            queue_length=queue_feature(q),
            free_fraction=free_fraction(free_total, capacity),
        )


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
    ties.  Features as :class:`HeadEncoder`, with the trace's requested time as walltime.
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
