"""FROZEN pre-optimisation copy of app/domains/hpc/decision.py (commit cd017ab), kept as the
reference
implementation for the equivalence tests and the benchmark (benchmarks/core.py). Do not edit.

One scheduling round: a snapshot and a policy in, a :class:`~app.domains.hpc.types.Decision` out.

Semantics (ADR 0010):

* **Eligible** jobs are pending jobs whose ``depends_on`` are all in ``state.finished``.  An
  eligible job that cannot be placed even on the empty schedulable cluster (``up`` nodes) is
  *unschedulable*: it is never picked, never reserved, and listed in ``explain``.
* **HEAD phase**: the policy picks a job.  If it can be placed now it is allocated and the round
  continues.  If not, it is *reserved* at its earliest start (the "shadow time": running jobs,
  including those started by this round, are released in order of requested end
  ``start + walltime_s``, ties by submit time then id, until the job can be placed).  With
  ``Backfill.NONE`` the round stops there (head-of-line blocking).  With ``Backfill.EASY`` the round
  enters the BACKFILL phase.
* **BACKFILL phase**: a job may start now if it can be placed now and either ends
  (``now + walltime_s``) at or before the shadow time, or the reserved job can still be placed at
  the shadow time with the backfilled job's placement held.  Only those jobs are candidates; the
  policy picks among them until none remain.  Exactly one reservation.

:func:`decide` is the entry point.  Ordering policies take a fast path (order once, walk the
order).  Stepping policies drive a :class:`DecisionRun`, which callers (the batched ONNX pipeline)
may also drive themselves: ``while not run.done: run.apply(pick(run.view()))``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np

from app.domains.hpc.policy import OrderingPolicy, Phase, SteppingPolicy, StepView
from app.domains.hpc.types import (
    Allocation,
    Backfill,
    ClusterState,
    Decision,
    Job,
    Node,
    NodeState,
    Placement,
    PlacementStrategy,
    PolicyRef,
    Reservation,
    Resources,
    RunningJob,
)
from app.kernel.errors import DecisionFinishedError, InvalidPickError, SnapshotError
from app.kernel.resources import FIT_EPS, to_tuple
from app.kernel.timefmt import when
from tests.unit.domain.reference.placement import (
    FloatArray,
    IntArray,
    RowPlacement,
    feasible,
    inverse_capacity,
    max_tasks_per_node,
    place_rows,
    slack_matrix,
)

__all__ = [
    "DecisionConfig",
    "DecisionRun",
    "apply_decision",
    "decide",
    "earliest_start",
    "validate_snapshot",
]

REASON_DOES_NOT_FIT = "does not fit"
REASON_BLOCKED = "blocked by reservation"
REASON_DEPENDENCIES = "dependencies unfinished"
REASON_UNSCHEDULABLE = "unschedulable"
REASON_MAX_ALLOCATIONS = "max_allocations reached"
REASON_NO_KNOWN_END = "blocked: resources held with no known end"


@dataclass(frozen=True, slots=True)
class DecisionConfig:
    backfill: Backfill = Backfill.EASY
    placement: PlacementStrategy = PlacementStrategy.FIRST_FIT
    #: stop after this many allocations (``None``: no limit)
    max_allocations: int | None = None
    #: build ``Decision.explain`` (costs an extra pass over the queue)
    explain: bool = False


def _end_key(x: float) -> float:
    return math.inf if math.isnan(x) else x


def _fmt(x: float) -> str:
    return f"{x:g}"


@dataclass(slots=True)
class _Info:
    """A pending job converted once per decision to dense vectors."""

    job: Job
    demand: FloatArray
    positive: IntArray
    total: tuple[float, ...]  # tasks * demand
    job_demand: tuple[float, ...]  # per task, as floats in resource order
    tasks: int
    single: bool
    key: tuple[object, ...]  # shape key: same key, same fit/placement
    invalid: str | None = None


@dataclass(slots=True)
class _Release:
    """A running job's resources on ``up`` rows, released at its requested end."""

    end: float
    submit: float
    job_id: str
    rows: list[int]
    tasks: list[int]
    demand: tuple[float, ...]

    def sort_key(self) -> tuple[float, float, str]:
        return (_end_key(self.end), self.submit, self.job_id)


