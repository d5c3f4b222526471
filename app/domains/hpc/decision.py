"""One scheduling round: a snapshot and a policy in, a :class:`~app.domains.hpc.types.Decision` out.

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
order); ranking policies score the first view once and take the same path
(:meth:`DecisionRun.run_ranked`).  Stepping policies drive a :class:`DecisionRun`, which callers
(the batched ONNX pipeline) may also drive themselves:
``while not run.done: run.apply(pick(run.view()))``.
"""

from __future__ import annotations

import contextlib
import math
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from app.domains.hpc.easy import EasyRound, backfill_mask
from app.domains.hpc.encoding import ObsArray, StepArrays, static_features
from app.domains.hpc.policy import OrderingPolicy, Phase, RankingPolicy, SteppingPolicy, StepView
from app.domains.hpc.types import (
    SINGLE_NODE_LABEL,
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
from app.kernel.placement import (
    FloatArray,
    IntArray,
    RowPlacement,
    feasible,
    inverse_capacity,
    max_tasks_from,
    max_tasks_per_node,
    place_rows,
    slack_matrix,
)
from app.kernel.resources import FIT_EPS, to_tuple
from app.kernel.timefmt import when

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

#: first-fit placement scans every row in Python floats up to this many up nodes; above it,
#: each job shape walks only the rows still live for it (``DecisionRun._shape_first_fit``)
SCAN_MAX_ROWS = 64

#: first-fit on large clusters: a walk that has found this many dead rows tests the next
#: :data:`UNLINK_BLOCK` rows at once
UNLINK_AFTER = 32
UNLINK_BLOCK = 1024
#: a row found dead for a spread shape is unlinked for up to this many other shapes per column
UNLINK_PUSH = 24

_INF = math.inf


@dataclass(frozen=True, slots=True)
class DecisionConfig:
    backfill: Backfill = Backfill.EASY
    placement: PlacementStrategy = PlacementStrategy.FIRST_FIT
    #: stop after this many allocations (``None``: no limit)
    max_allocations: int | None = None
    #: build ``Decision.explain`` (costs an extra pass over the queue)
    explain: bool = False


def _first_descending(entry: tuple[float, object]) -> float:
    return -entry[0]


def _fcfs_key(job: Job) -> tuple[float, str]:
    return (job.submit_time, job.id)


def _end_key(x: float) -> float:
    return math.inf if math.isnan(x) else x


def _fmt(x: float) -> str:
    return f"{x:g}"


#: a job shape: (tasks, single node, per-task demand); equal shapes fit and place alike
_ShapeKey = tuple[int, bool, tuple[float, ...]]


@dataclass(slots=True)
class _Info:
    """A pending job converted once per decision to dense vectors."""

    job: Job
    demand: FloatArray
    positive: IntArray
    cols: list[int]  # ``positive`` as a list (the Python-float paths iterate it)
    total: tuple[float, ...]  # tasks * demand
    job_demand: tuple[float, ...]  # per task, as floats in resource order
    tasks: int
    single: bool
    key: tuple[object, ...]  # shape key: same key, same fit/placement
    invalid: str | None = None
    index: int = -1  # position in DecisionRun._infos
    shape: int = -1  # position of ``key`` in DecisionRun._shape_keys


@dataclass(slots=True)
class _Release:
    """A running job's resources on ``up`` rows, released at its requested end."""

    end: float
    submit: float
    job_id: str
    placed: RowPlacement  # (row, tasks) per up node
    demand: tuple[float, ...]

    def sort_key(self) -> tuple[float, float, str]:
        return (_end_key(self.end), self.submit, self.job_id)


BoolArray = npt.NDArray[np.bool_]


_HoldMemo = tuple[tuple[tuple[int, int], ...], list[int], float, int]


@dataclass(slots=True)
class _ShadowK:
    """The reserved job's tasks per row on the shadow-time matrix, their sum and the number of
    rows that hold it whole (integers held in floats: the sums are exact)."""

    k: list[float]
    total: float
    full: int


def _skip_dead(nxt: list[int], row: int) -> int:
    """The first row at or after ``row`` not known to be dead in a :func:`_live_links` list
    (path halving: the links stay valid and get shorter)."""
    while True:
        up = nxt[row]
        if up == row:
            return row
        nxt[row] = nxt[up]
        row = up


def _unlink_spread(
    spread_links: list[list[tuple[float, list[int]]]],
    row: int,
    free: list[float],
    slack: list[float],
    demand: tuple[float, ...],
    cols: list[int],
) -> None:
    """Row ``row`` holds no task of ``demand``: unlink it for every spread shape that needs more
    than the row has (``free + slack``) in a column where ``demand`` does not fit (for ``d > 0``,
    ``fl(a / d) < 1`` iff ``a < d``: such a shape's ``k`` is 0 there)."""
    for c in cols:
        have = free[c] + slack[c]
        if have < demand[c]:
            by_need = spread_links[c]
            # the shapes that need more than ``have`` are by_need[:last]; at most UNLINK_PUSH
            # of them, the closest above ``have`` first (the larger ones mostly know already)
            last = bisect_left(by_need, -have, key=_first_descending)
            for i in range(last - 1, max(last - 1 - UNLINK_PUSH, -1), -1):
                links = by_need[i][1]
                if links[row] == row:
                    links[row] = row + 1


def _live_links(alive: BoolArray) -> list[int]:
    """Row ``r`` -> the first live row at or after ``r`` (``len(alive)`` if none), plus the
    sentinel row ``len(alive)`` linked to itself: a live row links to itself."""
    n = alive.shape[0]
    at = np.where(alive, np.arange(n, dtype=np.intp), n)
    links: list[int] = np.minimum.accumulate(at[::-1])[::-1].tolist()
    links.append(n)
    return links


@dataclass(slots=True)
class _StepCache:
    fits: BoolArray
    mask: BoolArray
    candidates: list[_Info]
    at: IntArray  # positions of the candidates in ``DecisionRun._infos``
    view: StepView | None = None


@dataclass(slots=True)
class _Vectors:
    """The stepping path's per-decision arrays (built on the first step): ``[S, ...]`` rows are
    job shapes (``_Info.shape``: same key, same fit), ``[J]`` rows are ``_Info``s.

    ``fits_now`` of every shape is computed for all node rows at once from ``k`` (tasks that fit
    per shape and node), which is kept up to date by recomputing only the node columns an
    allocation touched; a job's value is its shape's.  Every value equals what ``_place_now``
    computes job by job (same float operations).
    """

    demand: FloatArray  # [S, R] per task (sanitised like _Info.demand)
    #: [S, R] tasks * demand, -inf where the demand is not positive (the pre-check skips those)
    total: FloatArray
    need: FloatArray  # [S, R] per-node need of the "largest free" pre-check, -inf likewise
    safe: FloatArray  # [S, R] demand, 1.0 where not positive (no division by zero)
    positive: BoolArray  # [S, R]
    tasks: FloatArray  # [S]
    single: BoolArray  # [S]
    any_single: bool
    #: some ``free / demand`` may overflow (subnormal demand): divide under ``np.errstate``
    overflow: bool
    shape: IntArray  # [J] the job's shape
    usable: BoolArray  # [J] valid, tasks > 0, some node up
    excluded: BoolArray  # [J] unschedulable / no known end (never changes within a round)
    alive: BoolArray  # [J] not allocated yet
    ends: FloatArray  # [J] now + walltime_s
    k: FloatArray  # [S, N]
    dirty: set[int]  # node rows whose k column is stale
    fits: BoolArray | None = None  # [J], valid until the next allocation
    # encoder inputs (raw job values, as the encoder reads them from the jobs)
    raw_total: FloatArray | None = None
    submit: FloatArray | None = None
    walltime: FloatArray | None = None
    priority: FloatArray | None = None
    static: ObsArray | None = None


class _FreeView(Mapping[str, Resources]):
    """``StepView.free`` built on first access from a copy of the free matrix at that step."""

    __slots__ = ("_data", "_free", "_names", "_nodes", "_up")

    def __init__(
        self, free: FloatArray, names: tuple[str, ...], nodes: tuple[Node, ...], up: list[Node]
    ) -> None:
        self._free = free
        self._names = names
        self._nodes = nodes
        self._up = up
        self._data: dict[str, Resources] | None = None

    def _materialise(self) -> dict[str, Resources]:
        if self._data is None:
            out: dict[str, Resources] = {n.id: {} for n in self._nodes}
            names = self._names
            for row, values in enumerate(self._free.tolist()):
                out[self._up[row].id] = dict(zip(names, values, strict=True))
            self._data = out
        return self._data

    def __getitem__(self, key: str) -> Resources:
        return self._materialise()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._materialise())

    def __len__(self) -> int:
        return len(self._nodes)


