"""The decision log."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import DecisionRecord
from app.db.repositories.pagination import PageResult, encode_cursor

_DECISIONS = cast(Table, DecisionRecord.__table__)
_COLUMNS = tuple(c.key for c in _DECISIONS.columns if c.key != "pk")


class DecisionRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(self, record: DecisionRecord) -> DecisionRecord:
        self.session.add(record)
        await self.session.flush()
        return record

    async def insert(self, record: DecisionRecord) -> None:
        """Insert ``record``'s row with one core ``INSERT`` (the record stays transient: a
        round's decision is written once and never changed through the session)."""
        await self.session.execute(
            insert(_DECISIONS), {name: getattr(record, name) for name in _COLUMNS}
        )

    async def get(self, tenant: str, decision_id: str) -> DecisionRecord | None:
        stmt = select(DecisionRecord).where(
            DecisionRecord.tenant == tenant, DecisionRecord.id == decision_id
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def by_request_id(self, request_id: str) -> DecisionRecord | None:
        stmt = select(DecisionRecord).where(DecisionRecord.request_id == request_id)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def page(
        self, tenant: str, cluster_pk: int, *, after_pk: int | None, limit: int
    ) -> PageResult[DecisionRecord]:
        """Newest first: the cursor walks backwards through the log."""
        stmt = select(DecisionRecord).where(
            DecisionRecord.tenant == tenant, DecisionRecord.cluster_pk == cluster_pk
        )
        if after_pk is not None:
            stmt = stmt.where(DecisionRecord.pk < after_pk)
        stmt = stmt.order_by(DecisionRecord.pk.desc()).limit(limit + 1)
        rows = list((await self.session.execute(stmt)).scalars())
        more = len(rows) > limit
        rows = rows[:limit]
        return PageResult(rows, encode_cursor(rows[-1].pk) if more and rows else None)