@dataclass(slots=True)
class _StepCache:
    fits: list[bool]
    mask: list[bool]
    candidates: list[_Info]


def _check_vector(r: Resources, where: str) -> None:
    for name, v in r.items():
        try:
            ok = 0.0 <= v < math.inf  # False for NaN
        except TypeError:
            ok = False
        if not ok:
            raise SnapshotError(where, f"{name}={v!r} must be a finite number >= 0")


def _check_within(used: Resources, capacity: Resources, field: str, what: str) -> None:
    for name, a in used.items():
        c = float(capacity.get(name, 0.0))
        if a > c + FIT_EPS * max(1.0, c):
            raise SnapshotError(field, f"{what}: {name}={_fmt(a)} exceeds capacity {_fmt(c)}")


def _validate_nodes(state: ClusterState) -> dict[str, Node]:
    nodes: dict[str, Node] = {}
    for i, n in enumerate(state.nodes):
        if n.id in nodes:
            raise SnapshotError(f"nodes[{i}].id", f"duplicate node id {n.id!r}")
        nodes[n.id] = n
        _check_vector(n.capacity, f"nodes[{i}].capacity")
        _check_vector(n.allocated, f"nodes[{i}].allocated")
        _check_within(n.allocated, n.capacity, f"nodes[{i}].allocated", f"node {n.id!r} allocated")
    return nodes


def _validate_running(state: ClusterState, nodes: Mapping[str, Node], seen: set[str]) -> None:
    used: dict[str, dict[str, float]] = {}
    for i, rj in enumerate(state.running):
        job = rj.job
        where = f"running[{i}].placements"
        if job.id in seen:
            raise SnapshotError(f"running[{i}].job.id", f"duplicate job id {job.id!r}")
        seen.add(job.id)
        _check_vector(job.per_task, f"running[{i}].job.per_task")
        if not (math.isfinite(rj.start_time) and math.isfinite(job.walltime_s)):
            raise SnapshotError(f"running[{i}]", "start_time and walltime_s must be finite")
        total_tasks = 0
        for p in rj.placements:
            if p.node_id not in nodes:
                raise SnapshotError(where, f"job {job.id!r} placed on unknown node {p.node_id!r}")
            if p.tasks < 1:
                raise SnapshotError(where, "tasks per placement must be >= 1")
            total_tasks += p.tasks
            u = used.setdefault(p.node_id, {})
            for name, d in job.per_task.items():
                u[name] = u.get(name, 0.0) + d * p.tasks
        if total_tasks != job.tasks:
            raise SnapshotError(
                where,
                f"job {job.id!r}: placements hold {total_tasks} tasks, the job has {job.tasks}",
            )
    for node_id, u in used.items():
        _check_within(u, nodes[node_id].capacity, "running", f"running jobs on node {node_id!r}")


def validate_snapshot(state: ClusterState) -> None:
    """Raise :class:`SnapshotError` unless the snapshot is consistent.

    Checks: ``now`` finite; node ids unique; capacities and allocations finite and non-negative;
    no node allocated beyond capacity (with :data:`~app.kernel.resources.FIT_EPS` slack); running
    placements name known nodes with ``tasks >= 1`` summing to the job's ``tasks``; running jobs'
    demand on each node within its capacity; job ids unique across running and pending.
    Pending jobs with invalid numbers are not refused here: they are reported unschedulable.
    """
    if not math.isfinite(state.now):
        raise SnapshotError("now", "must be a finite number")
    nodes = _validate_nodes(state)
    seen: set[str] = set()
    _validate_running(state, nodes, seen)
    for i, job in enumerate(state.pending):
        if job.id in seen:
            raise SnapshotError(f"pending[{i}].id", f"duplicate job id {job.id!r}")
        seen.add(job.id)


