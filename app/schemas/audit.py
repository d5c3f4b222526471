"""The audit log."""

from __future__ import annotations

from typing import Any

from app.schemas.common import ReadSchema


class AuditEventRead(ReadSchema):
    """One thing the tenant did: ``action`` (``policy.upload``, ...) on ``subject``."""

    id: str
    #: epoch seconds
    at: float
    action: str
    #: what the action was on, e.g. ``name@version`` for ``policy.upload``
    subject: str
    details: dict[str, Any]
