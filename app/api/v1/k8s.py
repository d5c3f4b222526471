"""Kubernetes scheduler extender adapter (kube-scheduler's wire format)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import CtxDep
from app.api.errors import ERROR_RESPONSES
from app.api.v1.params import ClusterId
from app.schemas.k8s import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
)
from app.services import k8s

router = APIRouter(prefix="/k8s/{cluster_id}", tags=["k8s"], responses=ERROR_RESPONSES)


@router.post(
    "/filter",
    response_model=ExtenderFilterResult,
    response_model_by_alias=True,
    summary="Extender filter",
    description=(
        "kube-scheduler `filter` verb: records the pod as a pending Kairos job (id = pod UID, "
        "required) and returns the candidate nodes that are registered, `up` and have room for "
        "it now; the others are in `FailedNodes` with a reason. Runs under the cluster lock, like "
        "schedule rounds: a job that is no longer pending keeps its spec."
    ),
)
async def filter_nodes(
    cluster_id: ClusterId, body: ExtenderArgs, ctx: CtxDep
) -> ExtenderFilterResult:
    return await k8s.filter_nodes(ctx, cluster_id, body)


@router.post(
    "/prioritize",
    response_model=list[HostPriority],
    response_model_by_alias=True,
    summary="Extender prioritize",
    description=(
        "kube-scheduler `prioritize` verb: scores 0-10 per candidate node, bin-packing first "
        "(the fuller the node would be after placing the pod, the higher); 0 when it does not fit. "
        "Reads the nodes under the cluster lock."
    ),
)
async def prioritize_nodes(
    cluster_id: ClusterId, body: ExtenderArgs, ctx: CtxDep
) -> list[HostPriority]:
    return await k8s.prioritize_nodes(ctx, cluster_id, body)


@router.post(
    "/bind",
    response_model=ExtenderBindingResult,
    response_model_by_alias=True,
    summary="Extender bind",
    description=(
        "kube-scheduler `bind` verb: starts the pod's job on the node (capacity taken) under the "
        "cluster lock; a bind that no longer fits answers an `Error` and binds nothing."
    ),
)
async def bind_pod(
    cluster_id: ClusterId, body: ExtenderBindingArgs, ctx: CtxDep
) -> ExtenderBindingResult:
    return await k8s.bind_pod(ctx, cluster_id, body)
