"""Clusters and their nodes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response, status

from app.api.deps import CtxDep, DecisionServiceDep, SettingsDep
from app.api.errors import ERROR_RESPONSES
from app.api.v1.params import ClusterId, Cursor, Limit, NodeId
from app.schemas.cluster import (
    CLUSTER_EXAMPLE,
    NODE_EXAMPLE,
    ClusterRead,
    ClusterUpsert,
    NodeBulkItem,
    NodeBulkRead,
    NodeBulkUpsert,
    NodeRead,
    NodeUpsert,
)
from app.schemas.common import DEFAULT_PAGE_LIMIT, Page, example
from app.services import clusters as cluster_service
from app.services import nodes as node_service
from app.services import shadow as shadow_service

router = APIRouter(prefix="/clusters", tags=["clusters"], responses=ERROR_RESPONSES)
nodes_router = APIRouter(
    prefix="/clusters/{cluster_id}/nodes", tags=["nodes"], responses=ERROR_RESPONSES
)


@router.put(
    "/{cluster_id}",
    response_model=ClusterRead,
    status_code=status.HTTP_200_OK,
    summary="Create or update a cluster",
    description=(
        "Registers a cluster (201) or replaces its definition (200): the resource names its "
        "nodes and jobs may use, the policy that decides (`name[@version]`), the fallback "
        "heuristic and the backfilling mode. Defaults: policy `f1`, fallback `f1`, backfill "
        "`easy`, placement `first_fit`."
    ),
    responses={201: {"model": ClusterRead, "description": "Created"}},
)
async def upsert_cluster(
    cluster_id: ClusterId,
    body: Annotated[
        ClusterUpsert,
        Body(openapi_examples={"gpu": example("A GPU cluster", CLUSTER_EXAMPLE)}),
    ],
    ctx: CtxDep,
    decisions: DecisionServiceDep,
    settings: SettingsDep,
    response: Response,
) -> ClusterRead:
    cluster, created = await cluster_service.upsert_cluster(
        ctx, cluster_id, body, decisions=decisions, settings=settings
    )
    if created:
        response.status_code = status.HTTP_201_CREATED
    return cluster


@router.get(
    "/{cluster_id}",
    response_model=ClusterRead,
    summary="Get a cluster with its totals",
    description=(
        "The cluster's definition with totals over its nodes (`capacity` and `free` of nodes "
        "that are `up`, `allocated` over all nodes) and its pending/running job counts."
    ),
)
async def get_cluster(cluster_id: ClusterId, ctx: CtxDep) -> ClusterRead:
    return await cluster_service.get_cluster(ctx, cluster_id)


@router.get(
    "",
    response_model=Page[ClusterRead],
    summary="List clusters",
    description="The caller's clusters in creation order, one page at a time.",
)
async def list_clusters(
    ctx: CtxDep, limit: Limit = DEFAULT_PAGE_LIMIT, cursor: Cursor = None
) -> Page[ClusterRead]:
    return await cluster_service.list_clusters(ctx, limit=limit, cursor=cursor)


@router.get(
    "/{cluster_id}/shadow-report",
    response_model=shadow_service.ShadowReport,
    summary="Shadow-mode report",
    description=(
        "How often the shadow policy's choice (computed and stored beside every decision, never "
        "applied) agreed with the served one: same set of jobs started."
    ),
)
async def get_shadow_report(cluster_id: ClusterId, ctx: CtxDep) -> shadow_service.ShadowReport:
    return await shadow_service.shadow_report(ctx, cluster_id)


@router.delete(
    "/{cluster_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a cluster",
    description="Deletes the cluster with its nodes, jobs and decision log.",
)
async def delete_cluster(cluster_id: ClusterId, ctx: CtxDep) -> Response:
    await cluster_service.delete_cluster(ctx, cluster_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@nodes_router.put(
    "/{node_id}",
    response_model=NodeRead,
    summary="Create or update a node",
    description=(
        "Sets a node's capacity, labels and state (`up`, `down`: no placements, `drain`: no new "
        "placements). What runs on the node stays allocated; a `down` node's jobs are reported "
        "`failed` by the orchestrator. Capacity may only name the cluster's resources."
    ),
    responses={201: {"model": NodeRead, "description": "Created"}},
)
async def upsert_node(
    cluster_id: ClusterId,
    node_id: NodeId,
    body: Annotated[
        NodeUpsert, Body(openapi_examples={"gpu": example("An 8-GPU node", NODE_EXAMPLE)})
    ],
    ctx: CtxDep,
    response: Response,
) -> NodeRead:
    item = NodeBulkItem(id=node_id, capacity=body.capacity, labels=body.labels, state=body.state)
    node, created = await node_service.upsert_node(ctx, cluster_id, item)
    if created:
        response.status_code = status.HTTP_201_CREATED
    return node


@nodes_router.put(
    "",
    response_model=NodeBulkRead,
    summary="Create or update many nodes",
    description="Bulk upsert of up to 10,000 nodes in one transaction: all or nothing.",
)
async def upsert_nodes(cluster_id: ClusterId, body: NodeBulkUpsert, ctx: CtxDep) -> NodeBulkRead:
    nodes = await node_service.upsert_nodes(ctx, cluster_id, body.nodes)
    return NodeBulkRead(nodes=nodes)


@nodes_router.get(
    "",
    response_model=Page[NodeRead],
    summary="List nodes",
    description="The cluster's nodes with `allocated` and `free`, one page at a time.",
)
async def list_nodes(
    cluster_id: ClusterId, ctx: CtxDep, limit: Limit = DEFAULT_PAGE_LIMIT, cursor: Cursor = None
) -> Page[NodeRead]:
    return await node_service.list_nodes(ctx, cluster_id, limit=limit, cursor=cursor)
