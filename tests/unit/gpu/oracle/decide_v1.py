"""FROZEN ORACLE: a verbatim copy of ``app/domains/gpu/decide.py`` before its rewrite for speed
(the learned ranking reads the frozen :mod:`encoding_v1`); the equivalence tests compare the
service's ``decide`` to it. Do not edit.

One GPU scheduling round: ``decide(snapshot, heuristic, config) -> GpuDecision``.

Pure and deterministic.  Invariants of every decision (checked by
:func:`app.domains.gpu.validation.validate_decision`): no GPU is over-allocated; a gang gets all
its GPUs or none (rigid: exactly ``g``; elastic: ``min..max``); only running jobs are preempted
or resized; only pending jobs get new allocations; only ``up`` nodes receive new work.

``policy`` is a heuristic of the library or a learned
:class:`~app.domains.gpu.learned.ScoredPolicy`: both go through the same admission walk, the
learned one in its scores' order.

Admission counts GPUs (a job fits iff its size <= GPUs not yet claimed in this round), then
places the admitted pending jobs, in admission order, on the GPUs the kept jobs leave free;
both placements span nodes when they must, so every admitted job is placed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.domains.gpu.heuristics import GpuConfig, GpuHeuristic, Mode, Placement
from app.domains.gpu.learned import PolicyOutputError, Ranking, ScoredPolicy
from app.domains.gpu.types import (
    Allocation,
    ClusterSnapshot,
    GpuDecision,
    GpuJob,
    NodeState,
    node_gpus,
)
from app.domains.gpu.types import Placement as NodePlacement
from app.domains.gpu.validation import validate_snapshot
from tests.unit.gpu.oracle.encoding_v1 import encode

__all__ = ["consolidate", "decide", "most_free", "place", "rank"]


def rank(self: ScoredPolicy, state: ClusterSnapshot) -> Ranking:
    """A verbatim copy of ``ScoredPolicy.rank`` on the frozen encoding."""
    enc = encode(state, self.constants, self.window)
    if not enc.jobs:
        return Ranking((), (), enc.overflow, {})
    raw = np.asarray(self.score(enc.obs, enc.mask), dtype=np.float64)
    if raw.shape != (len(enc.jobs),):
        raise PolicyOutputError(
            f"{self.name}: scores of shape {raw.shape}, expected ({len(enc.jobs)},)"
        )
    bad = enc.mask & ~np.isfinite(raw)
    if bad.any():
        jid = enc.jobs[int(np.flatnonzero(bad)[0])].id
        raise PolicyOutputError(f"{self.name}: non-finite score for job {jid!r}")
    scores = {j.id: float(raw[k]) for k, j in enumerate(enc.jobs) if enc.mask[k]}
    live = [j for k, j in enumerate(enc.jobs) if enc.mask[k]]
    live.sort(key=lambda j: (-scores[j.id], j.arrival, j.id))
    masked = tuple(j for k, j in enumerate(enc.jobs) if not enc.mask[k])
    return Ranking(tuple(live), masked, enc.overflow, scores)


RowPlacement = list[tuple[int, int]]


def most_free(free: list[int], gpus: int) -> RowPlacement | None:
    """Repeatedly the row with the most free GPUs (lowest index on ties), ``min(free, left)``
    at a time; ``free`` is updated only when the whole gang is placed."""
    if gpus > sum(free):
        return None
    left = list(free)
    out: RowPlacement = []
    need = gpus
    while need > 0:
        best = max(range(len(left)), key=lambda i: (left[i], -i))
        take = min(left[best], need)
        out.append((best, take))
        left[best] -= take
        need -= take
    free[:] = left
    return out


def consolidate(free: list[int], gpus: int, capacity: Sequence[int]) -> RowPlacement | None:
    """Section 7.4: the single row with the fewest free GPUs that holds the gang; else whole
    free rows (lowest index) while the rest is at least a row's size, then the remainder on
    the best-fitting row; else :func:`most_free` spanning."""
    if gpus > sum(free):
        return None
    fits = [i for i in range(len(free)) if free[i] >= gpus]
    if fits:
        best = min(fits, key=lambda i: (free[i], i))
        free[best] -= gpus
        return [(best, gpus)]
    left = list(free)
    out: RowPlacement = []
    need = gpus
    for i in range(len(left)):
        if left[i] > 0 and left[i] == capacity[i] and need >= capacity[i]:
            out.append((i, left[i]))
            need -= left[i]
            left[i] = 0
    if need > 0:
        rest = [i for i in range(len(left)) if left[i] >= need]
        if not rest:
            return most_free(free, gpus)
        best = min(rest, key=lambda i: (left[i], i))
        out.append((best, need))
        left[best] -= need
    free[:] = left
    return out


def place(
    free: list[int], gpus: int, capacity: Sequence[int], how: Placement
) -> RowPlacement | None:
    if how is Placement.MOST_FREE:
        return most_free(free, gpus)
    return consolidate(free, gpus, capacity)


@dataclass(slots=True)
class _Round:
    state: ClusterSnapshot
    config: GpuConfig
    rows: dict[str, int]
    capacity: list[int]
    free: list[int]

    @staticmethod
    def of(state: ClusterSnapshot, config: GpuConfig) -> _Round:
        rows = {n.id: i for i, n in enumerate(state.nodes)}
        capacity = [node_gpus(n) if n.state is NodeState.UP else 0 for n in state.nodes]
        return _Round(state, config, rows, capacity, list(capacity))

    def hold(self, job: GpuJob) -> None:
        for p in job.allocation:
            i = self.rows[p.node_id]
            self.free[i] = max(0, self.free[i] - p.tasks)

    def placements(self, rows: RowPlacement) -> tuple[NodePlacement, ...]:
        return tuple(NodePlacement(self.state.nodes[i].id, n) for i, n in rows)

    def up_gpus(self, job: GpuJob) -> int:
        return sum(p.tasks for p in job.allocation if self.capacity[self.rows[p.node_id]] > 0)


def _order(jobs: Sequence[GpuJob], h: GpuHeuristic, config: GpuConfig) -> list[GpuJob]:
    return sorted(jobs, key=lambda j: h.sort_key(j, config))


def _fit_size(job: GpuJob, left: int) -> int:
    """The largest size in ``min..max`` that fits ``left`` GPUs (0: none)."""
    size = min(job.max_gpus, left)
    return size if size >= job.min_gpus else 0


def _learned_order(
    r: _Round,
    h: ScoredPolicy,
    admitted: list[tuple[GpuJob, int]],
    waiting: list[GpuJob],
    reasons: dict[str, str],
) -> tuple[list[GpuJob], int]:
    """The learned policy's walk order and the GPUs its pinned jobs claim: running jobs
    beyond its window keep their GPUs; pending ones beyond it, and rows it masks, wait."""
    ranking = rank(h, r.state)
    claimed = 0
    for j in ranking.overflow:
        if j.running:
            admitted.append((j, j.gpus))
            claimed += r.up_gpus(j)
            reasons[j.id] = f"kept: beyond the {h.window} candidates {h.name} orders"
        else:
            waiting.append(j)
            reasons[j.id] = f"waiting: beyond the {h.window} candidates {h.name} orders"
    for j in ranking.masked:
        waiting.append(j)
        reasons[j.id] = f"waiting: needs {j.demand} GPUs, more than the up nodes have"
    return list(ranking.order), claimed


def _admit_greedy(
    r: _Round, h: GpuHeuristic | ScoredPolicy
) -> tuple[list[tuple[GpuJob, int]], list[GpuJob], list[GpuJob], dict[str, str]]:
    """(admitted with sizes in admission order, preempted, waiting, reasons)."""
    jobs = list(r.state.jobs)
    left = sum(r.capacity)
    admitted: list[tuple[GpuJob, int]] = []
    preempted: list[GpuJob] = []
    waiting: list[GpuJob] = []
    reasons: dict[str, str] = {}
    if isinstance(h, ScoredPolicy):
        order, claimed = _learned_order(r, h, admitted, waiting, reasons)
        left -= claimed
    elif not h.preemptive:
        for j in jobs:
            if j.running:
                admitted.append((j, j.gpus))
                left -= r.up_gpus(j)
                reasons[j.id] = "kept: running jobs keep their GPUs under " + h.name
    if not isinstance(h, ScoredPolicy):
        candidates = jobs if h.preemptive else [j for j in jobs if not j.running]
        order = _order(candidates, h, r.config) if h.mode is not Mode.DRF else list(candidates)
    shares: dict[str, int] = {}
    total = max(1, sum(r.capacity))
    blocked = False
    while order:
        if h.mode is Mode.DRF:
            order.sort(key=lambda j: (shares.get(j.tenant, 0) / total, j.arrival, j.id))
        j = order.pop(0)
        size = j.gpus if j.running else (0 if blocked else _fit_size(j, left))
        if j.running and size <= left:
            admitted.append((j, size))
            left -= size
            shares[j.tenant] = shares.get(j.tenant, 0) + size
            reasons[j.id] = f"kept: {h.name} admits it ({size} GPUs)"
        elif j.running:
            preempted.append(j)
            reasons[j.id] = (
                f"preempted: jobs ahead of it under {h.name} claim the GPUs "
                f"({size} held, {left} left)"
            )
        elif size > 0:
            admitted.append((j, size))
            left -= size
            shares[j.tenant] = shares.get(j.tenant, 0) + size
            reasons[j.id] = f"admitted: {size} GPUs free for it under {h.name}"
        else:
            waiting.append(j)
            reasons[j.id] = (
                "waiting: blocked behind an earlier job (strict FIFO)"
                if blocked
                else f"waiting: needs {j.demand} GPUs, {left} not claimed by jobs ahead"
            )
            if h.block:
                blocked = True
    return admitted, preempted, waiting, reasons


def _step_time(config: GpuConfig, job: GpuJob, g: int) -> float:
    if config.step_time is not None:
        return config.step_time(job, g)
    return 1.0 / math.pow(g, config.speedup_alpha)


def _admit_optimus(
    r: _Round,
) -> tuple[list[tuple[GpuJob, int]], list[GpuJob], list[GpuJob], dict[str, str]]:
    jobs = sorted(r.state.jobs, key=lambda j: (j.arrival, j.id))
    left = sum(r.capacity)
    size: dict[str, int] = {}
    gain: dict[str, float] = {}

    def marginal(j: GpuJob, g: int) -> float:
        if g + 1 > j.max_gpus or left < 1:
            return 0.0
        work = j.remaining_estimate_s() or 1.0
        return (_step_time(r.config, j, g) - _step_time(r.config, j, g + 1)) * work

    for j in jobs:
        if j.min_gpus > left:
            size[j.id] = 0
            gain[j.id] = 0.0
            continue
        size[j.id] = j.min_gpus
        left -= j.min_gpus
        gain[j.id] = marginal(j, size[j.id])
    while left > 0 and gain and max(gain.values()) > 0:
        best = max(gain, key=lambda k: gain[k])
        size[best] += 1
        left -= 1
        gain[best] = marginal(next(j for j in jobs if j.id == best), size[best])
    admitted = [(j, size[j.id]) for j in sorted(jobs, key=lambda j: size[j.id]) if size[j.id]]
    preempted = [j for j in jobs if j.running and size[j.id] == 0]
    waiting = [j for j in jobs if not j.running and size[j.id] == 0]
    reasons: dict[str, str] = {}
    for j in jobs:
        s = size[j.id]
        if s == 0:
            reasons[j.id] = (
                "preempted: optimus gives its GPUs to larger marginal gains"
                if j.running
                else f"waiting: optimus has no GPU left for its minimum ({j.min_gpus})"
            )
        elif j.running and s == j.gpus:
            reasons[j.id] = f"kept: optimus keeps its {s} GPUs"
        elif j.running:
            reasons[j.id] = f"resized: optimus moves it from {j.gpus} to {s} GPUs"
        else:
            reasons[j.id] = f"admitted: optimus gives it {s} GPUs"
    return admitted, preempted, waiting, reasons


def decide(
    state: ClusterSnapshot, policy: GpuHeuristic | ScoredPolicy, config: GpuConfig | None = None
) -> GpuDecision:
    """One round of ``policy`` (a heuristic or a learned scorer) on ``state`` (validated
    first)."""
    validate_snapshot(state)
    cfg = config or GpuConfig()
    r = _Round.of(state, cfg)
    if policy.mode is Mode.OPTIMUS:
        admitted, preempted, _, reasons = _admit_optimus(r)
    else:
        admitted, preempted, _, reasons = _admit_greedy(r, policy)
    keep = {j.id for j, s in admitted if j.running and s == j.gpus}
    for j in state.jobs:
        if j.id in keep:
            r.hold(j)
    allocations: list[Allocation] = []
    resizes: list[Allocation] = []
    for j, s in admitted:
        if j.id in keep:
            continue
        rows = place(r.free, s, r.capacity, cfg.placement)
        if rows is None:  # the count admitted it, so only a snapshot bug can get here
            raise AssertionError(f"{j.id}: admitted with {s} GPUs but not placeable")
        target = resizes if j.running else allocations
        target.append(Allocation(j.id, r.placements(rows)))
    return GpuDecision(
        policy=policy.ref,
        allocations=tuple(allocations),
        resizes=tuple(resizes),
        preemptions=tuple(j.id for j in preempted),
        reasons=reasons,
    )
