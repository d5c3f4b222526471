"""Stored responses of POSTs made with an ``Idempotency-Key``.

A row is inserted (``status_code = 0``: in progress) before the request runs, completed with the
response before the response is sent, and deleted when the response must not be replayed.  Rows
older than the key lifetime are taken over by a new request (:meth:`IdempotencyRepository.renew`)
and purged in batches (:meth:`IdempotencyRepository.purge`).
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

    async def get(
        self, tenant: str, key: str, *, fresh: bool = False
    ) -> IdempotencyKeyRecord | None:
        """The row of (tenant, key); ``fresh``: as the database holds it now, even if this
        session loaded it before."""
        stmt = select(IdempotencyKeyRecord).where(
            IdempotencyKeyRecord.tenant == tenant, IdempotencyKeyRecord.key == key
        )
        if fresh:
            stmt = stmt.execution_options(populate_existing=True)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def get_unexpired(
        self, tenant: str, key: str, *, expired_before: datetime | None
    ) -> IdempotencyKeyRecord | None:
        """The row of (tenant, key), unless it is a finished response created before
        ``expired_before`` (one a new request would take over)."""
        stmt = select(IdempotencyKeyRecord).where(
            IdempotencyKeyRecord.tenant == tenant, IdempotencyKeyRecord.key == key
        )
        if expired_before is not None:
            stmt = stmt.where(
                (IdempotencyKeyRecord.status_code == IN_PROGRESS)
                | (IdempotencyKeyRecord.created_at >= expired_before)
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

    async def renew(self, record: IdempotencyKeyRecord, *, expired_before: datetime) -> bool:
        """Reuse the finished row of ``record``'s (tenant, key) for ``record`` (in progress) if
        it was created before ``expired_before``; False when it was not (or another request
        renewed it first: the condition is evaluated on the row as it is now)."""
        result = await self.session.execute(
            update(IdempotencyKeyRecord)
            .where(
                IdempotencyKeyRecord.tenant == record.tenant,
                IdempotencyKeyRecord.key == record.key,
                IdempotencyKeyRecord.status_code != IN_PROGRESS,
                IdempotencyKeyRecord.created_at < expired_before,
            )
            .values(
                method=record.method,
                path=record.path,
                request_hash=record.request_hash,
                status_code=IN_PROGRESS,
                response_body="",
                content_type="",
                created_at=record.created_at,
            )
            .execution_options(synchronize_session=False)
        )
        return bool(getattr(result, "rowcount", 0))

    async def purge(self, *, created_before: datetime, limit: int) -> int:
        """Delete up to ``limit`` rows created before ``created_before``; how many went."""
        oldest = (
            select(IdempotencyKeyRecord.pk)
            .where(IdempotencyKeyRecord.created_at < created_before)
            .order_by(IdempotencyKeyRecord.created_at)
            .limit(limit)
        )
        result = await self.session.execute(
            delete(IdempotencyKeyRecord)
            .where(IdempotencyKeyRecord.pk.in_(oldest))
            .execution_options(synchronize_session=False)
        )
        return int(getattr(result, "rowcount", 0))

    async def remove(self, tenant: str, key: str) -> None:
        await self.session.execute(
            delete(IdempotencyKeyRecord)
            .where(IdempotencyKeyRecord.tenant == tenant, IdempotencyKeyRecord.key == key)
            .execution_options(synchronize_session=False)
        )
