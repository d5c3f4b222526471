"""Stored responses of POSTs made with an ``Idempotency-Key``."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import IdempotencyKeyRecord


class IdempotencyRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, tenant: str, key: str) -> IdempotencyKeyRecord | None:
        stmt = select(IdempotencyKeyRecord).where(
            IdempotencyKeyRecord.tenant == tenant, IdempotencyKeyRecord.key == key
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def add(self, record: IdempotencyKeyRecord) -> bool:
        """Store ``record``; False when a concurrent request stored the same key first."""
        try:
            async with self.session.begin_nested():
                self.session.add(record)
        except IntegrityError:
            return False
        return True
