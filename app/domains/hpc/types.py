"""HPC state types (frozen dataclasses, no I/O); the cluster types shared by every domain
(nodes, placements, policy references) come from :mod:`app.kernel.types` and are re-exported.

Resources are named vectors: a mapping of resource name (``"cpu"``, ``"memory_gb"``, ``"gpu"``)
to a non-negative float.  A resource missing from a mapping counts as zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from app.kernel.types import (
    EMPTY_RESOURCES,
    Allocation,
    Node,
    NodeState,
    Placement,
    PlacementStrategy,
    PolicyRef,
    Reservation,
    Resources,
)

#: Job label that forbids spreading a gang's tasks over several nodes.
SINGLE_NODE_LABEL = "kairos/single-node"


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Backfill(StrEnum):
    NONE = "none"
    EASY = "easy"


@dataclass(frozen=True, slots=True)
class Job:
    """A gang of ``tasks`` identical tasks, each needing ``per_task`` resources."""

    id: str
    per_task: Resources
    walltime_s: float
    submit_time: float
    tasks: int = 1
    priority: int = 0
    user: str | None = None
    queue: str | None = None
    depends_on: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def single_node(self) -> bool:
        return self.labels.get(SINGLE_NODE_LABEL) == "true"


@dataclass(frozen=True, slots=True)
class RunningJob:
    job: Job
    placements: tuple[Placement, ...]
    start_time: float

    @property
    def expected_end(self) -> float:
        """Requested end time: start plus the requested walltime."""
        return self.start_time + self.job.walltime_s


@dataclass(frozen=True, slots=True)
class ClusterState:
    """A snapshot: what the scheduler knows at ``now``.

    ``nodes[i].allocated`` is authoritative for what is in use; ``running`` is used for the
    requested end times (reservations) and must be consistent with it.
    ``finished`` holds ids of finished jobs that pending jobs may depend on.
    """

    now: float
    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[Job, ...] = ()
    finished: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Decision:
    """What one scheduling round decided (before any id/timestamp is assigned by the service)."""

    allocations: tuple[Allocation, ...]
    reservations: tuple[Reservation, ...]
    queue_length: int
    policy: PolicyRef
    explain: Mapping[str, object] = field(default_factory=dict)


__all__ = [
    "EMPTY_RESOURCES",
    "SINGLE_NODE_LABEL",
    "Allocation",
    "Backfill",
    "ClusterState",
    "Decision",
    "Job",
    "JobState",
    "Node",
    "NodeState",
    "Placement",
    "PlacementStrategy",
    "PolicyRef",
    "Reservation",
    "Resources",
    "RunningJob",
]
