"""FROZEN pre-optimisation copy of app/kernel/placement.py (commit cd017ab), kept as the reference
implementation for the equivalence tests and the benchmark (benchmarks/core.py). Do not edit.

Placement of a gang (``tasks`` x ``per_task``) onto nodes: first-fit, best-fit, Tetris.

Every strategy is greedy over the same per-node capacity ``k_i`` = how many tasks fit on node
``i`` (only nodes in state ``up``), and differs only in the order in which nodes are filled:

* ``first_fit`` — nodes in id order; pack as many tasks as fit on each.
* ``best_fit`` — nodes that can hold the whole (remaining) gang first, then by least normalised
  free left after placing (``sum_r (free_r - used_r) / capacity_r``): consolidates.
* ``tetris`` — highest alignment ``sum_r (demand_r / capacity_r) * (free_r / capacity_r)``
  first (Grandl et al., dot product of demand and free vector normalised by capacity).

Ties break by node id.  Because every strategy fills greedily, a placement exists iff
``sum_i k_i >= tasks`` (or, for single-node jobs, ``max_i k_i >= tasks``) whatever the strategy:
feasibility (:func:`max_tasks_per_node` + :func:`feasible`) never depends on the strategy.
All-or-nothing: the functions return every task's node or ``None``.

The decision loop uses the array functions on dense ``(nodes, resources)`` matrices; :func:`place`
is the convenient mapping-based entry point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from app.domains.hpc.types import Job, Node, NodeState, Placement, PlacementStrategy, Resources
from app.kernel.resources import FIT_EPS, to_tuple

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

#: best-fit / Tetris scores are rounded to this many decimals before sorting, so that scores equal
#: up to float noise tie, and the tie breaks by node id
SCORE_DECIMALS = 9

#: one gang's placement on the rows of a node matrix: (row index, tasks)
RowPlacement = list[tuple[int, int]]


def slack_matrix(capacity: FloatArray) -> FloatArray:
    """Per-cell tolerance of the fit test (:data:`~app.kernel.resources.FIT_EPS`, relative)."""
    out: FloatArray = FIT_EPS * np.maximum(1.0, np.abs(capacity))
    return out


def inverse_capacity(capacity: FloatArray) -> FloatArray:
    """``1 / capacity`` where capacity is positive, else 0 (a missing resource scores nothing)."""
    out: FloatArray = np.zeros_like(capacity)
    np.divide(1.0, capacity, out=out, where=capacity > 0.0)
    return out


def max_tasks_per_node(
    free: FloatArray, slack: FloatArray, demand: FloatArray, positive: IntArray, tasks: int
) -> FloatArray:
    """``k_i`` = tasks that fit on row ``i`` (clipped to ``[0, tasks]``); floats holding integers.

    ``positive`` are the column indices where ``demand > 0``; zero demand fits anywhere.
    """
    if positive.size == 0:
        return np.full(free.shape[0], float(tasks))
    if positive.size == 1:
        c = int(positive[0])
        k: FloatArray = free[:, c] + slack[:, c]
        k /= demand[c]
    else:
        k = ((free[:, positive] + slack[:, positive]) / demand[positive]).min(axis=1)
    np.floor(k, out=k)
    np.minimum(k, float(tasks), out=k)
    np.maximum(k, 0.0, out=k)
    return k


def feasible(k: FloatArray, tasks: int, single_node: bool) -> bool:
    if k.size == 0:
        return False
    if single_node:
        return bool(k.max() >= tasks)
    return bool(k.sum() >= tasks)


def _fill(order: IntArray, k: FloatArray, tasks: int) -> RowPlacement | None:
    """Greedy fill along ``order`` (row indices with ``k > 0``)."""
    out: RowPlacement = []
    remaining = tasks
    for row in order.tolist():
        take = min(int(k[row]), remaining)
        if take <= 0:
            continue
        out.append((row, take))
        remaining -= take
        if remaining == 0:
            return out
    return None


def place_rows(
    strategy: PlacementStrategy,
    k: FloatArray,
    tasks: int,
    single_node: bool,
    free: FloatArray,
    inv_capacity: FloatArray,
    demand: FloatArray,
) -> RowPlacement | None:
    """Choose rows for ``tasks`` given ``k`` (:func:`max_tasks_per_node`); ``None`` if impossible.

    Rows are assumed to be sorted by node id, so "lowest row" is the id tie-break.
    """
    if tasks <= 0 or not feasible(k, tasks, single_node):
        return None
    if strategy == PlacementStrategy.FIRST_FIT:
        if single_node:
            return [(int(np.argmax(k >= tasks)), tasks)]
        rows = np.flatnonzero(k > 0.0)
        return _fill(rows, k, tasks)
    holds_all = k >= tasks
    if strategy == PlacementStrategy.BEST_FIT:
        used = np.minimum(k, float(tasks))
        left = ((free - used[:, None] * demand[None, :]) * inv_capacity).sum(axis=1)
        left = np.round(left, SCORE_DECIMALS)  # float noise must not beat the id tie-break
        # primary: can hold the whole gang (False sorts first), then least left; lexsort is
        # stable, so equal keys keep row (id) order
        order = np.lexsort((left, ~holds_all))
    else:  # TETRIS
        alignment = ((demand[None, :] * inv_capacity) * (free * inv_capacity)).sum(axis=1)
        alignment = np.round(alignment, SCORE_DECIMALS)
        order = np.lexsort((-alignment,))  # stable: equal alignment keeps row (id) order
    candidates = order[k[order] > 0.0]
    if single_node:
        fitting = candidates[holds_all[candidates]]
        return [(int(fitting[0]), tasks)]
    return _fill(candidates, k, tasks)


def place(
    job: Job,
    nodes: Sequence[Node],
    free: Mapping[str, Resources] | None = None,
    strategy: PlacementStrategy = PlacementStrategy.FIRST_FIT,
) -> tuple[Placement, ...] | None:
    """Place ``job`` on ``nodes``; ``free[node_id]`` defaults to ``capacity - allocated``.

    Only nodes in state ``up`` receive tasks.  Returns the placements (node id order for first-fit,
    strategy order otherwise) or ``None`` when the whole gang cannot be placed.
    """
    up = sorted((n for n in nodes if n.state == NodeState.UP), key=lambda n: n.id)
    if not up or job.tasks <= 0:
        return None
    names = tuple(
        sorted(
            set(job.per_task)
            | {r for n in up for r in n.capacity}
            | {r for n in up for r in n.allocated}
        )
    )
    demand = np.array(to_tuple(job.per_task, names), dtype=np.float64)
    if np.isnan(demand).any() or (demand < 0.0).any():
        return None
    capacity = np.array([to_tuple(n.capacity, names) for n in up], dtype=np.float64)
    if free is None:
        free_m = capacity - np.array([to_tuple(n.allocated, names) for n in up], dtype=np.float64)
    else:
        free_m = np.array([to_tuple(free.get(n.id, {}), names) for n in up], dtype=np.float64)
    positive = np.flatnonzero(demand > 0.0)
    k = max_tasks_per_node(free_m, slack_matrix(capacity), demand, positive, job.tasks)
    rows = place_rows(
        strategy, k, job.tasks, job.single_node, free_m, inverse_capacity(capacity), demand
    )
    if rows is None:
        return None
    return tuple(Placement(up[r].id, t) for r, t in rows)
