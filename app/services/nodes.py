"""Use-cases for nodes. Node changes take the cluster lock: a schedule round never sees a node's
capacity change under it."""

from __future__ import annotations

from collections.abc import Sequence

from app.db.orm import ClusterRecord, NodeRecord
from app.db.repositories.node_repository import NodeRepository
from app.schemas.cluster import NodeBulkItem, NodeRead
from app.schemas.common import Page
from app.services.amounts import all_zero, zero_amount_error
from app.services.clusters import require_cluster
from app.services.context import Ctx
from app.services.convert import node_read
from app.services.errors import ErrorItem, UnprocessableError
from app.services.paging import cursor_arg


def _check_resources(cluster: ClusterRecord, items: Sequence[NodeBulkItem], prefix: str) -> None:
    allowed = set(cluster.resources)
    problems: list[ErrorItem] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = prefix.format(i=i)
        for name in item.capacity:
            if name not in allowed:
                problems.append(
                    ErrorItem(
                        f"{where}.capacity.{name}",
                        f"cluster {cluster.id!r} has no resource {name!r}",
                        "unknown_resource",
                    )
                )
        if all_zero(item.capacity):
            problems.append(zero_amount_error(f"{where}.capacity"))
        if item.id in seen:
            problems.append(ErrorItem(f"{where}.id", f"node {item.id!r} repeats", "duplicate"))
        seen.add(item.id)
    if problems:
        raise UnprocessableError("the nodes are invalid", details=problems)


async def _upsert(
    ctx: Ctx, cluster: ClusterRecord, items: Sequence[NodeBulkItem]
) -> list[NodeRecord]:
    """Runs under the cluster lock: two upserts of one new node id run one after the other, and
    the second finds the node the first created."""
    repo = NodeRepository(ctx.session)
    existing = await repo.get_many(cluster.pk, [i.id for i in items])
    new: list[NodeRecord] = []
    out: list[NodeRecord] = []
    for item in items:
        record = existing.get(item.id)
        if record is None:
            record = NodeRecord(cluster_pk=cluster.pk, id=item.id, allocated={})
            new.append(record)
        record.capacity = {k: float(v) for k, v in item.capacity.items()}
        record.labels = dict(item.labels)
        record.state = item.state
        out.append(record)
    await repo.add_all(new)
    await ctx.session.flush()
    return out


async def upsert_node(ctx: Ctx, cluster_id: str, item: NodeBulkItem) -> tuple[NodeRead, bool]:
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    _check_resources(cluster, [item], "body")
    existed = bool(await NodeRepository(ctx.session).get_many(cluster.pk, [item.id]))
    (record,) = await _upsert(ctx, cluster, [item])
    return node_read(record, cluster.id), not existed


async def upsert_nodes(ctx: Ctx, cluster_id: str, items: Sequence[NodeBulkItem]) -> list[NodeRead]:
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    _check_resources(cluster, items, "body.nodes[{i}]")
    return [node_read(r, cluster.id) for r in await _upsert(ctx, cluster, items)]


async def list_nodes(
    ctx: Ctx, cluster_id: str, *, limit: int, cursor: str | None
) -> Page[NodeRead]:
    cluster = await require_cluster(ctx, cluster_id)
    page = await NodeRepository(ctx.session).page(
        cluster.pk, after_pk=cursor_arg(cursor), limit=limit
    )
    return Page[NodeRead](
        items=[node_read(n, cluster.id) for n in page.items], next_cursor=page.next_cursor
    )
