from __future__ import annotations

from typing import Any

from kairos_client._models import BaseModel


class Policy(BaseModel):
    """A scheduling policy the service can use: a heuristic or a loaded ONNX model."""

    name: str
    version: str
    kind: str
    """``"onnx"`` or ``"heuristic"``."""
    domain: str
    sha256: str | None = None
    card: dict[str, Any] | None = None
    loaded: bool
    description: str | None = None
    scope: str | None = None
    """``"shared"`` (a heuristic or shipped model, visible to every tenant) or ``"tenant"`` (an
    upload of the caller's tenant, visible to it alone)."""
