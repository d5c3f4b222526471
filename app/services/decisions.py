"""Reading the decision log."""

from __future__ import annotations

from app.db.repositories.decision_repository import DecisionRepository
from app.schemas.common import Page
from app.schemas.decision import DecisionDetail, DecisionRead
from app.services.clusters import require_cluster
from app.services.context import Ctx
from app.services.convert import decision_detail, decision_read
from app.services.errors import not_found
from app.services.paging import cursor_arg


async def get_decision(ctx: Ctx, decision_id: str) -> DecisionDetail:
    record = await DecisionRepository(ctx.session).get(ctx.tenant, decision_id)
    if record is None:
        raise not_found("decision", decision_id)
    return decision_detail(record)


async def list_decisions(
    ctx: Ctx, cluster_id: str, *, limit: int, cursor: str | None
) -> Page[DecisionRead]:
    """Newest first."""
    cluster = await require_cluster(ctx, cluster_id)
    page = await DecisionRepository(ctx.session).page(
        ctx.tenant, cluster.pk, after_pk=cursor_arg(cursor), limit=limit
    )
    return Page[DecisionRead](
        items=[decision_read(d) for d in page.items], next_cursor=page.next_cursor
    )


async def recent_details(ctx: Ctx, cluster_id: str, *, limit: int) -> list[DecisionDetail]:
    """The cluster's last ``limit`` decisions with their inputs, newest first."""
    cluster = await require_cluster(ctx, cluster_id)
    page = await DecisionRepository(ctx.session).page(
        ctx.tenant, cluster.pk, after_pk=None, limit=limit
    )
    return [decision_detail(d) for d in page.items]
