"""Observation and action-mask encoding of a :class:`~app.domains.hpc.policy.StepView`.

This module is the seam between the service and the learned policy: the simulator's gym
environment and the training code build their observations with it, and
:class:`app.policy.onnx_policy.OnnxPolicy` uses it at inference.  A model is only served if its
card (and its ONNX ``metadata_props``, when present) name :data:`FEATURE_SCHEMA_VERSION`.
**Changing a feature, its order or a normalisation constant means bumping the version.**

Tensor contract (per view; batches add a leading axis ``B``)::

    obs   float32[N, F]   one row per visible candidate, F = NUM_FEATURES, every value in [0, 1]
    mask  bool[N]         true where the candidate may be picked now (padding rows: false)
    index int64[N]        the StepView candidate index of each row (padding rows: -1)

The ONNX policy maps ``obs: float32[B, N, F]`` and ``action_mask: bool[B, N]`` to
``logits: float32[B, N]``; the pick is the arg-max of the logits over the rows whose mask is true,
mapped back through ``index``.

Features (in this order; constants are module-level and fixed for a schema version).  The first
four follow RLScheduler's observation (A.5 of the HPC reproduction spec); the rest give the
policy what RLScheduler's could not see: the free resources, the reservation and the decision phase.

====  =======================  =====================================================================
 #    name                     value
====  =======================  =====================================================================
 0    ``wait``                 ``(now - submit_time) / WAIT_SCALE_S`` (12 h, as RLScheduler)
 1    ``walltime``             ``log1p(walltime_s) / log1p(WALLTIME_SCALE_S)`` (7 days)
 2    ``size``                 dominant share of the job's total demand (``tasks * per_task``) over
                               the schedulable capacity: ``max_r demand_r / capacity_r``; for a
                               CPU-only cluster this is RLScheduler's ``processors / MaxProcs``
 3    ``can_start_now``        ``1 - EPS`` if the job fits on the free resources now, else ``EPS``
 4    ``demand_vs_free``       dominant share of the demand over the aggregate free resources
                               (1 when the demand exceeds what is free in some resource)
 5    ``no_delay_reservation`` 1 if there is no reservation, or the job would end (``now +
                               walltime``) no later than the reservation's start; else 0
 6    ``is_reserved``          1 for the job that holds the reservation, else 0
 7    ``slowdown_so_far``      ``log1p(wait / max(walltime, 10)) / log1p(SLOWDOWN_SCALE)``
 8    ``priority``             ``0.5 + 0.5 * tanh(priority / PRIORITY_SCALE)``
 9    ``phase_backfill``       1 in the :attr:`~app.domains.hpc.policy.Phase.BACKFILL` phase, else 0
10    ``queue_length``         ``log1p(eligible candidates) / log1p(QUEUE_SCALE)``
11    ``free_fraction``        mean over resources with capacity of ``free_r / capacity_r``
12    ``reservation_horizon``  ``(reservation.start_at - now) / WAIT_SCALE_S`` (0 without one)
====  =======================  =====================================================================

Every feature is finite and clipped to ``[0, 1]`` (non-finite inputs become 0 before clipping).

Candidate window: when a view has more candidates than ``max_candidates`` (default 128, as
RLScheduler), the visible ones are chosen deterministically.  Pickable candidates (mask true) come
first; within each group the SJF order ``(walltime, submit, id)`` and the "smallest" order
``(size, submit, id)`` are interleaved and de-duplicated (SJF[0], SMALL[0], SJF[1], ...), as in
RLScheduler.  The chosen rows are then laid out in the view's own (FCFS) order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from app.domains.hpc.policy import Phase, StepView
from app.domains.hpc.types import Job, Resources

#: Bump on any change to the features, their order or the normalisation constants.
FEATURE_SCHEMA_VERSION: Final = "kairos-hpc-v1"

FEATURE_NAMES: Final[tuple[str, ...]] = (
    "wait",
    "walltime",
    "size",
    "can_start_now",
    "demand_vs_free",
    "no_delay_reservation",
    "is_reserved",
    "slowdown_so_far",
    "priority",
    "phase_backfill",
    "queue_length",
    "free_fraction",
    "reservation_horizon",
)
NUM_FEATURES: Final = len(FEATURE_NAMES)

#: RLScheduler's visible-queue length.
DEFAULT_MAX_CANDIDATES: Final = 128

WAIT_SCALE_S: Final = 43_200.0
WALLTIME_SCALE_S: Final = 604_800.0
SLOWDOWN_SCALE: Final = 1_000.0
SLOWDOWN_MIN_RUNTIME_S: Final = 10.0
PRIORITY_SCALE: Final = 10.0
QUEUE_SCALE: Final = 1_024.0
EPS: Final = 1e-5

ObsArray = npt.NDArray[np.float32]
MaskArray = npt.NDArray[np.bool_]
IndexArray = npt.NDArray[np.int64]
FloatVec = npt.NDArray[np.float64]
LogitsArray = npt.NDArray[np.float32]

_LOG_WALLTIME_SCALE: Final = math.log1p(WALLTIME_SCALE_S)
_LOG_SLOWDOWN_SCALE: Final = math.log1p(SLOWDOWN_SCALE)
_LOG_QUEUE_SCALE: Final = math.log1p(QUEUE_SCALE)


@dataclass(frozen=True, slots=True)
class StepArrays:
    """Per-candidate arrays of a :class:`StepView`, aligned with ``view.candidates``.

    Built by :class:`~app.domains.hpc.decision.DecisionRun` from arrays it keeps for the whole
    decision,
    so the encoder does not walk the jobs at every step.  Every value is exactly what the encoder
    would compute from the view (same float operations, same summation order); views without it
    are encoded from the jobs.
    """

    #: ``job.tasks * job.per_task[name]`` per resource name (raw, as the jobs say)
    total_demand: FloatVec  # [C, R]
    submit: FloatVec  # [C]
    #: ``job.walltime_s`` (raw, not clamped)
    walltime: FloatVec  # [C]
    priority: FloatVec  # [C]
    fits: MaskArray  # [C], as ``view.fits_now``
    mask: MaskArray  # [C], as ``view.mask``
    #: sum over ``view.free`` (in its order) of ``max(0, free)``, per resource name
    free_total: tuple[float, ...]
    #: the features that do not change within a decision (:data:`STATIC_FEATURES`), as
    #: :func:`static_features` computes them; ``None``: computed by the encoder
    static: ObsArray | None = None


#: features that depend only on the job, ``now`` and the schedulable capacity
STATIC_FEATURES: Final = (0, 1, 2, 7, 8)


def static_features(
    total_demand: FloatVec,
    submit: FloatVec,
    walltime: FloatVec,
    priority: FloatVec,
    now: float | FloatVec,
    capacity: Sequence[float] | FloatVec,
) -> ObsArray:
    """Columns :data:`STATIC_FEATURES` of the rows of these jobs (clipped, as in the encoder).

    The same operations as the per-step fill, so the values are identical; a decision computes
    them once instead of at every step.
    """
    out = np.zeros((len(submit), len(STATIC_FEATURES)), dtype=np.float32)
    walltime = np.maximum(walltime, 0.0)
    wait = np.maximum(now - submit, 0.0)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out[:, 0] = wait / WAIT_SCALE_S
        out[:, 1] = np.log1p(walltime) / _LOG_WALLTIME_SCALE
        out[:, 2] = _dominant_shares(total_demand, capacity)
        slowdown = wait / np.maximum(walltime, SLOWDOWN_MIN_RUNTIME_S)
        out[:, 3] = np.log1p(slowdown) / _LOG_SLOWDOWN_SCALE
        out[:, 4] = 0.5 + 0.5 * np.tanh(priority / PRIORITY_SCALE)
    np.nan_to_num(out, copy=False, nan=0.0, posinf=1.0, neginf=0.0)
    np.clip(out, 0.0, 1.0, out=out)
    return out


Scalar = float | FloatVec


def features(
    *,
    demand: FloatVec,
    capacity: Sequence[float] | FloatVec,
    free: Sequence[float] | FloatVec,
    submit: FloatVec,
    walltime: FloatVec,
    priority: FloatVec,
    fits: MaskArray,
    is_reserved: FloatVec | MaskArray,
    now: Scalar,
    has_reservation: bool | MaskArray,
    reservation_start: Scalar,
    backfill_phase: Scalar,
    queue_length: Scalar,
    free_fraction: Scalar,
    static: ObsArray | None = None,
) -> ObsArray:
    """The 13 features of ``M`` candidate rows (the only statement of the formulas).

    Per-row inputs are ``[M]`` (``demand``: ``[M, R]`` total demand per resource); the view's
    values (``now``, ``capacity`` and ``free`` (``[R]`` or ``[M, R]``), the reservation, the
    phase, ``queue_length`` (the feature value ``log1p(candidates) / log1p(QUEUE_SCALE)``) and
    ``free_fraction``) are scalars for one view or ``[M]`` rows for stacked views: every element
    goes through the same float64 operations either way, then one cast to float32.
    ``static``: columns :data:`STATIC_FEATURES` as :func:`static_features` computed them.
    """
    m = len(submit)
    out = np.zeros((m, NUM_FEATURES), dtype=np.float32)
    if static is None:
        static = static_features(demand, submit, walltime, priority, now, capacity)
    out[:, STATIC_FEATURES] = static  # already clipped: the final clip leaves them as they are
    walltime = np.maximum(walltime, 0.0)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out[:, 3] = np.where(fits, 1.0 - EPS, EPS)
        out[:, 4] = _dominant_shares(demand, free)
        out[:, 5] = np.where(has_reservation, now + walltime <= reservation_start, 1.0)
        out[:, 6] = np.where(has_reservation, is_reserved, 0.0)
        out[:, 12] = np.where(has_reservation, (reservation_start - now) / WAIT_SCALE_S, 0.0)
    out[:, 9] = backfill_phase
    out[:, 10] = queue_length
    out[:, 11] = free_fraction
    # +inf (demand on an absent resource, overflow) saturates at 1; NaN becomes 0
    np.nan_to_num(out, copy=False, nan=0.0, posinf=1.0, neginf=0.0)
    np.clip(out, 0.0, 1.0, out=out)
    return out


def queue_feature(candidates: int) -> float:
    """Feature 10 of a view with ``candidates`` candidates."""
    return math.log1p(candidates) / _LOG_QUEUE_SCALE


def free_fractions(free: FloatVec, capacity: FloatVec) -> FloatVec:
    """Feature 11 of ``M`` views (``free``, ``capacity``: ``[M, R]``): per row, the mean over
    resources with capacity of ``min(free, capacity) / capacity`` (0 without any), summed in
    resource order."""
    has = capacity > 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        part = np.where(has, np.minimum(free, capacity) / capacity, 0.0)
    count = has.sum(axis=1)
    return np.where(count > 0, part.sum(axis=1) / np.maximum(count, 1), 0.0)


def free_fraction(free: Sequence[float], capacity: Sequence[float]) -> float:
    """Feature 11 of one view (:func:`free_fractions`)."""
    if len(free) != len(capacity):
        raise ValueError("free and capacity must have one entry per resource")
    row = np.asarray(free, dtype=np.float64).reshape(1, len(free))
    return float(free_fractions(row, np.asarray(capacity, dtype=np.float64).reshape(row.shape))[0])


@dataclass(frozen=True, slots=True)
class EncodedView:
    """One view's tensors: ``obs[N, F]``, ``mask[N]`` and ``index[N]`` (row -> candidate)."""

    obs: ObsArray
    mask: MaskArray
    index: IndexArray

    def candidate(self, row: int) -> int:
        """The StepView candidate index of ``row``; raises ``ValueError`` for padding rows."""
        value = int(self.index[row])
        if value < 0:
            raise ValueError(f"row {row} is padding")
        return value


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    """Many views padded to one ``N``: ``obs[B, N, F]``, ``mask[B, N]``, ``index[B, N]``."""

    obs: ObsArray
    mask: MaskArray
    index: IndexArray

    def candidate(self, item: int, row: int) -> int:
        value = int(self.index[item, row])
        if value < 0:
            raise ValueError(f"row {row} of item {item} is padding")
        return value


