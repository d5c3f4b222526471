"""Stored responses of POSTs made with an ``Idempotency-Key``.

A row is inserted (``status_code = 0``: in progress) before the request runs, completed with the
response before the response is sent, and deleted when the response must not be replayed.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import IdempotencyKeyRecord

IN_PROGRESS = 0


class IdempotencyRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, tenant: str, key: str) -> IdempotencyKeyRecord | None:
        stmt = select(IdempotencyKeyRecord).where(
            IdempotencyKeyRecord.tenant == tenant, IdempotencyKeyRecord.key == key
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def add(self, record: IdempotencyKeyRecord) -> bool:
        """Insert ``record``; False when the (tenant, key) row already exists."""
        try:
            async with self.session.begin_nested():
                self.session.add(record)
        except IntegrityError:
            return False
        return True

    async def complete(
        self, tenant: str, key: str, *, status_code: int, content_type: str, body: str
    ) -> None:
        await self.session.execute(
            update(IdempotencyKeyRecord)
            .where(IdempotencyKeyRecord.tenant == tenant, IdempotencyKeyRecord.key == key)
            .values(status_code=status_code, content_type=content_type, response_body=body)
            .execution_options(synchronize_session=False)
        )

    async def restart(
        self, tenant: str, key: str, *, stale_before: datetime, now: datetime
    ) -> bool:
        """Take over an in-progress row abandoned before ``stale_before`` (a crashed request)."""
        result = await self.session.execute(
            update(IdempotencyKeyRecord)
            .where(
                IdempotencyKeyRecord.tenant == tenant,
                IdempotencyKeyRecord.key == key,
                IdempotencyKeyRecord.status_code == IN_PROGRESS,
                IdempotencyKeyRecord.created_at < stale_before,
            )
            .values(created_at=now)
            .execution_options(synchronize_session=False)
        )
        return bool(getattr(result, "rowcount", 0))

    async def remove(self, tenant: str, key: str) -> None:
        await self.session.execute(
            delete(IdempotencyKeyRecord)
            .where(IdempotencyKeyRecord.tenant == tenant, IdempotencyKeyRecord.key == key)
            .execution_options(synchronize_session=False)
        )
