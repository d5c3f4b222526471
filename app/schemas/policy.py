"""Policies: every heuristic, and (from the pipeline) every ONNX model found."""

from __future__ import annotations

from typing import Any

from app.schemas.common import ReadSchema


class PolicyRead(ReadSchema):
    name: str
    version: str
    kind: str
    domain: str
    sha256: str | None = None
    card: dict[str, Any] | None = None
    loaded: bool
    description: str | None = None
