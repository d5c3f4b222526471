from __future__ import annotations

from typing import Literal

from pydantic import Field

from kairos_client._models import BaseModel


class Cluster(BaseModel):
    """A cluster: its resource names, scheduling configuration and current totals."""

    id: str
    name: str | None = None
    resources: list[str]
    policy: str | None = None
    fallback: str | None = None
    backfill: Literal["easy", "none"] | str = "easy"
    labels: dict[str, str] = Field(default_factory=dict)
    capacity: dict[str, float] = Field(default_factory=dict)
    allocated: dict[str, float] = Field(default_factory=dict)
    free: dict[str, float] = Field(default_factory=dict)
    pending_jobs: int = 0
    running_jobs: int = 0