def _total_demand(job: Job, names: Sequence[str]) -> list[float]:
    return [job.tasks * float(job.per_task.get(name, 0.0)) for name in names]


def _dominant_share(demand: Sequence[float], available: Sequence[float]) -> float:
    """``max_r demand_r / available_r``; a positive demand on an absent resource counts as 1."""
    share = 0.0
    for need, have in zip(demand, available, strict=True):
        if need <= 0.0:
            continue
        share = max(share, need / have if have > 0.0 else math.inf)
    return share


def _aggregate_free(free: Mapping[str, Resources], names: Sequence[str]) -> list[float]:
    totals = [0.0] * len(names)
    for per_node in free.values():
        for k, name in enumerate(names):
            totals[k] += max(0.0, float(per_node.get(name, 0.0)))
    return totals


def select_window(view: StepView, max_candidates: int = DEFAULT_MAX_CANDIDATES) -> list[int]:
    """Indices (ascending, i.e. FCFS order) of the candidates the policy sees.

    All candidates when there are at most ``max_candidates``; otherwise pickable ones first, each
    group filled by interleaving the SJF and "smallest" orders (see the module docstring).
    """
    if max_candidates < 1:
        raise ValueError("max_candidates must be >= 1")
    count = len(view.candidates)
    if count <= max_candidates:
        return list(range(count))
    names = view.resource_names
    capacity = [float(view.schedulable_capacity.get(name, 0.0)) for name in names]
    if view.arrays is not None:
        fast = _select_window_arrays(view.arrays, capacity, max_candidates)
        if fast is not None:
            return fast
    jobs = view.candidates

    def sjf_key(i: int) -> tuple[float, float, str]:
        return (jobs[i].walltime_s, jobs[i].submit_time, jobs[i].id)

    def small_key(i: int) -> tuple[float, float, str]:
        share = _dominant_share(_total_demand(jobs[i], names), capacity)
        return (share, jobs[i].submit_time, jobs[i].id)

    groups = (
        [i for i in range(count) if view.mask[i]],
        [i for i in range(count) if not view.mask[i]],
    )
    return _interleave(
        ((sorted(g, key=sjf_key), sorted(g, key=small_key)) for g in groups), max_candidates
    )