def _flat_releases(
    releases: Sequence[_Release], width: int
) -> tuple[IntArray, FloatArray, list[int]]:
    """Every placement of ``releases``, in order: its row, its amount ``tasks * demand`` (the
    product of Python floats), and per release the number of placements up to and including
    it."""
    counts = [len(rel.placed) for rel in releases]
    rows = np.array([row for rel in releases for row, _ in rel.placed], dtype=np.intp)
    tasks = np.array([t for rel in releases for _, t in rel.placed], dtype=np.float64)
    demand = np.array([rel.demand for rel in releases], dtype=np.float64)
    demand = demand.reshape(len(releases), width)
    amounts: FloatArray = np.repeat(demand, counts, axis=0) * tasks[:, None]
    ends_at: list[int] = np.cumsum(counts, dtype=np.intp).tolist()
    return rows, amounts, ends_at


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


def _tasks_on_row(
    free: list[float], slack: list[float], demand: tuple[float, ...], cols: list[int], tasks: int
) -> int:
    """:func:`~app.kernel.placement.max_tasks_per_node` of one row in Python floats (the same
    IEEE operations as numpy): ``floor(min_c (free + slack) / demand)`` clipped to
    ``[0, tasks]`` over the positive columns ``cols``."""
    if not cols:
        return tasks
    q = min([(free[c] + slack[c]) / demand[c] for c in cols])
    # q >= tasks also covers q = inf (a subnormal demand); q < 1 (and NaN) holds no task
    return tasks if q >= tasks else (math.floor(q) if q >= 1.0 else 0)


def validate_snapshot(state: ClusterState) -> None:
    """Raise :class:`SnapshotError` unless the snapshot is consistent.

    Checks: ``now`` finite; node ids unique; capacities and allocations finite and non-negative;
    no node allocated beyond capacity (with :data:`~app.kernel.resources.FIT_EPS` slack); running
    placements name known nodes with ``tasks >= 1`` summing to the job's ``tasks``; running jobs'
    demand on each node within its capacity; job ids unique across running and pending.
    Pending jobs with invalid numbers are not refused here: they are reported unschedulable.
    """
    _validate(state, _resource_names(state))


def _resource_names(state: ClusterState) -> tuple[str, ...]:
    """Every resource name of the snapshot, sorted: the matrices' columns."""
    names: set[str] = set()
    for n in state.nodes:
        names.update(n.capacity)
        names.update(n.allocated)
    for j in state.pending:
        names.update(j.per_task)
    for rj in state.running:
        names.update(rj.job.per_task)
    return tuple(sorted(names))


def _validate(state: ClusterState, names: tuple[str, ...]) -> tuple[FloatArray, FloatArray] | None:
    """:func:`validate_snapshot`; returns the capacity and allocated matrices of every node
    (``state.nodes`` order, ``names`` columns) when the vectorised node checks pass (else the
    per-node checks run and ``None`` is returned)."""
    if not math.isfinite(state.now):
        raise SnapshotError("now", "must be a finite number")
    matrices = _node_matrices(state.nodes, names)
    ids = [n.id for n in state.nodes]
    if matrices is None or len(set(ids)) != len(ids):
        nodes = _validate_nodes(state)  # raises the first error, in node order
        matrices = None
    else:
        nodes = dict(zip(ids, state.nodes, strict=True))
    seen: set[str] = set()
    _validate_running(state, nodes, seen)
    for i, job in enumerate(state.pending):
        if job.id in seen:
            raise SnapshotError(f"pending[{i}].id", f"duplicate job id {job.id!r}")
        seen.add(job.id)
    return matrices


