from __future__ import annotations

from typing import Any, Literal

from kairos_client._models import BaseModel


class Policy(BaseModel):
    """A scheduling policy the service can use: a heuristic or a loaded ONNX model."""

    name: str
    version: str | None = None
    kind: Literal["onnx", "heuristic"] | str
    domain: str | None = None
    sha256: str | None = None
    card: dict[str, Any] | None = None
    loaded: bool
