"""The audit log: what the caller's tenant did (policy uploads, ...), newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import CtxDep
from app.api.errors import ERROR_RESPONSES
from app.api.v1.params import Cursor, Limit
from app.schemas.audit import AuditEventRead
from app.schemas.common import DEFAULT_PAGE_LIMIT, Page
from app.services import audit as audit_service

router = APIRouter(prefix="/audit", tags=["audit"], responses=ERROR_RESPONSES)

Action = Annotated[
    str | None,
    Query(
        pattern=r"^[a-z][a-z0-9_.]{0,63}$",
        description="Only events of this action (e.g. `policy.upload`)",
        examples=["policy.upload"],
    ),
]


@router.get(
    "",
    response_model=Page[AuditEventRead],
    summary="List audit events",
    description=(
        "The caller's tenant's audit log, newest first: one event per accepted action "
        "(`policy.upload` with subject `name@version`), written in the same transaction as the "
        "action. Other tenants' events are never listed."
    ),
)
async def list_audit_events(
    ctx: CtxDep,
    limit: Limit = DEFAULT_PAGE_LIMIT,
    cursor: Cursor = None,
    action: Action = None,
) -> Page[AuditEventRead]:
    return await audit_service.list_events(ctx, limit=limit, cursor=cursor, action=action)
