from __future__ import annotations

from typing import Any

from kairos_client._models import BaseModel


class AuditEvent(BaseModel):
    """One thing the tenant did, from the audit log (e.g. a policy upload)."""

    id: str
    at: float
    """Epoch seconds."""
    action: str
    """e.g. ``"policy.upload"``."""
    subject: str
    """What the action was on, e.g. ``"name@version"`` for a policy upload."""
    details: dict[str, Any]
