"""The audit log: one row per thing a tenant did, appended in the transaction of the action."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import AuditEventRecord
from app.db.repositories.pagination import PageResult, encode_cursor


def new_audit_id() -> str:
    return f"aud_{uuid.uuid4().hex}"


class AuditRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def record(
        self, tenant: str, action: str, subject: str, details: dict[str, Any]
    ) -> AuditEventRecord:
        """Append an event (flushed: a database that cannot take it fails here, before the
        action goes on)."""
        event = AuditEventRecord(
            id=new_audit_id(), tenant=tenant, action=action, subject=subject, details=details
        )
        self.session.add(event)
        await self.session.flush()
        return event

    async def page(
        self, tenant: str, *, after_pk: int | None, limit: int, action: str | None = None
    ) -> PageResult[AuditEventRecord]:
        """The tenant's events, newest first: the cursor walks backwards through the log."""
        stmt = select(AuditEventRecord).where(AuditEventRecord.tenant == tenant)
        if action is not None:
            stmt = stmt.where(AuditEventRecord.action == action)
        if after_pk is not None:
            stmt = stmt.where(AuditEventRecord.pk < after_pk)
        stmt = stmt.order_by(AuditEventRecord.pk.desc()).limit(limit + 1)
        rows = list((await self.session.execute(stmt)).scalars())
        more = len(rows) > limit
        rows = rows[:limit]
        return PageResult(rows, encode_cursor(rows[-1].pk) if more and rows else None)
