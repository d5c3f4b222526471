"""Reading the audit log: a tenant's own events, newest first."""

from __future__ import annotations

from app.db.orm import AuditEventRecord
from app.db.repositories.audit_repository import AuditRepository
from app.schemas.audit import AuditEventRead
from app.schemas.common import Page
from app.services.context import Ctx
from app.services.convert import epoch
from app.services.paging import cursor_arg


def _read(record: AuditEventRecord) -> AuditEventRead:
    return AuditEventRead(
        id=record.id,
        at=epoch(record.at),
        action=record.action,
        subject=record.subject,
        details=dict(record.details),
    )


async def list_events(
    ctx: Ctx, *, limit: int, cursor: str | None, action: str | None = None
) -> Page[AuditEventRead]:
    page = await AuditRepository(ctx.session).page(
        ctx.tenant, after_pk=cursor_arg(cursor), limit=limit, action=action
    )
    return Page[AuditEventRead](items=[_read(e) for e in page.items], next_cursor=page.next_cursor)