def _node_matrices(
    nodes: Sequence[Node], names: tuple[str, ...]
) -> tuple[FloatArray, FloatArray] | None:
    """Capacity and allocated matrices of ``nodes`` when every amount is a number that the
    per-node checks accept (finite, ``>= 0``, allocations within capacity plus ``FIT_EPS``) and
    that converts to float exactly; ``None`` otherwise (the per-node checks then decide)."""
    zeros = (0.0,) * len(names)
    shape = (len(nodes), len(names))
    if not nodes:
        return np.zeros(shape), np.zeros(shape)
    try:
        cap = np.array([tuple(map(n.capacity.get, names, zeros)) for n in nodes])
        alloc = np.array([tuple(map(n.allocated.get, names, zeros)) for n in nodes])
    except (TypeError, ValueError):  # e.g. a ragged value
        return None
    for m in (cap, alloc):
        if m.shape != shape or m.dtype.kind not in "biuf":
            return None
    cap = cap.astype(np.float64)
    alloc = alloc.astype(np.float64)
    # NaN fails both comparisons; amounts beyond 2**53 may not be exact floats
    for m in (cap, alloc):
        if m.size and not (m.min() >= 0.0 and m.max() < 2.0**53):
            return None
    if (alloc > cap + FIT_EPS * np.maximum(1.0, cap)).any():
        return None
    return cap, alloc


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
        self.resource_names: tuple[str, ...] = _resource_names(state)
        matrices = _validate(state, self.resource_names)
        self.state = state
        self.config = config if config is not None else DecisionConfig()
        self.now = float(state.now)
        self._build_matrices(state, matrices)
        self._build_jobs(state)
        self._allocations: list[Allocation] = []
        self._allocated: set[str] = set()
        self._reservation: Reservation | None = None
        self._shadow_free: FloatArray | None = None
        #: the EASY rules (phase, reservation, stop), on this run's matrix model
        self._easy: EasyRound[_Info, RowPlacement] = EasyRound(
            _MatrixModel(self), self.config.backfill
        )
        self._picks: list[str] = []
        self._fit_cache: dict[tuple[object, ...], RowPlacement | None] = {}
        self._hold_cache: dict[tuple[object, ...], bool] = {}  # rule (b) per job shape
        self._step: _StepCache | None = None
        self._max_free: list[float] | None = None
        self._reachable: FloatArray | None = None
        self._exclusion_cache: dict[tuple[object, ...], str | None] = {}
        self._vec: _Vectors | None = None
        self._free_slack: FloatArray | None = None  # free + slack, until the next allocation
        #: first-fit on large clusters: per job shape, the links past its dead rows
        #: (:func:`_live_links`; see ``_shape_first_fit``)
        self._live: dict[tuple[object, ...], list[int]] = {}
        #: per resource column, the spread shapes' links by their per-task demand there, largest
        #: first: a row with less ``free + slack`` in that column is dead for the first ones
        self._spread_links: list[list[tuple[float, list[int]]]] = [[] for _ in self.resource_names]
        self._shadow_k: _ShadowK | None = None  # the reserved job's k on the shadow matrix
        self._slack_rows: list[list[float]] | None = None
        #: per shadow-matrix row, bumped whenever the row changes
        self._shadow_version: list[int] = []
        #: rule (b) per job shape: (rows, their versions, change of the k sum, of full rows)
        self._hold_memo: dict[tuple[object, ...], _HoldMemo] = {}
        self._capacity: Mapping[str, float] | None = None
        if self.config.max_allocations is not None and self.config.max_allocations <= 0:
            self._easy.stopped = True

    # ------------------------------------------------------------------ construction

    def _build_matrices(
        self, state: ClusterState, matrices: tuple[FloatArray, FloatArray] | None
    ) -> None:
        names_t = self.resource_names
        nodes = state.nodes
        up = sorted(
            (i for i, n in enumerate(nodes) if n.state == NodeState.UP), key=lambda i: nodes[i].id
        )
        self._up_nodes: list[Node] = [nodes[i] for i in up]
        self._row: dict[str, int] = {n.id: i for i, n in enumerate(self._up_nodes)}
        self._up_ids: list[str] = [n.id for n in self._up_nodes]
        #: up rows in ``state.nodes`` order (the order of ``StepView.free``)
        self._rows_in_node_order: IntArray = np.array(
            [self._row[n.id] for n in state.nodes if n.id in self._row], dtype=np.intp
        )
        r = len(names_t)
        shape = (len(self._up_nodes), r)
        if matrices is not None:
            at = np.array(up, dtype=np.intp)
            cap, alloc = matrices[0][at].reshape(shape), matrices[1][at].reshape(shape)
        else:
            cap = np.array([to_tuple(n.capacity, names_t) for n in self._up_nodes]).reshape(shape)
            alloc = np.array([to_tuple(n.allocated, names_t) for n in self._up_nodes])
            alloc = alloc.reshape(shape)
        # node.allocated is authoritative, but never count less than the running jobs use
        used: dict[int, list[float]] = {}
        self._releases: list[_Release] = []
        row_of = self._row
        for rj in state.running:
            demand = to_tuple(rj.job.per_task, names_t)
            placed: RowPlacement = []
            for p in rj.placements:
                row = row_of.get(p.node_id)
                if row is None:
                    continue  # down/drain node: what it frees cannot be used
                placed.append((row, p.tasks))
                u = used.get(row)
                if u is None:
                    u = used[row] = [0.0] * r
                for c in range(r):
                    u[c] += p.tasks * demand[c]
            self._releases.append(
                _Release(rj.expected_end, rj.job.submit_time, rj.job.id, placed, demand)
            )
        for row, u in used.items():
            np.maximum(alloc[row], u, out=alloc[row])
        self._cap: FloatArray = cap
        self._slack: FloatArray = slack_matrix(cap)
        self._inv_cap: FloatArray = inverse_capacity(cap)
        free = cap - alloc
        self._free_np: FloatArray = free
        #: the free matrix as Python floats: what allocations update; ``_free`` (numpy) is
        #: brought up to date from it, row by row, when read
        self._free_rows: list[list[float]] = free.tolist()
        self._free_stale: set[int] = set()
        self._free_total: list[float] = free.sum(axis=0).tolist()
        self._first_fit = self.config.placement == PlacementStrategy.FIRST_FIT
        #: first-fit placement scans the list mirror row by row (see ``_scan_first_fit``)
        self._scan = self._first_fit and len(self._up_nodes) <= SCAN_MAX_ROWS
        self._slack_total: list[float] = self._slack.sum(axis=0).tolist()
        self._largest: list[float] = cap.max(axis=0).tolist() if len(self._up_nodes) else [0.0] * r
        self._cap_total: list[float] = cap.sum(axis=0).tolist()

    def _build_jobs(self, state: ClusterState) -> None:
        finished = state.finished
        pending = sorted(state.pending, key=_fcfs_key)
        self._blocked_deps: dict[str, tuple[str, ...]] = {}
        names = self.resource_names
        #: per kept job, ``per_task`` as read (the encoder's input; shapes are sanitised)
        self._raw_demand: list[tuple[float, ...]] = []
        raw_demand = self._raw_demand.append
        #: one entry per job shape (``_Info.key``): the fields of its ``_Info``s
        shapes: dict[_ShapeKey, _Info] = {}
        self._shape_keys: list[_ShapeKey] = []
        #: the positive columns per sign pattern of a demand (as an array and a list)
        self._positives: dict[tuple[bool, ...], tuple[IntArray, list[int]]] = {}
        self._infos: list[_Info] = []
        self._by_id: dict[str, _Info] = {}
        infos, by_id = self._infos, self._by_id
        zeros = (0.0,) * len(names)
        #: shapes by the job's own (tasks, single node, per_task values): most jobs share one
        by_raw: dict[tuple[object, ...], _Info] = {}
        for job in pending:
            if job.depends_on:
                missing = tuple(d for d in job.depends_on if d not in finished)
                if missing:
                    self._blocked_deps[job.id] = missing
                    continue
            raw = tuple(map(job.per_task.get, names, zeros))  # to_tuple, before float()
            raw_demand(raw)
            single = job.labels.get(SINGLE_NODE_LABEL) == "true"  # Job.single_node, inlined
            raw_key = (job.tasks, single, raw)
            shape = by_raw.get(raw_key)
            if shape is None:
                shape = by_raw[raw_key] = self._shape_of(job, single, raw, shapes)
            # the shape's ``invalid`` is set when its tasks or demand are invalid; then, or with
            # an invalid walltime, the job is (the reason is the job's own)
            invalid = (
                _invalid_reason(job)
                if shape.invalid is not None or not job.walltime_s >= 0.0
                else None
            )
            # positional: job, demand, positive, cols, total, job_demand, tasks, single, key,
            # invalid, index, shape
            info = _Info(
                job,
                shape.demand,
                shape.positive,
                shape.cols,
                shape.total,
                shape.job_demand,
                shape.tasks,
                single,
                shape.key,
                invalid,
                len(infos),
                shape.shape,
            )
            infos.append(info)
            by_id[job.id] = info
        r = len(names)
        #: the demand of every shape, one row each (the rows of ``_Info.job_demand``)
        self._shape_demand: FloatArray = np.array(
            [key[2] for key in self._shape_keys], dtype=np.float64
        ).reshape(len(self._shape_keys), r)
        demand = self._shape_demand
        self._overflow = self._may_overflow(demand[demand > 0.0])

    def _shape_of(
        self, job: Job, single: bool, raw: tuple[float, ...], shapes: dict[_ShapeKey, _Info]
    ) -> _Info:
        """The shape fields of ``job``'s ``_Info`` (``raw``: its per_task values in resource
        order), from ``shapes`` or added there; ``invalid`` is set when its tasks or demand are
        invalid (the demand is then sanitised: what is not a positive number counts as 0)."""
        dt = tuple([float(v) for v in raw])
        invalid: str | None = None
        if not (job.tasks >= 1 and all(0.0 <= v < _INF for v in dt)):
            invalid = "invalid"
            dt = tuple(v if v > 0.0 and math.isfinite(v) else 0.0 for v in dt)
        key: _ShapeKey = (max(int(job.tasks), 0), single, dt)
        found = shapes.get(key)
        if found is not None:
            return found if invalid is None else replace(found, invalid=invalid)
        tasks = key[0]
        demand = np.array(dt, dtype=np.float64)
        signs = tuple([v > 0.0 for v in dt])
        sign = self._positives.get(signs)
        if sign is None:
            positive = np.flatnonzero(demand > 0.0)
            sign = self._positives[signs] = (positive, positive.tolist())
        total = tuple([tasks * v for v in dt])
        shape = len(self._shape_keys)
        self._shape_keys.append(key)
        found = shapes[key] = _Info(
            job, demand, sign[0], sign[1], total, dt, tasks, single, key, None, -1, shape
        )
        return found if invalid is None else replace(found, invalid=invalid)

    @property
    def _free(self) -> FloatArray:
        """The free matrix (up rows sorted by id x resources), current."""
        stale = self._free_stale
        if stale:
            matrix, rows = self._free_np, self._free_rows
            for row in stale:
                matrix[row] = rows[row]
            stale.clear()
        return self._free_np

    def _release_all(self, free: FloatArray, releases: Sequence[_Release]) -> None:
        rows, amounts, _ = _flat_releases(releases, free.shape[1])
        if rows.size:
            np.add.at(free, rows, amounts)

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
        for c in info.cols:
            if info.demand[c] > self._largest[c] + FIT_EPS * max(1.0, self._largest[c]):
                return (
                    f"needs {names[c]}={_fmt(info.demand[c])} per task > largest node "
                    f"({_fmt(self._largest[c])})"
                )
        if info.single:
            return f"needs all {info.tasks} tasks on one node; no node can hold them"
        for c in info.cols:
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
        vec = self._vec
        if vec is not None and vec.fits is not None and not vec.dirty:
            # the stepping path has k and the pre-checks of every job for the current free matrix
            if vec.fits[info.index]:
                result = place_rows(
                    self.config.placement,
                    vec.k[info.shape],
                    info.tasks,
                    info.single,
                    self._free,
                    self._inv_cap,
                    info.demand,
                )
        elif info.tasks > 0 and self._up_nodes and info.invalid is None:
            ft, st = self._free_total, self._slack_total
            positive = info.cols
            total = info.total
            ok = True
            for c in positive:
                if not total[c] <= ft[c] + st[c]:
                    ok = False
                    break
            # the "largest free" pre-check; a scan of a job spread over nodes needs none: no
            # row with ``free + slack < demand`` can hold a task (fl(a / d) < 1 for a < d)
            if ok and positive and info.single:
                mx = self._max_free
                if mx is None:
                    mx = self._max_free = self._column_max_free()
                per_node = info.total if info.single else info.job_demand
                ok = all(per_node[c] <= mx[c] for c in positive)
            if ok and self._scan:
                result = self._scan_first_fit(info)
            elif ok and self._first_fit:
                result = self._shape_first_fit(info)
            elif ok:
                k = max_tasks_from(
                    self._free_plus_slack(),
                    info.demand,
                    info.positive,
                    info.tasks,
                    guard=self._overflow,
                )
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

    def _shape_first_fit(self, info: _Info) -> RowPlacement | None:
        """First-fit placement: rows in id order, skipping the rows dead for the job's shape.

        A row is *dead* for a shape when it holds no task (for a single-node shape: not the
        whole gang); free only shrinks within a round, so a dead row stays dead.  Each live
        row's ``k`` is computed when the walk reaches it (:func:`_tasks_on_row`, the same float
        computation as :func:`~app.kernel.placement.max_tasks_from`); a row found dead is
        unlinked, and once a walk has met :data:`UNLINK_AFTER` dead rows, so are the dead rows
        of the block that follows (:meth:`_unlink_dead`).  The
        placement is the one :func:`~app.kernel.placement.place_rows` takes from ``k`` of the
        whole matrix: a gang fits iff ``sum k >= tasks`` (one row with ``k >= tasks`` for a
        single-node job), and rows fill in id order.  A failed walk visits fewer than ``tasks``
        live rows (each holds at least one task).  No "largest free" pre-check is needed for a
        job spread over nodes: no row with ``free + slack < demand`` holds a task
        (``fl(a / d) < 1`` for ``a < d``).
        """
        tasks = info.tasks
        single = info.single
        # a spread shape's dead rows (k = 0) do not depend on ``tasks``
        links = self._live.get(info.key if single else info.job_demand)
        if links is None:
            links = self._shape_links(info)
        end = len(links) - 1
        spread_links = self._spread_links
        free_rows = self._free_rows
        slack = self._slack_row_lists()
        demand, cols = info.job_demand, info.cols
        out: RowPlacement = []
        remaining = tasks
        dead = 0  # rows found dead by this walk
        row = _skip_dead(links, 0)
        while row < end:
            # k = _tasks_on_row(free_rows[row], slack[row], demand, cols, tasks), inlined
            free, sl = free_rows[row], slack[row]
            q = min([(free[c] + sl[c]) / demand[c] for c in cols]) if cols else _INF
            k = tasks if q >= tasks else (math.floor(q) if q >= 1.0 else 0)
            if (single and k < tasks) or k <= 0:
                dead += 1
                if dead < UNLINK_AFTER:
                    links[row] = row + 1
                    if not single:
                        _unlink_spread(spread_links, row, free, sl, demand, cols)
                    row = _skip_dead(links, row + 1)
                else:  # a run of dead rows: test the rows ahead at once
                    self._unlink_dead(info, links, row)
                    row = _skip_dead(links, row)
                continue
            if single:
                return [(row, tasks)]
            t = k if k < remaining else remaining
            out.append((row, t))
            remaining -= t
            if not remaining:
                return out
            row = _skip_dead(links, row + 1)
        return None

    def _shape_links(self, info: _Info) -> list[int]:
        """New :func:`_live_links` of ``info``'s shape on the current free matrix (a spread
        shape's are also listed in ``_spread_links``)."""
        tasks, single = info.tasks, info.single
        ks = max_tasks_from(
            self._free_plus_slack(), info.demand, info.positive, tasks, guard=self._overflow
        )
        links = self._live[info.key if single else info.job_demand] = _live_links(
            ks >= tasks if single else ks > 0.0
        )
        if not single:
            for c in info.cols:
                insort(self._spread_links[c], (info.job_demand[c], links), key=_first_descending)
        return links

    def _unlink_dead(self, info: _Info, links: list[int], row: int) -> None:
        """Test rows ``row .. row + UNLINK_BLOCK`` of ``info``'s shape at once (``row`` is dead)
        and link each to the first live row after it in the block (or the block's end)."""
        stop = min(row + UNLINK_BLOCK, len(links) - 1)
        free = self._free[row:stop] + self._slack[row:stop]
        k = max_tasks_from(free, info.demand, info.positive, info.tasks, guard=self._overflow)
        alive = k >= info.tasks if info.single else k > 0.0
        alive[0] = False
        at = np.where(alive, np.arange(row, stop, dtype=np.intp), stop)
        links[row:stop] = np.minimum.accumulate(at[::-1])[::-1].tolist()

    def _column_max_free(self) -> list[float]:
        """Per resource, the largest ``free + slack`` of any row."""
        if not self._scan:
            out: list[float] = self._free_plus_slack().max(axis=0).tolist()
            return out
        slack = self._slack_row_lists()
        sums = [
            [f + s for f, s in zip(free, sl, strict=True)]
            for free, sl in zip(self._free_rows, slack, strict=True)
        ]
        return [max(column) for column in zip(*sums, strict=True)]

    def _scan_first_fit(self, info: _Info) -> RowPlacement | None:
        """First-fit placement on the list mirror of the free matrix.

        Rows in id order; each row's ``k`` is the same float computation as
        :func:`~app.kernel.placement.max_tasks_from` (``floor(min_c (free + slack) / demand)``
        clipped to ``[0, tasks]``), computed only until the gang is placed: on small clusters
        this costs a few Python operations instead of a dozen numpy calls.  A gang fits iff
        ``sum k >= tasks`` (``max k`` for one node), exactly as :func:`place_rows` decides.
        """
        tasks = info.tasks
        cols = info.cols
        demand = info.job_demand
        slack = self._slack_row_lists()
        if tasks == 1:
            # k >= 1 iff every ``free + slack >= demand``: for d > 0, fl(a / d) >= 1 iff a >= d
            for row, free in enumerate(self._free_rows):
                sl = slack[row]
                for c in cols:
                    if not free[c] + sl[c] >= demand[c]:
                        break
                else:
                    return [(row, 1)]
            return None
        out: RowPlacement = []
        remaining = tasks
        for row, free in enumerate(self._free_rows):
            k = _tasks_on_row(free, slack[row], demand, cols, tasks)
            if info.single:
                if k >= tasks:
                    return [(row, tasks)]
                continue
            if k > 0:
                take = min(k, remaining)
                out.append((row, take))
                remaining -= take
                if remaining == 0:
                    return out
        return None

    def _free_plus_slack(self) -> FloatArray:
        fs = self._free_slack
        if fs is None:
            fs = self._free_slack = self._free + self._slack
        return fs

    def _allocate(self, info: _Info, rows: RowPlacement) -> None:
        demand = info.job_demand
        cols = info.cols
        free_rows, stale, ids = self._free_rows, self._free_stale, self._up_ids
        placements: list[Placement] = []
        for row, t in rows:
            # ``free[row] -= t * demand`` on the positive columns (x - 0.0 == x elsewhere)
            free = free_rows[row]
            for c in cols:
                free[c] -= t * demand[c]
            stale.add(row)
            placements.append(Placement(ids[row], t))
        free_total, total = self._free_total, info.total
        for c in cols:
            free_total[c] -= total[c]
        job = info.job
        self._releases.append(
            _Release(self.now + job.walltime_s, job.submit_time, job.id, rows, demand)
        )
        self._allocations.append(Allocation(job.id, tuple(placements)))
        self._allocated.add(job.id)
        vec = self._vec
        if vec is not None:
            vec.alive[info.index] = False
            vec.dirty.update(row for row, _ in rows)
            vec.fits = None
        if self._fit_cache:
            self._fit_cache.clear()
        if self._hold_cache:
            self._hold_cache.clear()
        self._max_free = None
        self._free_slack = None

    def _capped(self) -> bool:
        return (
            self.config.max_allocations is not None
            and len(self._allocations) >= self.config.max_allocations
        )

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

        # (row, amount) of every placement once, in release order; placements[:ends_at[i]]
        # belong to releases[:i + 1]
        rows_a, amounts_a, ends_at = _flat_releases(releases[: counts[-1]], self._free.shape[1])

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

    def _holds(self, info: _Info, rows: RowPlacement) -> bool:
        """Rule (b) on the shadow-time matrix (same shape, same placement, same answer until
        the next allocation)."""
        ok = self._hold_cache.get(info.key)
        if ok is None:
            shadow_free = self._shadow_free
            assert shadow_free is not None
            ok = self._hold_cache[info.key] = self._reservation_holds(info, rows, shadow_free)
        return ok

    def _reservation_holds(self, info: _Info, rows: RowPlacement, shadow_free: FloatArray) -> bool:
        """EASY rule (b): can the reserved job still be placed at the shadow time with ``rows``
        of ``info`` held?

        Exactly the per-job test "subtract the placement from the shadow-time matrix, test the
        reserved job on all of it, add the placement back", but only the placement's rows are
        recomputed (in Python floats, the same IEEE operations as numpy), against the reserved
        job's per-row ``k`` kept for the unchanged rows.  Adding back can leave float noise
        (``(x - y) + y != x``); the matrix keeps it, as it always did.
        """
        reserved = self._easy.reserved
        assert reserved is not None
        sk = self._shadow_k
        if sk is None:
            base = self._k(shadow_free, reserved)
            total_k, full_k = float(base.sum()), int((base >= reserved.tasks).sum())
            sk = self._shadow_k = _ShadowK(base.tolist(), total_k, full_k)
        tasks = reserved.tasks
        version = self._shadow_version
        # the same rows of the same shape on unchanged shadow rows (and no noise last time):
        # the test would compute the same per-row k again, only the other rows' sum may differ
        key = tuple(rows)
        seen = self._hold_memo.get(info.key)
        if seen is not None and seen[0] == key and seen[1] == [version[r] for r, _ in rows]:
            _, _, d_total, d_full = seen
            return sk.full + d_full > 0 if reserved.single else sk.total + d_total >= tasks
        slack = self._slack_row_lists()
        demand = info.job_demand
        values = shadow_free[[row for row, _ in rows]].tolist()
        total, full = sk.total, sk.full  # what the test sees (rows are distinct)
        d_total, d_full, noise = 0.0, 0, False
        for (row, t), before in zip(rows, values, strict=True):
            held = [v - t * d for v, d in zip(before, demand, strict=True)]
            k = self._reserved_k_row(held, slack[row])
            d_total += k - sk.k[row]
            d_full += (k >= tasks) - (sk.k[row] >= tasks)
            after = [v + t * d for v, d in zip(held, demand, strict=True)]
            if after != before:  # float noise stays in the matrix
                noise = True
                shadow_free[row] = after
                version[row] += 1
                k = self._reserved_k_row(after, slack[row])
                sk.total += k - sk.k[row]
                sk.full += (k >= tasks) - (sk.k[row] >= tasks)
                sk.k[row] = k
        if noise:
            self._hold_memo.pop(info.key, None)
        else:
            self._hold_memo[info.key] = (key, [version[r] for r, _ in rows], d_total, d_full)
        return full + d_full > 0 if reserved.single else total + d_total >= tasks

    def _slack_row_lists(self) -> list[list[float]]:
        slack = self._slack_rows
        if slack is None:
            slack = self._slack_rows = self._slack.tolist()
        return slack

    def _hold(self, info: _Info, rows: RowPlacement) -> None:
        """A backfilled job that ends after the shadow time holds its rows at that time."""
        shadow_free = self._shadow_free
        assert shadow_free is not None
        for row, t in rows:
            shadow_free[row] -= t * info.demand
            self._shadow_version[row] += 1
        sk = self._shadow_k
        if sk is None:
            return
        reserved = self._easy.reserved
        assert reserved is not None
        slack = self._slack_row_lists()
        values = shadow_free[[row for row, _ in rows]].tolist()
        for (row, _), after in zip(rows, values, strict=True):
            k = self._reserved_k_row(after, slack[row])
            sk.total += k - sk.k[row]
            sk.full += (k >= reserved.tasks) - (sk.k[row] >= reserved.tasks)
            sk.k[row] = k

    def _reserved_k_row(self, free: list[float], slack: list[float]) -> float:
        """``max_tasks_per_node`` of the reserved job on one row (Python floats)."""
        reserved = self._easy.reserved
        assert reserved is not None
        return float(_tasks_on_row(free, slack, reserved.job_demand, reserved.cols, reserved.tasks))

    def _reserve(self, info: _Info) -> float:
        """Reserve ``info`` at its earliest start; keep the matrix at that time for rule (b)."""
        found = self._earliest(info)
        if found is None:  # excluded up front by can_start; kept as a hard guard
            raise SnapshotError("running", f"no start time can be computed for {info.job.id!r}")
        start_at, free_then = found
        self._reservation = Reservation(info.job.id, start_at)
        if self.config.backfill == Backfill.EASY:
            self._shadow_free = free_then
            self._shadow_k = None
            self._shadow_version = [0] * free_then.shape[0]
            self._hold_memo.clear()
        return start_at

    # ------------------------------------------------------------------ ordering fast path

    def orderable(self) -> list[Job]:
        """Eligible jobs an ordering policy should rank (FCFS order, invalid jobs removed).

        Unschedulable jobs are not filtered here (that would cost a feasibility test per job
        shape); the walk skips them when they come up, so they are never reserved.
        """
        return [i.job for i in self._infos if i.invalid is None]

    def run_order(self, order: Iterable[Job]) -> None:
        """Drive the round with a fixed order (the :class:`OrderingPolicy` path):
        :meth:`EasyRound.walk <app.domains.hpc.easy.EasyRound.walk>` over the order's eligible
        jobs (unknown, invalid or repeated jobs are skipped)."""
        self._easy.walk(self._walk_infos(order))
        self._step = None

    def _walk_infos(self, order: Iterable[Job]) -> Iterator[_Info]:
        by_id = self._by_id
        explain = self.config.explain
        seen: set[str] = set()
        easy = self._easy
        for job in order:
            if easy.stopped:  # the walk draws no job after the stop
                return
            info = by_id.get(job.id)
            if info is None or info.invalid is not None or job.id in seen:
                continue
            seen.add(job.id)
            if explain:
                self._picks.append(job.id)
            yield info

    def run_ranked(self, view: StepView, rows: Iterable[int]) -> None:
        """Walk ``view.candidates[i] for i in rows`` as an order (the :class:`RankingPolicy`
        path); ``view`` must be this run's first view."""
        candidates = view.candidates
        self.run_order(candidates[i] for i in rows)

    # ------------------------------------------------------------------ stepping interface

    def _vectors(self) -> _Vectors:
        vec = self._vec
        if vec is None:
            vec = self._vec = self._build_vectors()
        return vec

    def _build_vectors(self) -> _Vectors:
        infos = self._infos
        j = len(infos)
        demand = self._shape_demand  # the rows of every shape's job_demand
        keys = self._shape_keys
        tasks = np.array([float(key[0]) for key in keys], dtype=np.float64)
        total = demand * tasks[:, None]  # _Info.total: float(tasks) * demand, as in Python
        single = np.array([key[1] for key in keys], dtype=np.bool_)
        positive = demand > 0.0
        up = bool(self._up_nodes)
        allocated = self._allocated
        walltime = np.array([i.job.walltime_s for i in infos], dtype=np.float64).reshape(j)
        vec = _Vectors(
            demand=demand,
            total=np.where(positive, total, -np.inf),
            need=np.where(positive, np.where(single[:, None], total, demand), -np.inf),
            safe=np.where(positive, demand, 1.0),
            positive=positive,
            tasks=tasks,
            single=single,
            any_single=bool(single.any()),
            overflow=self._overflow,
            shape=np.array([i.shape for i in infos], dtype=np.intp).reshape(j),
            usable=np.array(
                [up and i.invalid is None and i.tasks > 0 for i in infos], dtype=np.bool_
            ).reshape(j),
            excluded=np.zeros(j, dtype=np.bool_),
            alive=np.array([i.job.id not in allocated for i in infos], dtype=np.bool_).reshape(j)
            if allocated
            else np.ones(j, dtype=np.bool_),
            ends=self.now + walltime,  # now + walltime_s, as in Python floats
            k=np.zeros((len(keys), self._free.shape[0])),
            dirty=set(range(self._free.shape[0])),
        )
        vec.walltime = walltime
        vec.excluded = self._excluded_all(vec)
        return vec

    def _may_overflow(self, demands: FloatArray) -> bool:
        """Whether ``(free + slack) / d`` can overflow for these positive demands.

        Free only shrinks within a round, so capacity + slack bounds every numerator (up to
        rounding: hence the margin).
        """
        if demands.size == 0 or self._cap.size == 0:
            return False
        with np.errstate(over="ignore"):
            bound = float(np.max(self._cap + self._slack)) / float(demands.min())
        return not bound < 1e300

    def _excluded_all(self, vec: _Vectors) -> BoolArray:
        """``_exclusion(info) is not None`` for every job, computed on the first step.

        As the per-job path on the first step: the "reachable" matrix (every running job
        released) is the one of the initial free matrix, and is kept for later ``_exclusion``
        calls (``explain``).
        """
        j = len(self._infos)
        invalid = np.array([i.invalid is not None for i in self._infos], dtype=np.bool_)
        if self._free.shape[0] == 0:
            return np.ones(j, dtype=np.bool_)
        if self._reachable is None:
            reachable = self._free.copy()
            self._release_all(reachable, self._releases)
            self._reachable = reachable
        never = ~self._feasible_all(vec, self._cap + self._slack)  # per shape
        never |= ~self._feasible_all(vec, self._reachable + self._slack)
        return invalid.reshape(j) | never[vec.shape]

    def _feasible_all(self, vec: _Vectors, free_slack: FloatArray) -> BoolArray:
        """``_feasible_on`` of every shape on one matrix (given as ``free + slack``)."""
        k = self._k_columns(vec, free_slack)
        held = k.sum(axis=1)
        if vec.any_single:
            held = np.where(vec.single, k.max(axis=1), held)
        return np.asarray((held >= vec.tasks) & (vec.tasks > 0), dtype=np.bool_)

    def _k_columns(self, vec: _Vectors, free_rows: FloatArray) -> FloatArray:
        """``max_tasks_per_node`` of every shape on the given rows of ``free + slack``: [S, n].

        The minimum over resources is taken one resource at a time (a minimum is exact, so the
        order does not matter); a resource a shape does not need leaves its ``k`` unbounded.
        """
        k: FloatArray = np.full((vec.demand.shape[0], free_rows.shape[0]), np.inf)
        for c in range(vec.demand.shape[1]):
            needs = vec.positive[:, c]
            if not needs.any():
                continue
            if vec.overflow:  # a subnormal demand: k = inf, clipped to tasks
                with np.errstate(over="ignore"):
                    q = free_rows[None, :, c] / vec.safe[:, c, None]
            else:
                q = free_rows[None, :, c] / vec.safe[:, c, None]
            np.minimum(k, q, out=k, where=needs[:, None])
        np.floor(k, out=k)
        np.minimum(k, vec.tasks[:, None], out=k)
        np.maximum(k, 0.0, out=k)
        return k

    def _fits_all(self, vec: _Vectors) -> BoolArray:
        """``_place_now(info) is not None`` for every job (same pre-checks, same k)."""
        if vec.fits is not None:
            return vec.fits
        if self._free.shape[0] == 0:
            vec.fits = np.zeros(len(self._infos), dtype=np.bool_)
            return vec.fits
        free_slack = self._free + self._slack
        if vec.dirty:
            rows = np.array(sorted(vec.dirty), dtype=np.intp)
            vec.k[:, rows] = self._k_columns(vec, free_slack[rows])
            vec.dirty.clear()
        # the pre-checks of _place_now (-inf: a resource the job does not need passes)
        bound = np.array(self._free_total) + np.array(self._slack_total)
        fits = (vec.total <= bound).all(axis=1)  # per shape
        fits &= (vec.need <= free_slack.max(axis=0)).all(axis=1)
        held = vec.k.sum(axis=1)
        if vec.any_single:
            held = np.where(vec.single, vec.k.max(axis=1), held)
        fits &= held >= vec.tasks
        vec.fits = np.asarray(fits[vec.shape] & vec.usable, dtype=np.bool_)
        return vec.fits

    def _compute_step(self) -> _StepCache:
        if self._step is not None:
            return self._step
        vec = self._vectors()
        at = np.flatnonzero(vec.alive)
        candidates = [self._infos[j] for j in at.tolist()]
        excluded = vec.excluded[at]
        fits = self._fits_all(vec)[at] & ~excluded
        easy = self._easy
        if easy.stopped:
            mask = np.zeros(len(candidates), dtype=np.bool_)
        elif easy.phase == Phase.HEAD:
            mask = ~excluded
        else:
            allowed = fits.copy()
            if easy.reserved is not None:
                allowed &= at != easy.reserved.index
            mask = backfill_mask(
                allowed,
                vec.ends[at],
                easy.shadow,
                lambda p: easy.backfill_placement(candidates[p]) is not None,
            )
        self._step = _StepCache(fits, mask, candidates, at)
        return self._step

    def _step_arrays(self, step: _StepCache) -> StepArrays:
        vec = self._vectors()
        assert vec.walltime is not None
        if vec.raw_total is None:  # the encoder's inputs, read from the jobs once per decision
            jobs = [i.job for i in self._infos]
            # tasks * per_task as read (float(tasks) * x: the same product as in Python floats)
            raw = np.array(self._raw_demand, dtype=np.float64).reshape(
                len(jobs), len(self.resource_names)
            )
            tasks = np.array([float(job.tasks) for job in jobs], dtype=np.float64)
            vec.raw_total = raw * tasks[:, None]
            vec.submit = np.array([job.submit_time for job in jobs], dtype=np.float64)
            vec.priority = np.array([job.priority for job in jobs], dtype=np.float64)
            vec.static = static_features(
                vec.raw_total, vec.submit, vec.walltime, vec.priority, self.now, self._cap_total
            )
        assert vec.submit is not None
        assert vec.priority is not None
        assert vec.static is not None
        rows = self._rows_in_node_order
        if rows.size:
            # sequential sum in StepView.free order, as the encoder's per-node loop
            free = np.add.accumulate(np.maximum(self._free[rows], 0.0), axis=0)[-1] + 0.0
            free_total = tuple(free.tolist())
        else:
            free_total = (0.0,) * len(self.resource_names)
        at = step.at
        return StepArrays(
            total_demand=vec.raw_total[at],
            submit=vec.submit[at],
            walltime=vec.walltime[at],
            priority=vec.priority[at],
            fits=step.fits,
            mask=step.mask,
            free_total=free_total,
            static=vec.static[at],
        )

    @property
    def phase(self) -> Phase:
        return self._easy.phase

    def release(self) -> None:
        """Drop the run's resource model, which refers back to the run: without that cycle the
        run is freed as soon as nobody refers to it, not by a later full garbage collection.
        Nothing may be asked of the run afterwards (take its :meth:`result` first)."""
        with contextlib.suppress(AttributeError):
            del self._easy

    @property
    def done(self) -> bool:
        if self._easy.stopped:
            return True
        return not bool(self._compute_step().mask.any())

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
        if step.view is None:
            step.view = StepView(
                now=self.now,
                phase=self._easy.phase,
                nodes=self.state.nodes,
                free=_FreeView(
                    self._free.copy(), self.resource_names, self.state.nodes, self._up_nodes
                ),
                schedulable_capacity=self._capacity_view(),
                candidates=tuple(i.job for i in step.candidates),
                mask=tuple(step.mask.tolist()),
                fits_now=tuple(step.fits.tolist()),
                reservation=self._reservation,
                resource_names=self.resource_names,
                arrays=self._step_arrays(step),
            )
        return step.view

    def _capacity_view(self) -> Mapping[str, float]:
        cap = self._capacity
        if cap is None:
            names = self.resource_names
            cap = self._capacity = MappingProxyType(dict(zip(names, self._cap_total, strict=True)))
        return cap

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
                f"in phase {self._easy.phase.value}"
            )
        info = step.candidates[index]
        if self.config.explain:
            self._picks.append(info.job.id)
        self._easy.pick(info)
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
            elif info is self._easy.reserved and self._reservation is not None:
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


