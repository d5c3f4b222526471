"""One GPU scheduling round: ``decide(snapshot, heuristic, config) -> GpuDecision``.

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

:func:`most_free` and :func:`consolidate` state the two placement rules on a plain list (one
scan of the rows per choice); a round places through :class:`FreeGpus`, which makes the same
choices from an index of the rows by free GPUs (:func:`place_on`).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from app.domains.gpu.heuristics import GpuConfig, GpuHeuristic, Mode, Placement
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.types import (
    Allocation,
    ClusterSnapshot,
    GpuDecision,
    GpuJob,
    NodeState,
    node_gpus,
)
from app.domains.gpu.types import Placement as NodePlacement

__all__ = ["FreeGpus", "consolidate", "decide", "most_free", "place", "place_on"]

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


class FreeGpus:
    """The free GPUs of every row, indexed so that :func:`most_free` and :func:`consolidate`'s
    choices cost ``O(log n)`` each instead of a scan of every row.

    ``free`` is the list the placements update (the caller's, shared); every change goes
    through :meth:`set`. ``_count[v]`` is exactly how many rows have ``v`` free and ``_values``
    the sorted distinct ``v`` with a count; ``_rows[v]`` is a min-heap of the rows that had
    ``v`` free when pushed (an entry is current iff ``free[row] == v``); ``_whole[c]`` a
    min-heap of the rows of ``c > 0`` GPUs pushed while wholly free (current iff
    ``free[row] == c``)."""

    __slots__ = ("_count", "_rows", "_values", "_whole", "capacity", "free")

    def __init__(self, free: list[int], capacity: Sequence[int]) -> None:
        self.free = free
        self.capacity = capacity
        self._count: dict[int, int] = {}
        self._rows: dict[int, list[int]] = {}
        self._whole: dict[int, list[int]] = {}
        for i, v in enumerate(free):
            self._count[v] = self._count.get(v, 0) + 1
            self._rows.setdefault(v, []).append(i)  # ascending: already a heap
            c = capacity[i]
            if c > 0 and v == c:
                self._whole.setdefault(c, []).append(i)
        self._values = sorted(self._count)

    def total(self) -> int:
        return sum(v * n for v, n in self._count.items())

    def set(self, i: int, value: int) -> None:
        old = self.free[i]
        if old == value:
            return
        n = self._count[old] - 1
        if n:
            self._count[old] = n
        else:
            del self._count[old]
            del self._values[bisect.bisect_left(self._values, old)]
        self.free[i] = value
        if value in self._count:
            self._count[value] += 1
        else:
            self._count[value] = 1
            bisect.insort(self._values, value)
        heapq.heappush(self._rows.setdefault(value, []), i)
        c = self.capacity[i]
        if c > 0 and value == c:
            heapq.heappush(self._whole.setdefault(c, []), i)

    def _lowest(self, v: int) -> int:
        """The lowest row with ``v`` free (one must exist)."""
        heap = self._rows[v]
        while self.free[heap[0]] != v:
            heapq.heappop(heap)
        return heap[0]

    def most_free(self) -> int:
        """The row with the most free GPUs, lowest on ties."""
        return self._lowest(self._values[-1])

    def best_fit(self, gpus: int) -> int | None:
        """The row with the fewest free GPUs ``>= gpus``, lowest on ties (None: no row)."""
        k = bisect.bisect_left(self._values, gpus)
        return None if k == len(self._values) else self._lowest(self._values[k])

    def next_whole(self, need: int) -> int | None:
        """The lowest wholly free row of ``0 < capacity <= need`` (None: none)."""
        best: int | None = None
        for c, heap in self._whole.items():
            if c > need:
                continue
            while heap and self.free[heap[0]] != c:
                heapq.heappop(heap)
            if heap and (best is None or heap[0] < best):
                best = heap[0]
        return best


def place_most_free(index: FreeGpus, gpus: int) -> RowPlacement | None:
    """:func:`most_free` on an index (the same rows, the same updates)."""
    if gpus > index.total():
        return None
    out: RowPlacement = []
    need = gpus
    while need > 0:
        best = index.most_free()
        take = min(index.free[best], need)
        out.append((best, take))
        index.set(best, index.free[best] - take)
        need -= take
    return out


def place_consolidate(index: FreeGpus, gpus: int) -> RowPlacement | None:
    """:func:`consolidate` on an index (the same rows, the same updates)."""
    if gpus > index.total():
        return None
    best = index.best_fit(gpus)
    if best is not None:
        index.set(best, index.free[best] - gpus)
        return [(best, gpus)]
    # whole free rows in index order: row i is taken iff its capacity <= the need left when
    # the walk reaches it, and the need only shrinks, so the next one taken is the lowest
    # wholly free row of capacity <= need
    out: RowPlacement = []
    need = gpus
    while need > 0:
        row = index.next_whole(need)
        if row is None:
            break
        c = index.free[row]
        out.append((row, c))
        index.set(row, 0)
        need -= c
    if need > 0:
        best = index.best_fit(need)
        if best is None:
            for row, c in out:
                index.set(row, c)
            return place_most_free(index, gpus)
        out.append((best, need))
        index.set(best, index.free[best] - need)
    return out


def place_on(index: FreeGpus, gpus: int, how: Placement) -> RowPlacement | None:
    """:func:`place` on an index."""
    if how is Placement.MOST_FREE:
        return place_most_free(index, gpus)
    return place_consolidate(index, gpus)


@dataclass(slots=True)
class _Round:
    state: ClusterSnapshot
    config: GpuConfig
    rows: dict[str, int]
    capacity: list[int]
    free: list[int]
    held: dict[str, int]

    @staticmethod
    def of(state: ClusterSnapshot, config: GpuConfig) -> _Round:
        rows = {n.id: i for i, n in enumerate(state.nodes)}
        capacity = [node_gpus(n) if n.state is NodeState.UP else 0 for n in state.nodes]
        held = {j.id: sum(p.tasks for p in j.allocation) for j in state.jobs}
        return _Round(state, config, rows, capacity, list(capacity), held)

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
    ranking = h.rank(r.state)
    claimed = 0
    for j in ranking.overflow:
        if j.running:
            admitted.append((j, r.held[j.id]))
            claimed += r.up_gpus(j)
            reasons[j.id] = f"kept: beyond the {h.window} candidates {h.name} orders"
        else:
            waiting.append(j)
            reasons[j.id] = f"waiting: beyond the {h.window} candidates {h.name} orders"
    for j in ranking.masked:
        waiting.append(j)
        reasons[j.id] = f"waiting: needs {j.demand} GPUs, more than the up nodes have"
    return list(ranking.order), claimed


def _drf_walk(jobs: list[GpuJob], shares: dict[str, int], total: int) -> Iterator[GpuJob]:
    """DRF's walk: each step the job least by ``(its tenant's share / total, arrival, id)``,
    ``shares`` read when the step is taken (the walk's body updates it). Only the yielded
    job's tenant's share changes between steps, so each tenant's jobs wait in their
    ``(arrival, id)`` order behind one heap entry per tenant keyed by the share at its push."""
    queues: dict[str, list[GpuJob]] = {}
    for j in sorted(jobs, key=lambda j: (j.arrival, j.id), reverse=True):
        queues.setdefault(j.tenant, []).append(j)  # each tenant's next job last
    heap = [(shares.get(t, 0) / total, q[-1].arrival, q[-1].id, t) for t, q in queues.items()]
    heapq.heapify(heap)
    while heap:
        _, _, _, t = heapq.heappop(heap)
        q = queues[t]
        yield q.pop()
        if q:
            heapq.heappush(heap, (shares.get(t, 0) / total, q[-1].arrival, q[-1].id, t))


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
                admitted.append((j, r.held[j.id]))
                left -= r.up_gpus(j)
                reasons[j.id] = "kept: running jobs keep their GPUs under " + h.name
    if not isinstance(h, ScoredPolicy):
        candidates = jobs if h.preemptive else [j for j in jobs if not j.running]
        order = _order(candidates, h, r.config) if h.mode is not Mode.DRF else list(candidates)
    shares: dict[str, int] = {}
    total = max(1, sum(r.capacity))
    blocked = False
    walk = _drf_walk(order, shares, total) if h.mode is Mode.DRF else iter(order)
    for j in walk:
        held = r.held[j.id]
        size = held if j.running else (0 if blocked else _fit_size(j, left))
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
    _note_missing_estimates(h, (*preempted, *waiting), reasons)
    return admitted, preempted, waiting, reasons


def _note_missing_estimates(
    h: GpuHeuristic | ScoredPolicy, left_out: Sequence[GpuJob], reasons: dict[str, str]
) -> None:
    """An estimate-aware heuristic orders estimate-less jobs last: their reason says so."""
    if isinstance(h, ScoredPolicy) or not h.needs_estimate:
        return
    for j in left_out:
        if j.estimate_s is None:
            reasons[j.id] += f"; it has no run-time estimate, so {h.name} orders it last"


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
    # the largest gain, the earliest job (in ``jobs`` order) on ties; only the job that gets
    # the GPU has its gain changed, so the heap's top is always current
    heap = [(-gain[j.id], k) for k, j in enumerate(jobs)]
    heapq.heapify(heap)
    while left > 0 and heap and -heap[0][0] > 0:
        _, k = heapq.heappop(heap)
        j = jobs[k]
        size[j.id] += 1
        left -= 1
        gain[j.id] = marginal(j, size[j.id])
        heapq.heappush(heap, (-gain[j.id], k))
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
        if s and j.estimate_s is None and j.max_gpus > j.min_gpus:
            reasons[j.id] += (
                "; it has no run-time estimate, so optimus sizes it on one unit of work"
            )
    return admitted, preempted, waiting, reasons


def decide(
    state: ClusterSnapshot, policy: GpuHeuristic | ScoredPolicy, config: GpuConfig | None = None
) -> GpuDecision:
    """One round of ``policy`` (a heuristic or a learned scorer) on ``state``, a snapshot that
    :func:`~app.domains.gpu.validation.validate_snapshot` accepts: the caller validates at its
    boundary (the service once per round, before the policy and its fallback decide; the
    simulator's snapshots hold by construction)."""
    cfg = config or GpuConfig()
    r = _Round.of(state, cfg)
    if policy.mode is Mode.OPTIMUS:
        admitted, preempted, _, reasons = _admit_optimus(r)
    else:
        admitted, preempted, _, reasons = _admit_greedy(r, policy)
    keep = {j.id for j, s in admitted if j.running and s == r.held[j.id]}
    for j in state.jobs:
        if j.id in keep:
            r.hold(j)
    index = FreeGpus(r.free, r.capacity)
    allocations: list[Allocation] = []
    resizes: list[Allocation] = []
    for j, s in admitted:
        if j.id in keep:
            continue
        rows = place_on(index, s, cfg.placement)
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
