"""Records <-> domain objects <-> API schemas. Pure functions, no I/O."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from app.db.orm import ClusterRecord, DecisionRecord, JobRecord, NodeRecord
from app.domains.hpc.types import (
    Job,
    JobState,
    Node,
    NodeState,
    Placement,
    Resources,
    RunningJob,
)
from app.schemas.cluster import (
    ClusterRead,
    ClusterUpsert,
    DagClusterSettings,
    DomainName,
    GpuClusterSettings,
    GpuSettingsRead,
    NodeRead,
)
from app.schemas.decision import DecisionRead
from app.schemas.job import JobCreate, JobRead, JobWarning


def epoch(ts: datetime) -> float:
    """SQLite returns naive datetimes: they were written in UTC."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.timestamp()


def canonical_hash(payload: Any) -> str:
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def finite_json(value: Any) -> Any:
    """``value`` as strict JSON: non-finite floats become ``None``, tuples lists, keys strings.

    Decision explanations come from the core as plain objects; PostgreSQL's ``json`` and HTTP
    responses both refuse ``NaN``/``Infinity``.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [finite_json(v) for v in value]
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


def clean(r: Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in r.items()}


def add(a: Mapping[str, float], b: Mapping[str, float], k: float = 1.0) -> dict[str, float]:
    out = clean(a)
    for name, v in b.items():
        out[name] = out.get(name, 0.0) + k * float(v)
    return out


def release(allocated: Mapping[str, float], freed: Mapping[str, float]) -> dict[str, float]:
    """``allocated - freed``, with float noise and negatives snapped to zero."""
    out = {}
    for name, v in add(allocated, freed, -1.0).items():
        out[name] = v if v > 1e-9 * max(1.0, abs(float(allocated.get(name, 0.0)))) else 0.0
    return out


def free_of(capacity: Mapping[str, float], allocated: Mapping[str, float]) -> dict[str, float]:
    return {k: max(0.0, float(c) - float(allocated.get(k, 0.0))) for k, c in capacity.items()}


def placement_demand(per_task: Mapping[str, float], tasks: int) -> dict[str, float]:
    return {k: float(v) * tasks for k, v in per_task.items()}


# -- jobs ------------------------------------------------------------------------------------------


def spec_hash(spec: JobCreate) -> str:
    """Hash of the spec as sent (defaults filled, ``submit_time`` as given, possibly null)."""
    return canonical_hash(spec.model_dump(mode="json"))


def stored_spec(spec: JobCreate, now: float) -> dict[str, Any]:
    data = spec.model_dump(mode="json")
    if data["submit_time"] is None:
        data["submit_time"] = now
    return data


def job_from_spec(spec: Mapping[str, Any]) -> Job:
    """The hpc job of a stored spec (an hpc cluster's specs all have ``walltime_s``: submission
    refuses one without it)."""
    return Job(
        id=spec["id"],
        per_task=clean(spec["per_task"]),
        walltime_s=float(spec["walltime_s"]),
        submit_time=float(spec["submit_time"]),
        tasks=int(spec.get("tasks", 1)),
        priority=int(spec.get("priority", 0)),
        user=spec.get("user"),
        queue=spec.get("queue"),
        depends_on=tuple(spec.get("depends_on", ())),
        labels=dict(spec.get("labels", {})),
    )


def estimate_of(spec: Mapping[str, Any]) -> float | None:
    """A stored spec's ``walltime_s``; ``None`` for a gpu job submitted without an estimate."""
    value = spec.get("walltime_s")
    return None if value is None else float(value)


def placements_of(raw: Iterable[Mapping[str, Any]] | None) -> tuple[Placement, ...]:
    return tuple(Placement(str(p["node_id"]), int(p["tasks"])) for p in raw or ())


def running_from_record(record: JobRecord) -> RunningJob:
    return RunningJob(
        job=job_from_spec(record.spec),
        placements=placements_of(record.placements),
        start_time=float(record.start_time or 0.0),
    )


def job_read(record: JobRecord, cluster_id: str, warnings: Sequence[JobWarning] = ()) -> JobRead:
    s = record.spec
    return JobRead.model_validate(
        {
            "id": record.id,
            "cluster_id": cluster_id,
            "state": record.state,
            "tasks": int(s.get("tasks", 1)),
            "per_task": clean(s["per_task"]),
            "walltime_s": estimate_of(s),
            "submit_time": record.submit_time,
            "priority": int(s.get("priority", 0)),
            "user": s.get("user"),
            "queue": s.get("queue"),
            "depends_on": list(s.get("depends_on", [])),
            "labels": dict(s.get("labels", {})),
            "placements": list(record.placements or []),
            "start_time": record.start_time,
            "end_time": record.end_time,
            "decision_id": record.decision_id,
            "warnings": list(warnings),
            "min_tasks": s.get("min_tasks"),
            "max_tasks": s.get("max_tasks"),
        }
    )


# -- nodes and clusters ----------------------------------------------------------------------------