class _MatrixModel:
    """:class:`~app.domains.hpc.easy.ResourceModel` of a :class:`DecisionRun`: the per-node
    matrix (any cluster).  Not monotone: another placement of a refused job may suit the
    reservation once other jobs have taken some nodes."""

    __slots__ = ("run",)

    monotone = False

    def __init__(self, run: DecisionRun) -> None:
        self.run = run

    def place_now(self, job: _Info) -> RowPlacement | None:
        return self.run._place_now(job)

    def can_start(self, job: _Info) -> bool:
        return self.run._exclusion(job) is None

    def reserve(self, job: _Info) -> float:
        return self.run._reserve(job)

    def ends(self, job: _Info) -> float:
        return self.run.now + job.job.walltime_s

    def holds(self, job: _Info, placement: RowPlacement) -> bool:
        return self.run._holds(job, placement)

    def start(self, job: _Info, placement: RowPlacement) -> bool:
        run = self.run
        run._allocate(job, placement)
        return not run._capped()

    def hold(self, job: _Info, placement: RowPlacement) -> None:
        self.run._hold(job, placement)

    def can_start_any(self) -> bool:
        return True


def decide(
    state: ClusterState,
    policy: OrderingPolicy | RankingPolicy | SteppingPolicy,
    config: DecisionConfig | None = None,
) -> Decision:
    """One scheduling round of ``policy`` on ``state`` (see the module docstring)."""
    run = DecisionRun(state, config)
    if isinstance(policy, OrderingPolicy):
        run.run_order(policy.order(run.orderable(), run.now))
    elif isinstance(policy, RankingPolicy):
        if not run.done:
            view = run.view()
            run.run_ranked(view, policy.rank(view))
    else:
        while not run.done:
            run.apply(policy.pick(run.view()))
    result = run.result(policy.ref)
    run.release()
    return result


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
