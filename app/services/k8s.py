"""Kubernetes scheduler extender on top of a Kairos cluster (``/v1/k8s/{cluster_id}/...``).

* ``filter``: records the pod as a pending job (id: the pod UID; one task of the pod's effective
  requests; walltime from the ``kairos/walltime-s`` annotation, default one day) and keeps the
  candidate nodes that are registered, ``up`` and have room for it now.
* ``prioritize``: scores those nodes 0-10, bin-packing first (the fuller a node would be after the
  placement, the higher), so gangs and big pods keep finding empty nodes.
* ``bind``: starts the job on the node (state ``running``, node capacity taken). Repeating a bind
  to the same node is a no-op; the job's end is reported through the usual
  ``POST .../jobs/{id}/events``.

All three take the cluster lock first, like schedule rounds, and read the job after it: a round
never sees a job's spec change under it, and only a ``pending`` job's spec is ever rewritten (the
spec of a running job is what its placements hold on the nodes).

Kubernetes resources map onto the cluster's resource names: ``cpu`` (cores), ``memory`` (to
``memory_gb`` in 10^9 bytes, or ``memory`` in bytes), ``nvidia.com/gpu`` (to ``gpu``, or the same
name); other names are used when the cluster declares them and ignored otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from app.db.orm import ClusterRecord, JobRecord, NodeRecord
from app.db.repositories.job_repository import JobRepository
from app.db.repositories.node_repository import NodeRepository
from app.domains.hpc.types import JobState, NodeState
from app.kernel.clock import epoch_now
from app.schemas.common import ID_PATTERN
from app.schemas.k8s import (
    Container,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
    Pod,
)
from app.services.clusters import require_cluster
from app.services.context import Ctx
from app.services.convert import add, canonical_hash, free_of
from app.services.errors import ErrorItem, UnprocessableError

WALLTIME_ANNOTATION = "kairos/walltime-s"
DEFAULT_WALLTIME_S = 86_400.0
_SUFFIXES = {
    "": 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}
_QUANTITY = re.compile(
    r"^([+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
)
_ID = re.compile(ID_PATTERN)


def parse_quantity(value: object) -> float:
    """A Kubernetes quantity (``"500m"``, ``"4Gi"``, ``2``) as a float; ValueError if not one."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    match = _QUANTITY.fullmatch(str(value).strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return float(match.group(1)) * _SUFFIXES[match.group(2) or ""]


def _container_requests(container: Container) -> dict[str, float]:
    raw = container.resources.requests or container.resources.limits
    return {str(k): parse_quantity(v) for k, v in raw.items()}


def pod_requests(pod: Pod) -> dict[str, float]:
    """Effective requests: the sum over containers, at least the largest init container."""
    total: dict[str, float] = {}
    for container in pod.spec.containers:
        total = add(total, _container_requests(container))
    for init in pod.spec.init_containers:
        for name, v in _container_requests(init).items():
            total[name] = max(total.get(name, 0.0), v)
    return total


def to_cluster_resources(
    requests: Mapping[str, float], resources: Iterable[str]
) -> dict[str, float]:
    names = set(resources)
    out: dict[str, float] = {}
    for name, v in requests.items():
        if name == "memory" and "memory" not in names and "memory_gb" in names:
            out["memory_gb"] = out.get("memory_gb", 0.0) + v / 1e9
        elif name == "nvidia.com/gpu" and name not in names and "gpu" in names:
            out["gpu"] = out.get("gpu", 0.0) + v
        elif name in names:
            out[name] = out.get(name, 0.0) + v
    return out


def _invalid(message: str, field: str) -> UnprocessableError:
    return UnprocessableError(message, details=[ErrorItem(field, message)])


def _pod_job(cluster: ClusterRecord, pod: Pod) -> dict[str, Any]:
    meta = pod.metadata
    if not _ID.fullmatch(meta.uid):
        raise _invalid("the pod has no usable metadata.uid", "body.Pod.metadata.uid")
    try:
        demand = to_cluster_resources(pod_requests(pod), cluster.resources)
        walltime = float(meta.annotations.get(WALLTIME_ANNOTATION, DEFAULT_WALLTIME_S))
    except ValueError as exc:
        raise _invalid(str(exc), "body.Pod") from None
    if not (0.0 < walltime <= 1e10):
        raise _invalid(f"{WALLTIME_ANNOTATION} must be in (0, 1e10]", "body.Pod.metadata")
    if any(not (0.0 <= v <= 1e15) for v in demand.values()):
        raise _invalid("a resource request is out of range", "body.Pod.spec")
    return {
        "id": meta.uid,
        "tasks": 1,
        "per_task": demand,
        "walltime_s": walltime,
        "priority": pod.spec.priority or 0,
        "user": None,
        "queue": meta.namespace[:128],
        "depends_on": [],
        "labels": {
            "k8s/namespace": meta.namespace,
            "k8s/name": meta.name,
            "kairos/single-node": "true",
        },
    }