def _interleave(orders: Iterable[tuple[list[int], list[int]]], max_candidates: int) -> list[int]:
    """The window: per group (allowed first), the SJF and the "smallest" orders taken in turn,
    each index once, until ``max_candidates``; indices ascending."""
    chosen: list[int] = []
    seen: set[int] = set()
    for by_sjf, by_small in orders:
        for pair in zip(by_sjf, by_small, strict=True):
            for i in pair:
                if i not in seen:
                    seen.add(i)
                    chosen.append(i)
                    if len(chosen) == max_candidates:
                        return sorted(chosen)
    return sorted(chosen)


def _select_window_arrays(
    arrays: StepArrays, capacity: Sequence[float], max_candidates: int
) -> list[int] | None:
    """:func:`select_window` from the arrays; ``None`` when a key is NaN (the sort-based path
    then decides, as NaN has no consistent order)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        share = _dominant_shares(arrays.total_demand, capacity)
    walltime, submit = arrays.walltime, arrays.submit
    if np.isnan(share).any() or np.isnan(walltime).any() or np.isnan(submit).any():
        return None
    return window_rows(arrays.mask, walltime, submit, share, max_candidates)


def window_rows(
    mask: MaskArray,
    walltime: FloatVec,
    submit: FloatVec,
    size: FloatVec | npt.NDArray[np.int64],
    max_candidates: int,
) -> list[int]:
    """The candidate window (see the module docstring) of candidates in FCFS order ``(submit,
    id)``: indices, ascending.  ``size`` is any key in the order of the dominant share; no key
    is NaN.

    Candidates are in FCFS order, so the ``id`` tie-break of the SJF and "smallest" keys is the
    candidate index, and a stable lexsort gives the same orders.
    """
    if len(mask) <= max_candidates:
        return list(range(len(mask)))
    groups = (np.flatnonzero(mask), np.flatnonzero(~mask))
    return _interleave(
        (
            (
                g[np.lexsort((submit[g], walltime[g]))].tolist(),
                g[np.lexsort((submit[g], size[g]))].tolist(),
            )
            for g in groups
        ),
        max_candidates,
    )


def _dominant_shares(
    demand: npt.NDArray[np.float64], available: Sequence[float] | FloatVec
) -> FloatVec:
    """Vectorised :func:`_dominant_share` over the rows of ``demand[N, R]`` (``available``: one
    ``[R]`` vector, or one row per demand row)."""
    if demand.shape[1] == 0:
        return np.zeros(demand.shape[0])
    have = np.asarray(available, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(demand > 0.0, demand / np.where(have > 0.0, have, 0.0), 0.0)
    ratio = np.where((demand > 0.0) & ~(have > 0.0), np.inf, ratio)
    return np.asarray(ratio.max(axis=1), dtype=np.float64)


#: public name of the vectorised dominant share (the ranking encoder and the envs use it)
dominant_shares = _dominant_shares


def _fill_rows(view: StepView, rows: Sequence[int], out: ObsArray) -> None:
    """:func:`features` of the ``rows`` of one view (read from the jobs without
    :class:`StepArrays`)."""
    if not rows:
        return
    if view.arrays is not None:
        out[:] = _fill_many([view], [rows])
        return
    names = view.resource_names
    capacity = [float(view.schedulable_capacity.get(name, 0.0)) for name in names]
    free = _aggregate_free(view.free, names)
    jobs = [view.candidates[i] for i in rows]
    reservation = view.reservation
    out[:] = features(
        demand=np.array(
            [[job.tasks * float(job.per_task.get(name, 0.0)) for name in names] for job in jobs],
            dtype=np.float64,
        ).reshape(len(jobs), len(names)),
        capacity=capacity,
        free=free,
        submit=np.array([job.submit_time for job in jobs], dtype=np.float64),
        walltime=np.array([job.walltime_s for job in jobs], dtype=np.float64),
        priority=np.array([job.priority for job in jobs], dtype=np.float64),
        fits=np.array([view.fits_now[i] for i in rows], dtype=np.bool_),
        is_reserved=np.array(
            [reservation is not None and job.id == reservation.job_id for job in jobs]
        ),
        now=view.now,
        has_reservation=reservation is not None,
        reservation_start=reservation.start_at if reservation is not None else 0.0,
        backfill_phase=1.0 if view.phase is Phase.BACKFILL else 0.0,
        queue_length=queue_feature(len(view.candidates)),
        free_fraction=free_fraction(free, capacity),
    )


def _fill_many(views: Sequence[StepView], windows: Sequence[Sequence[int]]) -> ObsArray:
    """:func:`features` of many views at once: their rows stacked into one ``[M, F]`` block.

    Every view carries :class:`StepArrays` and the same ``resource_names``; per-view values are
    repeated per row.
    """
    names = views[0].resource_names
    widths = [len(rows) for rows in windows]
    m = sum(widths)
    if m == 0:
        return np.zeros((0, NUM_FEATURES), dtype=np.float32)
    per_view: list[tuple[float, ...]] = []
    capacities: list[list[float]] = []
    frees: list[tuple[float, ...]] = []
    reserved = np.zeros(m, dtype=np.float64)
    parts: list[tuple[FloatVec, FloatVec, FloatVec, FloatVec, MaskArray]] = []
    statics: list[ObsArray] | None = []
    offset = 0
    for view, rows in zip(views, windows, strict=True):
        arrays = view.arrays
        assert arrays is not None
        capacity = [float(view.schedulable_capacity.get(name, 0.0)) for name in names]
        free = arrays.free_total
        reservation = view.reservation
        has, start = 0.0, 0.0
        if reservation is not None and rows:
            has, start = 1.0, reservation.start_at
            jobs = view.candidates
            for k, i in enumerate(rows):
                if jobs[i].id == reservation.job_id:
                    reserved[offset + k] = 1.0
        per_view.append(
            (
                view.now,
                has,
                start,
                1.0 if view.phase is Phase.BACKFILL else 0.0,
                queue_feature(len(view.candidates)),
            )
        )
        capacities.append(capacity)
        frees.append(free)
        at = np.asarray(rows, dtype=np.intp)
        if statics is not None and arrays.static is not None:
            statics.append(arrays.static[at])
        else:
            statics = None
        parts.append(
            (
                arrays.total_demand[at],
                arrays.submit[at],
                arrays.walltime[at],
                arrays.priority[at],
                arrays.fits[at],
            )
        )
        offset += len(rows)
    count = np.asarray(widths, dtype=np.intp)
    scalars = np.repeat(np.asarray(per_view, dtype=np.float64), count, axis=0)
    shape = (len(views), len(names))
    capacity_rows = np.asarray(capacities, dtype=np.float64).reshape(shape)
    free_rows = np.asarray(frees, dtype=np.float64).reshape(shape)
    return features(
        demand=np.concatenate([p[0] for p in parts]).reshape(m, len(names)),
        capacity=np.repeat(capacity_rows, count, axis=0),
        free=np.repeat(free_rows, count, axis=0),
        submit=np.concatenate([p[1] for p in parts]),
        walltime=np.concatenate([p[2] for p in parts]),
        priority=np.concatenate([p[3] for p in parts]),
        fits=np.concatenate([p[4] for p in parts]),
        is_reserved=reserved,
        now=scalars[:, 0],
        has_reservation=scalars[:, 1] > 0.0,
        reservation_start=scalars[:, 2],
        backfill_phase=scalars[:, 3],
        queue_length=scalars[:, 4],
        free_fraction=np.repeat(free_fractions(free_rows, capacity_rows), count),
        static=np.concatenate(statics) if statics is not None else None,
    )


def encode_view(
    view: StepView,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    *,
    pad_to: int | None = None,
) -> EncodedView:
    """Encode one view; ``N = len(window)`` or ``pad_to`` (padding rows are zero and masked)."""
    rows = select_window(view, max_candidates)
    n = len(rows) if pad_to is None else pad_to
    if n < len(rows):
        raise ValueError(f"pad_to={pad_to} is smaller than the window ({len(rows)})")
    obs = np.zeros((n, NUM_FEATURES), dtype=np.float32)
    mask = np.zeros(n, dtype=np.bool_)
    index = np.full(n, -1, dtype=np.int64)
    if view.arrays is not None and rows:
        obs[: len(rows)] = _fill_many([view], [rows])
    else:
        _fill_rows(view, rows, obs[: len(rows)])
    width = len(rows)
    if width:
        index[:width] = rows
        view_mask = view.arrays.mask if view.arrays is not None else view.mask
        mask[:width] = np.asarray(view_mask, dtype=np.bool_)[index[:width]]
    return EncodedView(obs=obs, mask=mask, index=index)


def encode(
    view: StepView,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    *,
    pad_to: int | None = None,
) -> tuple[ObsArray, MaskArray]:
    """``(obs float32[N, F], mask bool[N])`` of one view (see :func:`encode_view` for ``index``)."""
    encoded = encode_view(view, max_candidates, pad_to=pad_to)
    return encoded.obs, encoded.mask


def encode_batch(
    views: Sequence[StepView],
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    *,
    pad_to: int | None = None,
) -> EncodedBatch:
    """Encode many views, padded to the largest window in the batch (or ``pad_to``).

    ``N`` is at least 1 so that the tensors are never empty.
    """
    windows = [select_window(view, max_candidates) for view in views]
    widest = max((len(rows) for rows in windows), default=0)
    n = max(1, widest) if pad_to is None else pad_to
    if n < widest:
        raise ValueError(f"pad_to={pad_to} is smaller than the widest window ({widest})")
    obs = np.zeros((len(views), n, NUM_FEATURES), dtype=np.float32)
    mask = np.zeros((len(views), n), dtype=np.bool_)
    index = np.full((len(views), n), -1, dtype=np.int64)
    stacked: ObsArray | None = None
    if views and all(
        v.arrays is not None and v.resource_names == views[0].resource_names for v in views
    ):
        stacked = _fill_many(views, windows)
    offset = 0
    for b, (view, rows) in enumerate(zip(views, windows, strict=True)):
        width = len(rows)
        if not width:
            continue
        if stacked is None:
            _fill_rows(view, rows, obs[b, :width])
        else:
            obs[b, :width] = stacked[offset : offset + width]
            offset += width
        index[b, :width] = rows
        view_mask = view.arrays.mask if view.arrays is not None else view.mask
        mask[b, :width] = np.asarray(view_mask, dtype=np.bool_)[index[b, :width]]
    return EncodedBatch(obs=obs, mask=mask, index=index)


def rank_rows(logits: LogitsArray, mask: MaskArray) -> list[int] | None:
    """The rows whose mask is true, best first: descending logit, ties by row (lowest first).

    Rows are in the view's FCFS order, so ties break by submit time, then id.  ``None`` when a
    pickable row's logit is not finite.  Used by ranking (score-once) policies: the service's
    :class:`~app.policy.onnx_policy.OnnxRankingPolicy` and the simulator's ranking encoder.
    """
    if logits.shape != mask.shape:
        raise ValueError(f"logits {logits.shape} and mask {mask.shape} differ in shape")
    rows = np.flatnonzero(mask)
    picked = np.asarray(logits[rows], dtype=np.float32)
    if not bool(np.isfinite(picked).all()):
        return None
    return [int(r) for r in rows[np.argsort(-picked, kind="stable")]]


def masked_argmax(logits: LogitsArray, mask: MaskArray) -> int | None:
    """Row with the largest logit among those whose mask is true (lowest row on ties).

    ``None`` when no row is pickable or a pickable row's logit is not finite.
    """
    if logits.shape != mask.shape:
        raise ValueError(f"logits {logits.shape} and mask {mask.shape} differ in shape")
    if not bool(mask.any()):
        return None
    picked = logits[mask]
    if not bool(np.isfinite(picked).all()):
        return None
    rows = np.flatnonzero(mask)
    return int(rows[int(np.argmax(picked))])
