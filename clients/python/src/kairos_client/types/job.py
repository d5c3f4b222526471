from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import Field

from kairos_client._models import BaseModel
from kairos_client.types.gpu import GpuService
from kairos_client.types.shared import Placement

JobState: TypeAlias = Literal["pending", "running", "finished", "failed", "cancelled"]
JobEventType: TypeAlias = Literal["finished", "failed", "released", "cancelled", "task_finished"]


class JobWarning(BaseModel):
    """Why an accepted job cannot run on the cluster's current nodes (it waits for nodes).

    ``code``: ``no_nodes``, ``task_exceeds_every_node`` or ``gang_exceeds_cluster``;
    ``field``: the job's field (``per_task.<resource>`` or ``tasks``).
    """

    code: str
    message: str
    field: str | None = None


class Job(BaseModel):
    """A gang job: ``tasks`` identical tasks that start together, each needing ``per_task``."""

    id: str
    cluster_id: str
    state: JobState
    tasks: int = 1
    per_task: dict[str, float]
    walltime_s: float | None
    """The requested (estimated) run time; ``None`` for a gpu job submitted without one."""
    submit_time: float
    priority: int = 0
    user: str | None = None
    queue: str | None = None
    depends_on: list[str] = Field(default_factory=list[str])
    labels: dict[str, str] = Field(default_factory=dict[str, str])
    placements: list[Placement] = Field(default_factory=list[Placement])
    start_time: float | None = None
    end_time: float | None = None
    decision_id: str | None = None
    """The decision that started the job (``None`` while pending)."""
    warnings: list[JobWarning] = Field(default_factory=list[JobWarning])
    """For a pending job: why it cannot run on any of the cluster's current nodes."""
    min_tasks: int | None = None
    """gpu clusters: an elastic job's fewest tasks (GPUs)."""
    max_tasks: int | None = None
    """gpu clusters: an elastic job's most tasks (GPUs)."""
    service: GpuService | None = None
    """gpu clusters: attained GPU-seconds, executed seconds, starts and preemptions."""