async def _record_pod(ctx: Ctx, cluster: ClusterRecord, pod: Pod) -> JobRecord:
    """The pod's job, created pending if absent; a pending job takes the pod's current spec.

    Runs under the cluster lock (the caller holds it)."""
    spec = _pod_job(cluster, pod)
    digest = canonical_hash(spec)
    repo = JobRepository(ctx.session)
    job = await repo.get(cluster.pk, spec["id"])
    if job is None:
        now = epoch_now()
        job = await repo.create_if_absent(
            {
                "cluster_pk": cluster.pk,
                "id": spec["id"],
                "spec": {**spec, "submit_time": now},
                "spec_hash": digest,
                "state": JobState.PENDING.value,
                "submit_time": now,
            }
        )
    if job.state == JobState.PENDING and job.spec_hash != digest:
        job.spec = {**spec, "submit_time": job.submit_time}
        job.spec_hash = digest
    return job


def _candidate_names(args: ExtenderArgs) -> list[str]:
    if args.node_names is not None:
        return list(args.node_names)
    items = (args.nodes or {}).get("items") or []
    return [str((item.get("metadata") or {}).get("name", "")) for item in items]


def _why_not(node: NodeRecord | None, demand: Mapping[str, float]) -> str | None:
    if node is None:
        return "node is not registered with Kairos"
    if node.state != NodeState.UP:
        return f"node is {node.state} in Kairos"
    free = free_of(node.capacity, node.allocated)
    short = sorted(k for k, v in demand.items() if v > free.get(k, 0.0) + 1e-9)
    return f"insufficient {', '.join(short)}" if short else None


async def filter_nodes(ctx: Ctx, cluster_id: str, args: ExtenderArgs) -> ExtenderFilterResult:
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    job = await _record_pod(ctx, cluster, args.pod)
    names = _candidate_names(args)
    nodes = await NodeRepository(ctx.session).get_many(cluster.pk, [n for n in names if n])
    demand = job.spec["per_task"]
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        reason = _why_not(nodes.get(name), demand)
        if reason is None:
            passed.append(name)
        else:
            failed[name] = reason
    return ExtenderFilterResult(node_names=passed, failed_nodes=failed)


def _score(node: NodeRecord, demand: Mapping[str, float]) -> int:
    if _why_not(node, demand) is not None:
        return 0
    after = add(node.allocated, demand)
    shares = [
        min(1.0, after.get(k, 0.0) / c) for k, c in node.capacity.items() if c > 0 and k in demand
    ] or [min(1.0, after.get(k, 0.0) / c) for k, c in node.capacity.items() if c > 0]
    return round(10 * sum(shares) / len(shares)) if shares else 0


async def prioritize_nodes(ctx: Ctx, cluster_id: str, args: ExtenderArgs) -> list[HostPriority]:
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    spec = _pod_job(cluster, args.pod)
    names = _candidate_names(args)
    nodes = await NodeRepository(ctx.session).get_many(cluster.pk, [n for n in names if n])
    return [
        HostPriority(host=name, score=_score(nodes[name], spec["per_task"]) if name in nodes else 0)
        for name in names
    ]


async def bind_pod(ctx: Ctx, cluster_id: str, args: ExtenderBindingArgs) -> ExtenderBindingResult:
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    job = await JobRepository(ctx.session).get(cluster.pk, args.pod_uid)
    if job is None:
        return ExtenderBindingResult(error=f"pod {args.pod_uid} is unknown: filter it first")
    placed_on = [p.get("node_id") for p in job.placements or []]
    if job.state == JobState.RUNNING:
        if placed_on == [args.node]:
            return ExtenderBindingResult()
        return ExtenderBindingResult(error=f"pod is already bound to {placed_on}")
    if job.state != JobState.PENDING:
        return ExtenderBindingResult(error=f"pod's job is {job.state}")
    nodes = await NodeRepository(ctx.session).get_many(cluster.pk, [args.node])
    node = nodes.get(args.node)
    demand = job.spec["per_task"]
    reason = _why_not(node, demand)
    if reason is not None or node is None:
        return ExtenderBindingResult(error=reason or "unknown node")
    node.allocated = add(node.allocated, demand)
    job.state = JobState.RUNNING.value
    job.placements = [{"node_id": node.id, "tasks": 1}]
    job.start_time = epoch_now()
    await ctx.session.flush()
    return ExtenderBindingResult()
