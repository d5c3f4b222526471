"""Nodes of one cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from typing import cast as type_cast

from sqlalchemy import Table, Text, cast, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import NodeRecord
from app.db.repositories.bulk import update_by_pk
from app.db.repositories.json_text import json_value
from app.db.repositories.pagination import PageResult, encode_cursor
from app.kernel.clock import utc_now

_NODES = type_cast(Table, NodeRecord.__table__)


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


@dataclass(slots=True)
class NodeRow:
    """One node as a scheduling round reads and writes it (no ORM object: a round touches
    every node of the cluster)."""

    pk: int
    id: str
    capacity: dict[str, Any]
    allocated: dict[str, Any]
    labels: dict[str, Any]
    state: str


async def node_rows(session: AsyncSession, cluster_pk: int) -> list[NodeRow]:
    """Every node of the cluster in ``pk`` order, its JSON columns decoded in one pass each."""
    t = _NODES
    stmt = (
        select(
            t.c.pk,
            t.c.id,
            cast(t.c.capacity, Text),
            cast(t.c.allocated, Text),
            cast(t.c.labels, Text),
            t.c.state,
        )
        .where(t.c.cluster_pk == cluster_pk)
        .order_by(t.c.pk)
    )
    rows = (await session.execute(stmt)).all()
    loads = json_value
    return [
        NodeRow(pk, node_id, loads(cap), loads(alloc), loads(labels), state)
        for pk, node_id, cap, alloc, labels, state in rows
    ]


async def set_allocated(session: AsyncSession, allocated: Mapping[int, Mapping[str, Any]]) -> None:
    """Store ``allocated`` of each node (by ``pk``) in one executemany."""
    if not allocated:
        return
    await update_by_pk(
        session,
        _NODES,
        ("allocated",),
        [(dict(a), pk) for pk, a in allocated.items()],
        {"updated_at": utc_now()},
    )
