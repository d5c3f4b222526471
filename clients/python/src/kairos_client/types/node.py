from __future__ import annotations

from typing import Literal

from pydantic import Field

from kairos_client._models import BaseModel


class Node(BaseModel):
    """A node of a cluster with what is taken (``allocated``) and what is left (``free``)."""

    id: str
    cluster_id: str
    capacity: dict[str, float]
    allocated: dict[str, float] = Field(default_factory=dict[str, float])
    free: dict[str, float] = Field(default_factory=dict[str, float])
    labels: dict[str, str] = Field(default_factory=dict[str, str])
    state: Literal["up", "down", "drain"] | str = "up"
    updated_at: float | None = None
