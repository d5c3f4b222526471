from __future__ import annotations

from typing import Any

from pydantic import Field

from kairos_client._models import BaseModel
from kairos_client.types.shared import Placement


class PolicyRef(BaseModel):
    """Which scheduler made a decision."""

    name: str
    version: str
    kind: str
    """``"onnx"`` or ``"heuristic"``."""


class Fallback(BaseModel):
    """Whether the heuristic fallback decided instead of the configured policy, and why."""

    used: bool
    reason: str | None = None


class Allocation(BaseModel):
    """A job started by a decision, with where its tasks go."""

    job_id: str
    placements: list[Placement]
    parallelism_limit: int | None = None
    """dag clusters: the policy's cap on the slots of the stage's DAG."""


class Reservation(BaseModel):
    """A backfill reservation: ``job_id`` is guaranteed to start no later than ``start_at``;
    on dag clusters ``slots`` committed to a stage whose parents run (``start_at`` null)."""

    job_id: str
    start_at: float | None = None
    slots: int | None = None


class Shadow(BaseModel):
    """What the cluster's shadow policy would have allocated (stored, never applied)."""

    policy: str
    allocations: list[Allocation]


class Decision(BaseModel):
    """One scheduling decision (stored in the decision log)."""

    id: str
    request_id: str | None = None
    cluster_id: str | None = None
    created_at: float
    policy: PolicyRef
    fallback: Fallback
    allocations: list[Allocation] = Field(default_factory=list[Allocation])
    reservations: list[Reservation] = Field(default_factory=list[Reservation])
    queue_length: int
    latency_ms: float
    dry_run: bool = False
    explain: dict[str, Any] | None = None
    shadow: Shadow | None = None
    preemptions: list[str] = Field(default_factory=list[str])
    """gpu clusters: running jobs this decision stops (they return to pending)."""
    resizes: list[Allocation] = Field(default_factory=list[Allocation])
    """gpu clusters: running elastic jobs' whole new allocations (``tasks`` = GPUs)."""
    #: False when ``decide`` answered while the service's database was unavailable: the
    #: decision is valid but not in the decision log (``decisions.retrieve`` will not find it).
    stored: bool = True

    def allocated_job_ids(self) -> list[str]:
        """The ids of the jobs this decision starts, in allocation order."""
        return [allocation.job_id for allocation in self.allocations]


class DecisionDetail(Decision):
    """A decision read back from the log, with the input snapshot it was made from."""

    input: dict[str, Any] = Field(default_factory=dict[str, Any])