def _invalid_reason(job: Job) -> str | None:
    if job.tasks < 1:
        return f"invalid: tasks={job.tasks} (must be >= 1)"
    for name, v in job.per_task.items():
        if not (math.isfinite(v) and v >= 0.0):
            return f"invalid: per_task {name}={v!r}"
    if not job.walltime_s >= 0.0:
        return f"invalid: walltime_s={job.walltime_s!r}"
    return None


class DecisionRun:
    """A resumable decision: ``view()`` -> pick -> ``apply(index)`` until ``done``.

    All resource arithmetic happens on a dense ``(up nodes sorted by id) x (resources)`` matrix
    built once in the constructor (which validates the snapshot: :class:`SnapshotError`).
    """

    def __init__(self, state: ClusterState, config: DecisionConfig | None = None) -> None:
        validate_snapshot(state)
        self.state = state
        self.config = config if config is not None else DecisionConfig()
        self.now = float(state.now)
        self._build_matrices(state)
        self._build_jobs(state)
        self._allocations: list[Allocation] = []
        self._allocated: set[str] = set()
        self._reservation: Reservation | None = None
        self._reserved: _Info | None = None
        self._shadow_free: FloatArray | None = None
        self._phase = Phase.HEAD
        self._stopped = False
        self._picks: list[str] = []
        self._fit_cache: dict[tuple[object, ...], RowPlacement | None] = {}
        self._hold_cache: dict[tuple[object, ...], bool] = {}  # rule (b) per job shape
        self._step: _StepCache | None = None
        self._max_free: list[float] | None = None
        self._reachable: FloatArray | None = None
        self._exclusion_cache: dict[tuple[object, ...], str | None] = {}
        if self.config.max_allocations is not None and self.config.max_allocations <= 0:
            self._stopped = True

    # ------------------------------------------------------------------ construction

    def _build_matrices(self, state: ClusterState) -> None:
        names: set[str] = set()
        for n in state.nodes:
            names.update(n.capacity)
            names.update(n.allocated)
        for j in state.pending:
            names.update(j.per_task)
        for rj in state.running:
            names.update(rj.job.per_task)
        self.resource_names: tuple[str, ...] = tuple(sorted(names))
        names_t = self.resource_names
        self._up_nodes: list[Node] = sorted(
            (n for n in state.nodes if n.state == NodeState.UP), key=lambda n: n.id
        )
        self._row: dict[str, int] = {n.id: i for i, n in enumerate(self._up_nodes)}
        r = len(names_t)
        shape = (len(self._up_nodes), r)
        cap = np.array([to_tuple(n.capacity, names_t) for n in self._up_nodes]).reshape(shape)
        alloc = np.array([to_tuple(n.allocated, names_t) for n in self._up_nodes]).reshape(shape)
        # node.allocated is authoritative, but never count less than the running jobs use
        used: dict[int, list[float]] = {}
        self._releases: list[_Release] = []
        row_of = self._row
        for rj in state.running:
            demand = to_tuple(rj.job.per_task, names_t)
            rows: list[int] = []
            tasks: list[int] = []
            for p in rj.placements:
                row = row_of.get(p.node_id)
                if row is None:
                    continue  # down/drain node: what it frees cannot be used
                rows.append(row)
                tasks.append(p.tasks)
                u = used.get(row)
                if u is None:
                    u = used[row] = [0.0] * r
                for c in range(r):
                    u[c] += p.tasks * demand[c]
            self._releases.append(
                _Release(rj.expected_end, rj.job.submit_time, rj.job.id, rows, tasks, demand)
            )
        for row, u in used.items():
            np.maximum(alloc[row], u, out=alloc[row])
        self._cap: FloatArray = cap
        self._slack: FloatArray = slack_matrix(cap)
        self._inv_cap: FloatArray = inverse_capacity(cap)
        self._free: FloatArray = cap - alloc
        self._free_total: list[float] = self._free.sum(axis=0).tolist()
        self._slack_total: list[float] = self._slack.sum(axis=0).tolist()
        self._largest: list[float] = cap.max(axis=0).tolist() if len(self._up_nodes) else [0.0] * r
        self._cap_total: list[float] = cap.sum(axis=0).tolist()

    def _build_jobs(self, state: ClusterState) -> None:
        finished = state.finished
        pending = sorted(state.pending, key=lambda j: (j.submit_time, j.id))
        self._blocked_deps: dict[str, tuple[str, ...]] = {}
        self._infos: list[_Info] = []
        self._by_id: dict[str, _Info] = {}
        names = self.resource_names
        vectors: dict[tuple[float, ...], tuple[FloatArray, IntArray]] = {}
        for job in pending:
            if job.depends_on:
                missing = tuple(d for d in job.depends_on if d not in finished)
                if missing:
                    self._blocked_deps[job.id] = missing
                    continue
            invalid = _invalid_reason(job)
            dt = to_tuple(job.per_task, names)
            if invalid is not None:
                dt = tuple(v if v > 0.0 and math.isfinite(v) else 0.0 for v in dt)
            vec = vectors.get(dt)
            if vec is None:
                demand = np.array(dt, dtype=np.float64)
                vec = vectors[dt] = (demand, np.flatnonzero(demand > 0.0))
            tasks = max(int(job.tasks), 0)
            single = job.single_node
            info = _Info(
                job=job,
                demand=vec[0],
                positive=vec[1],
                total=tuple(tasks * v for v in dt),
                job_demand=dt,
                tasks=tasks,
                single=single,
                key=(tasks, single, dt),
                invalid=invalid,
            )
            self._infos.append(info)
            self._by_id[job.id] = info

    def _release_all(self, free: FloatArray, releases: Iterable[_Release]) -> None:
        rows: list[int] = []
        amounts: list[list[float]] = []
        for rel in releases:
            for row, t in zip(rel.rows, rel.tasks, strict=True):
                rows.append(row)
                amounts.append([t * v for v in rel.demand])
        if rows:
            np.add.at(free, np.array(rows, dtype=np.intp), np.array(amounts))

    def _exclusion(self, info: _Info) -> str | None:
        """Why ``info`` can never start in this round (unschedulable / no known end), or None."""
        if info.invalid is not None:
            return f"{REASON_UNSCHEDULABLE}: {info.invalid}"
        cache = self._exclusion_cache
        if info.key in cache:
            return cache[info.key]
        reason: str | None = None
        if not self._feasible_on(self._cap, info):
            reason = f"{REASON_UNSCHEDULABLE}: {self._why_unschedulable(info)}"
        else:
            if self._reachable is None:
                reachable = self._free.copy()
                self._release_all(reachable, self._releases)
                self._reachable = reachable
            if not self._feasible_on(self._reachable, info):
                reason = f"{REASON_NO_KNOWN_END} (node allocations exceed what running jobs hold)"
        cache[info.key] = reason
        return reason

    def _why_unschedulable(self, info: _Info) -> str:
        if not self._up_nodes:
            return "no node is up"
        names = self.resource_names
        for c in info.positive.tolist():
            if info.demand[c] > self._largest[c] + FIT_EPS * max(1.0, self._largest[c]):
                return (
                    f"needs {names[c]}={_fmt(info.demand[c])} per task > largest node "
                    f"({_fmt(self._largest[c])})"
                )
        if info.single:
            return f"needs all {info.tasks} tasks on one node; no node can hold them"
        for c in info.positive.tolist():
            if info.total[c] > self._cap_total[c] + self._slack_total[c]:
                return (
                    f"needs {names[c]}={_fmt(info.total[c])} in total > schedulable capacity "
                    f"({_fmt(self._cap_total[c])})"
                )
        return f"needs {info.tasks} tasks; the schedulable nodes cannot hold them together"

    # ------------------------------------------------------------------ resource arithmetic

    def _k(self, free: FloatArray, info: _Info) -> FloatArray:
        return max_tasks_per_node(free, self._slack, info.demand, info.positive, info.tasks)

    def _feasible_on(self, free: FloatArray, info: _Info) -> bool:
        if info.tasks <= 0 or free.shape[0] == 0:
            return False
        return feasible(self._k(free, info), info.tasks, info.single)

    def _place_now(self, info: _Info) -> RowPlacement | None:
        """Placement on the current free resources (cached per job shape until the next change)."""
        cache = self._fit_cache
        key = info.key
        if key in cache:
            return cache[key]
        result: RowPlacement | None = None
        if info.tasks > 0 and self._up_nodes and info.invalid is None:
            ft, st = self._free_total, self._slack_total
            positive = info.positive.tolist()
            ok = all(info.total[c] <= ft[c] + st[c] for c in positive)
            if ok and positive:
                mx = self._max_free
                if mx is None:
                    mx = self._max_free = (self._free + self._slack).max(axis=0).tolist()
                per_node = info.total if info.single else info.job_demand
                ok = all(per_node[c] <= mx[c] for c in positive)
            if ok:
                k = self._k(self._free, info)
                result = place_rows(
                    self.config.placement,
                    k,
                    info.tasks,
                    info.single,
                    self._free,
                    self._inv_cap,
                    info.demand,
                )
        cache[key] = result
        return result

    def _allocate(self, info: _Info, rows: RowPlacement) -> None:
        for row, t in rows:
            self._free[row] -= t * info.demand
        for c in info.positive.tolist():
            self._free_total[c] -= info.total[c]
        self._releases.append(
            _Release(
                self.now + info.job.walltime_s,
                info.job.submit_time,
                info.job.id,
                [r for r, _ in rows],
                [t for _, t in rows],
                info.job_demand,
            )
        )
        self._allocations.append(
            Allocation(info.job.id, tuple(Placement(self._up_nodes[r].id, t) for r, t in rows))
        )
        self._allocated.add(info.job.id)
        self._fit_cache.clear()
        self._hold_cache.clear()
        self._max_free = None
        if (
            self.config.max_allocations is not None
            and len(self._allocations) >= self.config.max_allocations
        ):
            self._stopped = True

    def _earliest(self, info: _Info) -> tuple[float, FloatArray] | None:
        """Earliest start ``t >= now`` of ``info`` and the free matrix at ``t``.

        The matrix holds every release with requested end ``<= t`` (overdue jobs, whose requested
        end is already past, count as released at ``now``), so it is exactly what a recomputation
        from the final allocations sees at ``t``; ties in end time release together.  Feasibility
        only grows with ``t``, so the first feasible release time is found by bisection over the
        distinct end times (a few feasibility tests instead of one per running job).
        """
        releases = sorted(self._releases, key=_Release.sort_key)
        # times[g] and the number of releases ended by then; times[0] = now (overdue included)
        times: list[float] = [self.now]
        counts: list[int] = [0]
        for i, rel in enumerate(releases):
            end = _end_key(rel.end)
            if math.isinf(end):
                break
            if end <= self.now:
                counts[0] = i + 1
            elif end == times[-1]:
                counts[-1] = i + 1
            else:
                times.append(end)
                counts.append(i + 1)

        # flatten (row, amount) of every placement once, in release order
        rows: list[int] = []
        amounts: list[list[float]] = []
        ends_at: list[int] = []  # placements[:ends_at[i]] belong to releases[:i + 1]
        for rel in releases[: counts[-1]]:
            for row, t in zip(rel.rows, rel.tasks, strict=True):
                rows.append(row)
                amounts.append([t * v for v in rel.demand])
            ends_at.append(len(rows))
        rows_a = np.array(rows, dtype=np.intp)
        amounts_a = np.array(amounts, dtype=np.float64).reshape(len(rows), self._free.shape[1])

        def free_at(g: int) -> FloatArray:
            free = self._free.copy()
            m = ends_at[counts[g] - 1] if counts[g] else 0
            if m:
                np.add.at(free, rows_a[:m], amounts_a[:m])
            return free

        lo, hi = 0, len(times) - 1
        best = free_at(hi)
        if not self._feasible_on(best, info):
            return None
        while lo < hi:  # invariant: feasible at hi, and best is the matrix at hi
            mid = (lo + hi) // 2
            free = free_at(mid)
            if self._feasible_on(free, info):
                hi, best = mid, free
            else:
                lo = mid + 1
        return times[hi], best

    def _backfill_rows(self, info: _Info) -> RowPlacement | None:
        """Placement now if ``info`` may backfill without delaying the reservation, else None."""
        rows = self._place_now(info)
        if rows is None:
            return None
        reservation, reserved, shadow_free = self._reservation, self._reserved, self._shadow_free
        assert reservation is not None
        assert reserved is not None
        assert shadow_free is not None
        if self.now + info.job.walltime_s <= reservation.start_at:
            return rows
        # same shape, same placement, same answer until the next allocation
        ok = self._hold_cache.get(info.key)
        if ok is None:
            for row, t in rows:
                shadow_free[row] -= t * info.demand
            ok = self._feasible_on(shadow_free, reserved)
            for row, t in rows:
                shadow_free[row] += t * info.demand
            self._hold_cache[info.key] = ok
        return rows if ok else None

    def _reserve(self, info: _Info) -> None:
        found = self._earliest(info)
        if found is None:  # excluded up front by _classify; kept as a hard guard
            raise SnapshotError("running", f"no start time can be computed for {info.job.id!r}")
        start_at, free_then = found
        self._reservation = Reservation(info.job.id, start_at)
        self._reserved = info
        if self.config.backfill == Backfill.NONE:
            self._stopped = True
            return
        self._shadow_free = free_then
        self._phase = Phase.BACKFILL

    def _head(self, info: _Info) -> None:
        rows = self._place_now(info)
        if rows is not None:
            self._allocate(info, rows)
        elif self._exclusion(info) is None:  # never reserve a job that cannot ever start
            self._reserve(info)

    def _backfill(self, info: _Info) -> bool:
        rows = self._backfill_rows(info)
        if rows is None:
            return False
        ends_after_shadow = self.now + info.job.walltime_s > self._reservation_start()
        self._allocate(info, rows)
        if ends_after_shadow:  # it holds its placement at the shadow time
            shadow_free = self._shadow_free
            assert shadow_free is not None
            for row, t in rows:
                shadow_free[row] -= t * info.demand
        return True

    def _reservation_start(self) -> float:
        assert self._reservation is not None
        return self._reservation.start_at

    # ------------------------------------------------------------------ ordering fast path

    def orderable(self) -> list[Job]:
        """Eligible jobs an ordering policy should rank (FCFS order, invalid jobs removed).

        Unschedulable jobs are not filtered here (that would cost a feasibility test per job
        shape); the walk skips them when they come up, so they are never reserved.
        """
        return [i.job for i in self._infos if i.invalid is None]

    def run_order(self, order: Iterable[Job]) -> None:
        """Drive the round with a fixed order (the :class:`OrderingPolicy` path).

        Equivalent to a stepping policy that always picks the first allowed candidate in
        ``order``, without rebuilding the mask at every step: free resources only shrink within
        a round, so a job that does not fit now never will; the only jobs that may become
        allowed later are those that fit but would delay the reservation (another placement
        may suit the reservation once other jobs have taken some nodes), and they are retried,
        in order, after every backfill.  Unknown or repeated jobs are skipped.
        """
        by_id = self._by_id
        explain = self.config.explain
        deferred: list[_Info] = []
        seen: set[str] = set()
        for job in order:
            if self._stopped:
                break
            info = by_id.get(job.id)
            if info is None or info.invalid is not None or job.id in seen:
                continue
            seen.add(job.id)
            if explain:
                self._picks.append(job.id)
            if self._phase == Phase.HEAD:
                self._head(info)
            elif self._backfill(info):
                self._retry(deferred)
            elif self._place_now(info) is not None:
                deferred.append(info)
        self._stopped = True
        self._step = None

    def _retry(self, deferred: list[_Info]) -> None:
        """After a backfill: start the first deferred job that is now allowed, repeatedly."""
        i = 0
        while i < len(deferred) and not self._stopped:
            info = deferred[i]
            if self._place_now(info) is None:
                del deferred[i]  # will never fit again in this round
            elif self._backfill(info):
                del deferred[i]
                i = 0  # resources changed: earlier deferred jobs come first
            else:
                i += 1

    # ------------------------------------------------------------------ stepping interface

    def _compute_step(self) -> _StepCache:
        if self._step is not None:
            return self._step
        allocated = self._allocated
        candidates = [i for i in self._infos if i.job.id not in allocated]
        fits: list[bool] = []
        mask: list[bool] = []
        head = self._phase == Phase.HEAD
        for info in candidates:
            if self._exclusion(info) is not None:
                fits.append(False)
                mask.append(False)
                continue
            rows = self._place_now(info)
            fits.append(rows is not None)
            if head:
                mask.append(True)
            elif info is self._reserved or rows is None or self._stopped:
                mask.append(False)
            else:
                mask.append(self._backfill_rows(info) is not None)
        if self._stopped:
            mask = [False] * len(candidates)
        self._step = _StepCache(fits, mask, candidates)
        return self._step

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def done(self) -> bool:
        if self._stopped:
            return True
        return not any(self._compute_step().mask)

    @property
    def reservation(self) -> Reservation | None:
        return self._reservation

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        return tuple(self._allocations)

    def free(self) -> dict[str, dict[str, float]]:
        """Free resources per node id now (zero for nodes that are not ``up``)."""
        names = self.resource_names
        out: dict[str, dict[str, float]] = {n.id: {} for n in self.state.nodes}
        for row, values in enumerate(self._free.tolist()):
            out[self._up_nodes[row].id] = dict(zip(names, values, strict=True))
        return out

    def view(self) -> StepView:
        if self.done:
            raise DecisionFinishedError("the decision is done; call result()")
        step = self._compute_step()
        cap_total = dict(zip(self.resource_names, self._cap_total, strict=True))
        return StepView(
            now=self.now,
            phase=self._phase,
            nodes=self.state.nodes,
            free=MappingProxyType(self.free()),
            schedulable_capacity=MappingProxyType(cap_total),
            candidates=tuple(i.job for i in step.candidates),
            mask=tuple(step.mask),
            fits_now=tuple(step.fits),
            reservation=self._reservation,
            resource_names=self.resource_names,
        )

    def apply(self, index: int) -> None:
        """Apply the policy's pick: ``index`` into the last ``view().candidates``."""
        if self.done:
            raise DecisionFinishedError("the decision is done; call result()")
        step = self._compute_step()
        if not isinstance(index, int | np.integer) or not 0 <= int(index) < len(step.candidates):
            raise InvalidPickError(
                f"pick {index!r} out of range: {len(step.candidates)} candidates"
            )
        index = int(index)
        if not step.mask[index]:
            raise InvalidPickError(
                f"pick {index} ({step.candidates[index].job.id!r}) is masked out "
                f"in phase {self._phase.value}"
            )
        info = step.candidates[index]
        if self.config.explain:
            self._picks.append(info.job.id)
        if self._phase == Phase.HEAD:
            self._head(info)
        else:
            self._backfill(info)
        self._step = None

    # ------------------------------------------------------------------ result

    def result(self, policy: PolicyRef) -> Decision:
        reservations = (self._reservation,) if self._reservation is not None else ()
        explain: Mapping[str, object] = {}
        if self.config.explain:
            explain = self._explain()
        return Decision(
            allocations=tuple(self._allocations),
            reservations=reservations,
            queue_length=len(self.state.pending),
            policy=policy,
            explain=explain,
        )

    def _explain(self) -> dict[str, object]:
        not_started: dict[str, str] = {}
        unschedulable: list[str] = []
        for job_id, missing in self._blocked_deps.items():
            not_started[job_id] = f"{REASON_DEPENDENCIES}: {', '.join(missing)}"
        capped = (
            self.config.max_allocations is not None
            and len(self._allocations) >= self.config.max_allocations
        )
        for info in self._infos:
            job_id = info.job.id
            if job_id in self._allocated:
                continue
            excluded = self._exclusion(info)
            if excluded is not None:
                not_started[job_id] = excluded
                if excluded.startswith(REASON_UNSCHEDULABLE):
                    unschedulable.append(job_id)
            elif info is self._reserved and self._reservation is not None:
                start = when(self._reservation.start_at, self.now)
                not_started[job_id] = f"{REASON_DOES_NOT_FIT}; reserved to start at {start}"
            elif self._place_now(info) is None:
                not_started[job_id] = REASON_DOES_NOT_FIT
            elif self._reservation is not None:
                not_started[job_id] = REASON_BLOCKED
            elif capped:
                not_started[job_id] = REASON_MAX_ALLOCATIONS
            else:
                not_started[job_id] = "not picked"
        reservation = (
            {"job_id": self._reservation.job_id, "start_at": self._reservation.start_at}
            if self._reservation is not None
            else None
        )
        return {
            "order": list(self._picks),
            "backfill": self.config.backfill.value,
            "placement": self.config.placement.value,
            "reservation": reservation,
            "unschedulable": unschedulable,
            "not_started": not_started,
        }


