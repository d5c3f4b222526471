"""Nodes of one cluster."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import NodeRecord
from app.db.repositories.pagination import PageResult, encode_cursor


class NodeRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get_many(self, cluster_pk: int, node_ids: Sequence[str]) -> dict[str, NodeRecord]:
        if not node_ids:
            return {}
        found: dict[str, NodeRecord] = {}
        # chunk to stay under bind-parameter limits (SQLite: 32766, asyncpg: 32767)
        for i in range(0, len(node_ids), 5000):
            stmt = select(NodeRecord).where(
                NodeRecord.cluster_pk == cluster_pk, NodeRecord.id.in_(node_ids[i : i + 5000])
            )
            found.update({n.id: n for n in (await self.session.execute(stmt)).scalars()})
        return found

    async def all(self, cluster_pk: int) -> list[NodeRecord]:
        stmt = select(NodeRecord).where(NodeRecord.cluster_pk == cluster_pk).order_by(NodeRecord.pk)
        return list((await self.session.execute(stmt)).scalars())

    async def capacities(self, cluster_pk: int) -> list[dict[str, float]]:
        """The capacity of every node of the cluster, in any state (no ORM objects)."""
        stmt = select(NodeRecord.capacity).where(NodeRecord.cluster_pk == cluster_pk)
        return [dict(c) for c in (await self.session.execute(stmt)).scalars()]

    async def add_all(self, records: Sequence[NodeRecord]) -> None:
        self.session.add_all(records)
        await self.session.flush()

    async def page(
        self, cluster_pk: int, *, after_pk: int | None, limit: int
    ) -> PageResult[NodeRecord]:
        stmt = select(NodeRecord).where(NodeRecord.cluster_pk == cluster_pk)
        if after_pk is not None:
            stmt = stmt.where(NodeRecord.pk > after_pk)
        stmt = stmt.order_by(NodeRecord.pk).limit(limit + 1)
        rows = list((await self.session.execute(stmt)).scalars())
        more = len(rows) > limit
        rows = rows[:limit]
        return PageResult(rows, encode_cursor(rows[-1].pk) if more and rows else None)
