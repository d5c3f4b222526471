"""Policies: every heuristic, every shipped ONNX model, and the caller's own uploads."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

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
    scope: Literal["shared", "tenant"] = Field(
        default="shared",
        description=(
            "`shared`: a heuristic or a shipped model, visible to every tenant and read-only; "
            "`tenant`: an upload of the caller's, visible to it alone"
        ),
    )
