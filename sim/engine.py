"""One entry point for both semantics: run one policy on one job sequence of a trace."""

from __future__ import annotations

from typing import Literal

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.policy import OrderingPolicy, RankingPolicy, SteppingPolicy
from app.domains.hpc.ranking import ScoringRanker
from app.domains.hpc.rlscheduler import RlsPolicy, SequenceResult, simulate_sequence
from app.domains.hpc.simulate import (
    KairosSimulator,
    engine_runs,
    simulate_workload,
    workload_from_trace,
)
from app.domains.hpc.swf import SwfTrace
from app.domains.hpc.types import Backfill

Semantics = Literal["kairos", "rlscheduler"]


def run_sequence(
    trace: SwfTrace,
    policy: str | OrderingPolicy | RankingPolicy | SteppingPolicy,
    *,
    start: int,
    length: int,
    backfill: Backfill = Backfill.EASY,
    semantics: Semantics = "kairos",
    fast: bool = True,
) -> SequenceResult:
    """Jobs ``[start, start + length)`` of ``trace`` from an empty cluster.

    ``semantics="rlscheduler"`` takes an RLScheduler heuristic name (:class:`RlsPolicy`) or a
    ranking policy (it picks each job in RLScheduler's simulator);
    ``"kairos"`` takes a heuristic name of :mod:`app.domains.hpc.heuristics` or a policy object
    (e.g. an ONNX policy) and runs the service's decision core on a pooled machine (decisions
    equal the per-node machine's, see :mod:`app.domains.hpc.simulate`): queue-order heuristics
    and ranking policies on the engine (:func:`~app.domains.hpc.simulate.simulate_workload`,
    the EASY rules on node counts), stepping policies, or any policy with ``fast=False``,
    through ``decide()`` on a snapshot at every decision point.
    """
    if semantics == "rlscheduler":
        if isinstance(policy, str):
            rls: RlsPolicy | ScoringRanker = RlsPolicy(policy.strip().lower())
        elif isinstance(policy, ScoringRanker):
            rls = policy
        else:
            raise TypeError(
                "rlscheduler semantics runs RLScheduler's heuristics (by name) or a ranking "
                "policy (decision_mode: rank)"
            )
        return simulate_sequence(trace, start, length, rls, backfill=backfill is Backfill.EASY)
    resolved = get_heuristic(policy) if isinstance(policy, str) else policy
    workload = workload_from_trace(trace, start, length)
    if fast and engine_runs(resolved):
        assert isinstance(resolved, OrderingPolicy | ScoringRanker)
        return simulate_workload(workload, resolved, backfill)
    sim = KairosSimulator(workload, config=DecisionConfig(backfill=backfill), pooled=True)
    return sim.run(resolved)
