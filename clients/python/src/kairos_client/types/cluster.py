from __future__ import annotations

from pydantic import Field

from kairos_client._models import BaseModel


class Cluster(BaseModel):
    """A cluster: its resource names, scheduling configuration and current totals.

    ``capacity`` and ``free`` sum the nodes that are ``up``; ``allocated`` sums all nodes.
    """

    id: str
    name: str | None = None
    resources: list[str]
    policy: str
    fallback: str
    backfill: str
    placement: str | None = None
    shadow_policy: str | None = None
    labels: dict[str, str] = Field(default_factory=dict[str, str])
    created_at: float
    updated_at: float
    nodes: int = 0
    """Number of nodes."""
    capacity: dict[str, float] = Field(default_factory=dict[str, float])
    allocated: dict[str, float] = Field(default_factory=dict[str, float])
    free: dict[str, float] = Field(default_factory=dict[str, float])
    pending_jobs: int = 0
    running_jobs: int = 0
