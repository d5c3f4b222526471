"""Use-cases for clusters."""

from __future__ import annotations

from typing import Any

from app.db.orm import ClusterRecord
from app.db.repositories.cluster_repository import ClusterRepository
from app.db.repositories.node_repository import NodeRepository
from app.domains import DEFAULT_DOMAIN, get_domain
from app.schemas.cluster import ClusterRead, ClusterUpsert
from app.schemas.common import Page
from app.services.context import Ctx
from app.services.convert import cluster_read, domain_config
from app.services.decision import DecisionService
from app.services.errors import ConflictError, ErrorItem, UnprocessableError, not_found
from app.services.paging import cursor_arg
from app.services.policy_names import check_fallback_name, check_policy_name, default_policy
from app.settings import Settings


def _check_policies(body: ClusterUpsert, decisions: DecisionService, tenant: str) -> None:
    """The cluster's policies are ones ``tenant`` may decide its domain with (heuristics, shipped
    models, its own uploads: ADR 0088) and its fallback is one of the domain's heuristics."""
    problems: list[ErrorItem] = []
    for field, name in (("body.policy", body.policy), ("body.shadow_policy", body.shadow_policy)):
        if name is not None:
            problem = check_policy_name(field, name, body.domain, decisions, tenant)
            if problem is not None:
                problems.append(problem)
    if body.fallback is not None:
        problem = check_fallback_name("body.fallback", body.fallback, body.domain, decisions)
        if problem is not None:
            problems.append(problem)
    if len(set(body.resources)) != len(body.resources):
        problems.append(ErrorItem("body.resources", "resource names repeat", "duplicate"))
    if problems:
        raise UnprocessableError("the cluster definition is invalid", details=problems)


async def upsert_cluster(
    ctx: Ctx,
    cluster_id: str,
    body: ClusterUpsert,
    *,
    decisions: DecisionService,
    settings: Settings,
) -> tuple[ClusterRead, bool]:
    """Create or replace the cluster's definition; ``True`` when created.

    Concurrent PUTs of a new id create it once: one is the creation (201), the others replace
    that definition in turn (200)."""
    _check_policies(body, decisions, ctx.tenant)
    repo = ClusterRepository(ctx.session)
    backfill = body.backfill or settings.DEFAULT_BACKFILL
    hpc = body.domain == DEFAULT_DOMAIN
    definition: dict[str, Any] = {
        "name": body.name,
        "domain": body.domain,
        "resources": list(body.resources),
        "backfill": backfill,
        "policy": body.policy
        or default_policy(body.domain, backfill, decisions, settings, ctx.tenant),
        "fallback": body.fallback
        or (settings.DEFAULT_FALLBACK if hpc else get_domain(body.domain).default_fallback),
        "placement": body.placement or settings.DEFAULT_PLACEMENT,
        "shadow_policy": body.shadow_policy,
        "labels": dict(body.labels),
        "domain_config": domain_config(body),
    }
    record = await repo.lock(ctx.tenant, cluster_id)
    created = False
    if record is None:
        created = await repo.create_if_absent(ctx.tenant, cluster_id, definition)
        record = await repo.lock(ctx.tenant, cluster_id)
        if record is None:
            raise ConflictError(
                f"cluster {cluster_id!r} was deleted while this request created it; retry",
                code="concurrent_change",
            )
    if not created:
        if record.domain != body.domain:
            raise ConflictError(
                f"cluster {cluster_id!r} is a {record.domain} cluster; its domain is fixed at "
                f"creation (delete it and create it again to change the domain)",
                code="domain_fixed",
            )
        await _check_resources_cover_nodes(ctx, record, body.resources)
        for name, value in definition.items():
            setattr(record, name, value)
        await ctx.session.flush()
    return await _read(ctx, record), created


async def _check_resources_cover_nodes(
    ctx: Ctx, record: ClusterRecord, resources: list[str]
) -> None:
    allowed = set(resources)
    for node in await NodeRepository(ctx.session).all(record.pk):
        extra = sorted(k for k, v in node.capacity.items() if k not in allowed and v > 0)
        if extra:
            raise UnprocessableError(
                "a resource still used by a node cannot be removed",
                details=[ErrorItem("body.resources", f"node {node.id!r} has capacity of {extra}")],
            )


async def _read(ctx: Ctx, record: ClusterRecord) -> ClusterRead:
    repo = ClusterRepository(ctx.session)
    nodes = await repo.nodes_of([record.pk])
    counts = await repo.job_counts([record.pk])
    return cluster_read(record, nodes.get(record.pk, []), counts.get(record.pk, {}))


async def require_cluster(ctx: Ctx, cluster_id: str, *, lock: bool = False) -> ClusterRecord:
    repo = ClusterRepository(ctx.session)
    record = await (repo.lock if lock else repo.get)(ctx.tenant, cluster_id)
    if record is None:
        raise not_found("cluster", cluster_id)
    return record


async def get_cluster(ctx: Ctx, cluster_id: str) -> ClusterRead:
    return await _read(ctx, await require_cluster(ctx, cluster_id))


async def list_clusters(ctx: Ctx, *, limit: int, cursor: str | None) -> Page[ClusterRead]:
    repo = ClusterRepository(ctx.session)
    page = await repo.page(ctx.tenant, after_pk=cursor_arg(cursor), limit=limit)
    pks = [c.pk for c in page.items]
    nodes = await repo.nodes_of(pks)
    counts = await repo.job_counts(pks)
    items = [cluster_read(c, nodes.get(c.pk, []), counts.get(c.pk, {})) for c in page.items]
    return Page[ClusterRead](items=items, next_cursor=page.next_cursor)


async def delete_cluster(ctx: Ctx, cluster_id: str) -> None:
    """Deletes the cluster with its nodes, jobs and decisions."""
    record = await require_cluster(ctx, cluster_id, lock=True)
    await ClusterRepository(ctx.session).delete(record)