def node_from_record(record: NodeRecord) -> Node:
    """The node as the scheduler sees it.

    A node whose capacity was lowered below what is running on it is presented with
    ``capacity = max(capacity, allocated)``: nothing new fits there, and the snapshot stays
    consistent until the running jobs end.
    """
    capacity = clean(record.capacity)
    allocated = clean(record.allocated)
    for name, a in allocated.items():
        if a > capacity.get(name, 0.0):
            capacity[name] = a
    return Node(
        id=record.id,
        capacity=capacity,
        allocated=allocated,
        state=NodeState(record.state),
        labels=dict(record.labels),
    )


def node_read(record: NodeRecord, cluster_id: str) -> NodeRead:
    return NodeRead(
        id=record.id,
        cluster_id=cluster_id,
        capacity=clean(record.capacity),
        allocated=clean(record.allocated),
        free=free_of(record.capacity, record.allocated),
        labels=dict(record.labels),
        state=record.state,
        updated_at=epoch(record.updated_at),
    )


def cluster_read(
    record: ClusterRecord, nodes: Iterable[NodeRecord], job_counts: Mapping[str, int]
) -> ClusterRead:
    """Totals: ``nodes``, ``total_capacity`` and ``allocated`` count every node;
    ``schedulable_nodes``, ``schedulable_capacity`` (and its deprecated alias ``capacity``) and
    ``free`` count the ``up`` nodes."""
    total: Resources = {}
    capacity: Resources = {}
    allocated: Resources = {}
    free: Resources = {}
    count = 0
    up = 0
    for node in nodes:
        count += 1
        total = add(total, node.capacity)
        allocated = add(allocated, node.allocated)
        if node.state == NodeState.UP:
            up += 1
            capacity = add(capacity, node.capacity)
            free = add(free, free_of(node.capacity, node.allocated))
    return ClusterRead(
        id=record.id,
        name=record.name,
        domain=cast(DomainName, record.domain),
        resources=list(record.resources),
        policy=record.policy,
        fallback=record.fallback,
        backfill=record.backfill,
        placement=record.placement,
        shadow_policy=record.shadow_policy,
        labels=dict(record.labels),
        created_at=epoch(record.created_at),
        updated_at=epoch(record.updated_at),
        nodes=count,
        schedulable_nodes=up,
        total_capacity=clean(total),
        schedulable_capacity=clean(capacity),
        capacity=clean(capacity),
        allocated=clean(allocated),
        free=clean(free),
        pending_jobs=job_counts.get(JobState.PENDING, 0),
        running_jobs=job_counts.get(JobState.RUNNING, 0),
        gpu=(
            GpuSettingsRead.model_validate(gpu_settings(record).model_dump())
            if record.domain == "gpu"
            else None
        ),
        dag=dag_settings(record) if record.domain == "dag" else None,
    )


def domain_config(body: ClusterUpsert) -> dict[str, Any] | None:
    """What a cluster stores in ``clusters.domain_config``: a gpu cluster its ``gpu`` settings,
    a dag cluster its ``dag`` settings (the defaults when the body has none); hpc nothing."""
    if body.domain == "gpu":
        return {"gpu": (body.gpu or GpuClusterSettings()).model_dump(mode="json")}
    if body.domain == "dag":
        return {"dag": (body.dag or DagClusterSettings()).model_dump(mode="json")}
    return None


def dag_settings(record: ClusterRecord) -> DagClusterSettings:
    """A dag cluster's settings: ``domain_config["dag"]``, the defaults where none are stored."""
    return DagClusterSettings.model_validate((record.domain_config or {}).get("dag") or {})


def gpu_settings(record: ClusterRecord) -> GpuClusterSettings:
    """A gpu cluster's settings: ``domain_config["gpu"]``, the defaults where none are stored."""
    return GpuClusterSettings.model_validate((record.domain_config or {}).get("gpu") or {})


# -- decisions -------------------------------------------------------------------------------------


def decision_read(record: DecisionRecord) -> DecisionRead:
    return DecisionRead.model_validate(_decision_dict(record))


def _decision_dict(record: DecisionRecord) -> dict[str, Any]:
    shadow = None
    if record.shadow_policy is not None and record.shadow_allocations is not None:
        shadow = {"policy": record.shadow_policy, "allocations": record.shadow_allocations}
    return {
        "id": record.id,
        "request_id": record.request_id,
        "cluster_id": record.cluster_id,
        "created_at": epoch(record.created_at),
        "policy": {
            "name": record.policy_name,
            "version": record.policy_version,
            "kind": record.policy_kind,
        },
        "fallback": {"used": record.fallback_used, "reason": record.fallback_reason},
        "allocations": record.allocations,
        "reservations": record.reservations,
        "queue_length": record.queue_length,
        "latency_ms": record.latency_ms,
        "dry_run": record.dry_run,
        "explain": record.explain,
        "shadow": shadow,
        "preemptions": record.preemptions or [],
        "resizes": record.resizes or [],
    }
