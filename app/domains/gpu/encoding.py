"""The ``kairos-gpu-v1`` features of a GPU snapshot (spec section 8.1): one row per candidate job.

The one formula the Gymnasium env, the service's learned policy and the evaluation use.

* **Candidates**: the running jobs (by arrival, then id), then the pending ones (same order); the
  first ``window`` of them are rows, the rest overflow (invisible to the policy).
* **Row** = :data:`JOB_FEATURES` per-job values, then :data:`CLUSTER_FEATURES` cluster values
  broadcast to every row (:data:`NUM_FEATURES` in all), each ~[0, 1] (sizes relative to the
  largest node or the cluster may exceed 1). ``g`` is the GPUs a job holds (running) or asks
  for to start (pending); ``free`` the GPUs of ``up`` nodes that no running job holds.
* **Mask**: true for a row whose job could ever run on the ``up`` nodes (running, or ``g`` <=
  their GPUs). A masked-out row is never admitted by the learned policy.
* Every scale is a constant of :class:`EncodingConstants` (stored in the model card), not a
  statistic learned from data; with ``use_estimates`` false the estimate features are 0 (the
  information-agnostic variant).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from app.domains.gpu.types import ClusterSnapshot, GpuJob, NodeState, node_gpus

__all__ = [
    "CLUSTER_FEATURES",
    "DEFAULT_WINDOW",
    "FEATURE_NAMES",
    "FEATURE_SCHEMA_VERSION",
    "JOB_FEATURES",
    "NUM_FEATURES",
    "BoolArray",
    "Encoded",
    "EncodingConstants",
    "FloatArray",
    "candidates",
    "encode",
]

FEATURE_SCHEMA_VERSION: Final = "kairos-gpu-v1"
#: candidate rows the policy sees at most (spec: K = 64)
DEFAULT_WINDOW: Final = 64

FEATURE_NAMES: Final = (
    "gpus_per_node",  # g / largest up node's GPUs
    "gpus_per_cluster",  # g / GPUs of up nodes
    "wait",  # log1p(now - arrival) / log1p(t0)
    "attained",  # log1p(attained GPU-s) / log1p(attained scale)
    "executed",  # log1p(executed s) / log1p(executed scale)
    "running",
    "las_queue",  # 2-queue LAS level: attained >= threshold
    "has_estimate",
    "estimate_remaining",  # log1p(max(estimate - executed, 0)) / log1p(estimate scale)
    "preempted",  # preemptions / (1 + preemptions)
    "tenant_share",  # GPUs the job's tenant holds / cluster GPUs
    "tenant_pending_share",  # tenant's pending demand / all pending demand
    "fits_now",  # running, or g <= free
    "fits_one_node",  # running on one node, or g <= the most free GPUs of one node
    "elastic",
    "restart_pending",
    # cluster features, the same on every row
    "free_fraction",  # free / cluster GPUs
    "free_nodes_fraction",  # up nodes with every GPU free / up nodes with GPUs
    "largest_free_block",  # most free GPUs of one node / largest node's GPUs
    "pending_demand",  # pending jobs' demand / cluster GPUs
)
JOB_FEATURES: Final = 16
CLUSTER_FEATURES: Final = 4
NUM_FEATURES: Final = JOB_FEATURES + CLUSTER_FEATURES

FloatArray = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class EncodingConstants:
    """The fixed scales of the features (the model card's ``encoding``)."""

    wait_scale_s: float = 86_400.0
    attained_scale_gpu_s: float = 3_600_000.0
    executed_scale_s: float = 604_800.0
    estimate_scale_s: float = 86_400.0
    las_threshold_gpu_s: float = 3_250.0
    use_estimates: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "use_estimates" and not (math.isfinite(v) and v > 0):
                raise ValueError(f"encoding.{f.name} must be a finite number > 0, got {v}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(raw: Mapping[str, Any]) -> EncodingConstants:
        """Constants from a card's ``encoding`` object (unknown keys refused)."""
        known = {f.name for f in fields(EncodingConstants)}
        extra = sorted(set(raw) - known)
        if extra:
            raise ValueError(f"encoding: unknown keys {', '.join(extra)}")
        out: dict[str, Any] = {}
        for name, v in raw.items():
            if name == "use_estimates":
                if not isinstance(v, bool):
                    raise ValueError("encoding.use_estimates must be true or false")
                out[name] = v
            elif isinstance(v, bool) or not isinstance(v, int | float):
                raise ValueError(f"encoding.{name} must be a number")
            else:
                out[name] = float(v)
        return EncodingConstants(**out)


@dataclass(frozen=True, slots=True)
class Encoded:
    """Rows of one snapshot: ``obs[k, NUM_FEATURES]``, ``mask[k]`` for ``jobs[k]``."""

    jobs: tuple[GpuJob, ...]
    obs: FloatArray
    mask: BoolArray
    overflow: tuple[GpuJob, ...]


def candidates(state: ClusterSnapshot, window: int) -> tuple[list[GpuJob], list[GpuJob]]:
    """``(rows, overflow)``: running then pending jobs, each by (arrival, id), cut at ``window``."""
    key = lambda j: (j.arrival, j.id)  # noqa: E731
    ordered = sorted((j for j in state.jobs if j.running), key=key) + sorted(
        (j for j in state.jobs if not j.running), key=key
    )
    return ordered[:window], ordered[window:]


def encode(
    state: ClusterSnapshot, constants: EncodingConstants, window: int = DEFAULT_WINDOW
) -> Encoded:
    """The feature rows and mask of ``state``'s first ``window`` candidates."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    c = constants
    up = [n for n in state.nodes if n.state is NodeState.UP and node_gpus(n) > 0]
    up_ids = {n.id: i for i, n in enumerate(up)}
    free = [node_gpus(n) for n in up]
    tenant_held: dict[str, int] = {}
    tenant_pending: dict[str, int] = {}
    pending_demand = 0
    for j in state.jobs:
        if j.running:
            for p in j.allocation:
                i = up_ids.get(p.node_id)
                if i is not None:
                    free[i] = max(0, free[i] - p.tasks)
            tenant_held[j.tenant] = tenant_held.get(j.tenant, 0) + j.gpus
        else:
            tenant_pending[j.tenant] = tenant_pending.get(j.tenant, 0) + j.demand
            pending_demand += j.demand
    total = sum(node_gpus(n) for n in up)
    per_node = max((node_gpus(n) for n in up), default=0)
    free_total = sum(free)
    largest_free = max(free, default=0)
    cluster = (
        free_total / total if total else 0.0,
        sum(1 for n, f in zip(up, free, strict=True) if f == node_gpus(n)) / len(up) if up else 0.0,
        largest_free / per_node if per_node else 0.0,
        pending_demand / total if total else 0.0,
    )
    rows, overflow = candidates(state, window)
    counts = (total, per_node, free_total, largest_free, pending_demand)
    logs = _LogScales.of(c)
    table = [
        (*_job_row(j, state.now, c, counts, tenant_held, tenant_pending, logs), *cluster)
        for j in rows
    ]
    obs = (
        np.array(table, dtype=np.float32)
        if table
        else np.zeros((0, NUM_FEATURES), dtype=np.float32)
    )
    mask = np.fromiter(
        (j.running or (total > 0 and j.demand <= total) for j in rows),
        dtype=np.bool_,
        count=len(rows),
    )
    return Encoded(tuple(rows), obs, mask, tuple(overflow))


@dataclass(frozen=True, slots=True)
class _LogScales:
    """``log1p`` of each scale of the constants: the denominators of the log features
    ``log1p(max(value, 0)) / log1p(scale)``."""

    wait: float
    attained: float
    executed: float
    estimate: float

    @staticmethod
    def of(c: EncodingConstants) -> _LogScales:
        return _LogScales(
            math.log1p(c.wait_scale_s),
            math.log1p(c.attained_scale_gpu_s),
            math.log1p(c.executed_scale_s),
            math.log1p(c.estimate_scale_s),
        )


def _job_row(
    j: GpuJob,
    now: float,
    c: EncodingConstants,
    counts: tuple[int, int, int, int, int],
    tenant_held: Mapping[str, int],
    tenant_pending: Mapping[str, int],
    lg: _LogScales,
) -> Sequence[float]:
    log1p = math.log1p
    total, per_node, free_total, largest_free, pending_all = counts
    g = j.gpus if j.running else j.demand
    has_estimate = c.use_estimates and j.estimate_s is not None
    remaining = max((j.estimate_s or 0.0) - j.executed_s, 0.0) if has_estimate else 0.0
    return (
        g / per_node if per_node else 0.0,
        g / total if total else 0.0,
        log1p(max(now - j.arrival, 0.0)) / lg.wait,
        log1p(max(j.attained_gpu_s, 0.0)) / lg.attained,
        log1p(max(j.executed_s, 0.0)) / lg.executed,
        1.0 if j.running else 0.0,
        1.0 if j.attained_gpu_s >= c.las_threshold_gpu_s else 0.0,
        1.0 if has_estimate else 0.0,
        log1p(max(remaining, 0.0)) / lg.estimate if has_estimate else 0.0,
        j.preemptions / (1.0 + j.preemptions),
        tenant_held.get(j.tenant, 0) / total if total else 0.0,
        tenant_pending.get(j.tenant, 0) / pending_all if pending_all else 0.0,
        1.0 if j.running or g <= free_total else 0.0,
        (1.0 if len({p.node_id for p in j.allocation}) == 1 else 0.0)
        if j.running
        else (1.0 if g <= largest_free else 0.0),
        1.0 if j.max_gpus > j.min_gpus else 0.0,
        1.0 if j.restart_left_s > 0 else 0.0,
    )
