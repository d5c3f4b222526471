"""Invariants of a GPU snapshot and of a decision on it.

A snapshot: unique node and job ids; GPU counts >= 0; ``1 <= min_gpus <= max_gpus``; counters
>= 0; a running job's allocation is on known nodes, every placement > 0 GPUs, and sums to its
size (rigid: exactly ``g``; elastic: ``min..max``); no node holds more GPUs than it has.

A decision (on that snapshot): the same per-node bound after it is applied; allocations only
for pending jobs, resizes only for running elastic jobs, preemptions only of running jobs; no
job named twice; every new placement on a known ``up`` node, all-or-nothing within
``min..max``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from app.domains.gpu.types import (
    ClusterSnapshot,
    GpuDecision,
    GpuJob,
    JobKind,
    NodeState,
    Placement,
    node_gpus,
)
from app.kernel.errors import DomainError, SnapshotError

__all__ = ["InvalidDecisionError", "validate_decision", "validate_snapshot"]


class InvalidDecisionError(DomainError):
    """A decision breaks an invariant of the domain (``field`` names what)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


_Err = type[SnapshotError] | type["InvalidDecisionError"]


def _check_size(job: GpuJob, gpus: int, where: str, err: _Err) -> None:
    if job.kind is JobKind.RIGID and gpus != job.min_gpus:
        raise err(where, f"rigid job {job.id!r} needs exactly {job.min_gpus} GPUs, got {gpus}")
    if not job.min_gpus <= gpus <= job.max_gpus:
        raise err(
            where, f"elastic job {job.id!r} needs {job.min_gpus}..{job.max_gpus} GPUs, got {gpus}"
        )


def _usage(
    placements: Iterable[tuple[str, tuple[Placement, ...]]],
    nodes: Mapping[str, int],
    where: str,
    err: _Err,
) -> dict[str, int]:
    used: dict[str, int] = {}
    for jid, alloc in placements:
        for p in alloc:
            if p.node_id not in nodes:
                raise err(where, f"job {jid!r} is placed on unknown node {p.node_id!r}")
            if p.tasks <= 0:
                raise err(where, f"job {jid!r} has a placement of {p.tasks} GPUs on {p.node_id!r}")
            used[p.node_id] = used.get(p.node_id, 0) + p.tasks
    for nid, n in used.items():
        if n > nodes[nid]:
            raise err(where, f"node {nid!r} has {nodes[nid]} GPUs but {n} are allocated")
    return used


def validate_snapshot(state: ClusterSnapshot) -> None:
    """Raise :class:`SnapshotError` (naming the field) on a snapshot that cannot be decided."""
    if not math.isfinite(state.now):
        raise SnapshotError("now", "must be a finite number of seconds")
    nodes: dict[str, int] = {}
    for i, n in enumerate(state.nodes):
        if n.id in nodes:
            raise SnapshotError(f"nodes[{i}].id", f"duplicate node id {n.id!r}")
        g = n.capacity.get("gpu", 0.0)
        if g < 0 or g != int(g):
            raise SnapshotError(f"nodes[{i}].capacity.gpu", f"must be a whole count >= 0, got {g}")
        nodes[n.id] = node_gpus(n)
    seen: set[str] = set()
    for i, j in enumerate(state.jobs):
        if j.id in seen:
            raise SnapshotError(f"jobs[{i}].id", f"duplicate job id {j.id!r}")
        seen.add(j.id)
        _check_job(j, f"jobs[{i}]")
    _usage(((j.id, j.allocation) for j in state.jobs), nodes, "jobs.allocation", SnapshotError)


def _check_job(j: GpuJob, where: str) -> None:
    if j.min_gpus < 1:
        raise SnapshotError(f"{where}.min_gpus", f"must be >= 1, got {j.min_gpus}")
    if j.max_gpus < j.min_gpus:
        raise SnapshotError(
            f"{where}.max_gpus", f"must be >= min_gpus ({j.min_gpus}), got {j.max_gpus}"
        )
    for name in ("attained_gpu_s", "executed_s", "starts", "preemptions", "restart_left_s"):
        v = getattr(j, name)
        if not (math.isfinite(v) and v >= 0):
            raise SnapshotError(f"{where}.{name}", f"must be a finite number >= 0, got {v}")
    if j.estimate_s is not None and not (math.isfinite(j.estimate_s) and j.estimate_s > 0):
        raise SnapshotError(f"{where}.estimate_s", f"must be > 0, got {j.estimate_s}")
    if j.running:
        _check_size(j, j.gpus, f"{where}.allocation", SnapshotError)


def validate_decision(state: ClusterSnapshot, decision: GpuDecision) -> None:
    """Raise :class:`InvalidDecisionError` when ``decision`` breaks an invariant on ``state``."""
    jobs = {j.id: j for j in state.jobs}
    nodes = {n.id: node_gpus(n) for n in state.nodes}
    up = {n.id for n in state.nodes if n.state is NodeState.UP}
    named: set[str] = set()

    def once(jid: str, where: str) -> GpuJob:
        if jid not in jobs:
            raise InvalidDecisionError(where, f"unknown job {jid!r}")
        if jid in named:
            raise InvalidDecisionError(where, f"job {jid!r} is named twice")
        named.add(jid)
        return jobs[jid]

    for jid in decision.preemptions:
        if not once(jid, "preemptions").running:
            raise InvalidDecisionError("preemptions", f"job {jid!r} is not running")
    for field, allocs, running in (
        ("allocations", decision.allocations, False),
        ("resizes", decision.resizes, True),
    ):
        for a in allocs:
            j = once(a.job_id, field)
            if j.running != running:
                state_word = "running" if j.running else "pending"
                raise InvalidDecisionError(field, f"job {j.id!r} is {state_word}")
            if running and j.kind is JobKind.RIGID:
                raise InvalidDecisionError(field, f"rigid job {j.id!r} cannot be resized")
            for p in a.placements:
                if p.node_id in nodes and p.node_id not in up:
                    raise InvalidDecisionError(field, f"node {p.node_id!r} is not up")
            _check_size(j, sum(p.tasks for p in a.placements), field, InvalidDecisionError)
    _usage(decision.placements(state).items(), nodes, "allocations", InvalidDecisionError)