def decide(
    state: ClusterState,
    policy: OrderingPolicy | SteppingPolicy,
    config: DecisionConfig | None = None,
) -> Decision:
    """One scheduling round of ``policy`` on ``state`` (see the module docstring)."""
    run = DecisionRun(state, config)
    if isinstance(policy, OrderingPolicy):
        run.run_order(policy.order(run.orderable(), run.now))
    else:
        while not run.done:
            run.apply(policy.pick(run.view()))
    return run.result(policy.ref)


def apply_decision(state: ClusterState, decision: Decision) -> ClusterState:
    """The snapshot after ``decision``'s allocations start at ``state.now``.

    Allocated jobs leave ``pending`` and join ``running``; node ``allocated`` grows accordingly.
    """
    if not decision.allocations:
        return state
    pending = {j.id: j for j in state.pending}
    add: dict[str, dict[str, float]] = {}
    running = list(state.running)
    for alloc in decision.allocations:
        job = pending.pop(alloc.job_id)
        running.append(RunningJob(job, alloc.placements, state.now))
        for p in alloc.placements:
            a = add.setdefault(p.node_id, {})
            for name, v in job.per_task.items():
                a[name] = a.get(name, 0.0) + v * p.tasks
    nodes = []
    for n in state.nodes:
        extra = add.get(n.id)
        if extra:
            allocated = dict(n.allocated)
            for name, v in extra.items():
                allocated[name] = allocated.get(name, 0.0) + v
            n = replace(n, allocated=allocated)
        nodes.append(n)
    kept = tuple(j for j in state.pending if j.id in pending)
    return replace(state, nodes=tuple(nodes), running=tuple(running), pending=kept)


def earliest_start(
    state: ClusterState, job: Job, config: DecisionConfig | None = None
) -> float | None:
    """Earliest time ``job`` could start on ``state`` (releasing running jobs by requested end).

    ``state.now`` if it fits now; ``None`` if it can never start (unschedulable, or resources
    held with no known end).  ``job`` need not be in ``state.pending``.
    """
    probe = replace(
        state,
        pending=(*(j for j in state.pending if j.id != job.id), replace(job, depends_on=())),
    )
    run = DecisionRun(probe, config)
    info = run._by_id[job.id]
    if run._exclusion(info) is not None:
        return None
    found = run._earliest(info)
    return None if found is None else found[0]
