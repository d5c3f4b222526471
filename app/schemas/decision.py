"""Scheduling rounds: stateful ``schedule``, the stateless ``decide`` snapshot, decisions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from app.schemas.cluster import BackfillName, NodeStateName, PlacementName, PolicyName
from app.schemas.common import (
    EpochSeconds,
    Id,
    Labels,
    NonZeroResources,
    ReadSchema,
    Resources,
    Schema,
)
from app.schemas.job import JobSpec, TaskCount

DeadlineMs = Annotated[float, Field(gt=0, le=60_000, allow_inf_nan=False, strict=True)]
DEADLINE_DESCRIPTION = (
    "Milliseconds the primary policy has for this decision, counted from the start of the batch "
    "that decides it; past it the fallback heuristic decides (`fallback.reason: "
    "deadline_exceeded`). At most 60,000. Default: `KAIROS_DEFAULT_DEADLINE_MS` + "
    "`KAIROS_DEADLINE_MS_PER_1K_ITEMS` per 1,000 nodes, pending and running jobs of the snapshot "
    "(50 + 100 per 1,000: 58 ms for 16 nodes x 64 jobs, 1,550 ms for 5,000 nodes x 10,000 jobs)."
)


class RoundTrigger(Schema):
    """What caused a round on a dag cluster (spec 7.3): after ``stage_released`` the DAG of
    ``job_id`` (``"{dag_id}:{stage_id}"`` or a DAG id) is the round's source job and keeps its
    freed slots first."""

    type: Literal["stage_released", "dag_arrived", "slots_added", "periodic"]
    job_id: Id | None = None


class ScheduleRequest(Schema):
    model_config = ConfigDict(json_schema_extra={"examples": [{"dry_run": False, "explain": True}]})

    dry_run: bool = False
    now: EpochSeconds | None = None
    policy: PolicyName | None = None
    explain: bool = False
    #: Time the primary policy may take before the fallback decides (default from settings).
    deadline_ms: DeadlineMs | None = Field(default=None, description=DEADLINE_DESCRIPTION)
    trigger: RoundTrigger | None = Field(
        default=None,
        description=(
            "dag clusters: the event that caused the round (default: the DAG whose stage last "
            "returned slots, if any). Other domains ignore it."
        ),
    )


class PlacementIn(Schema):
    node_id: Id
    tasks: TaskCount


class SnapshotNode(Schema):
    id: Id
    capacity: NonZeroResources
    allocated: Resources = Field(default_factory=dict)
    state: NodeStateName = "up"
    labels: Labels = Field(default_factory=dict)


class SnapshotRunning(Schema):
    job: JobSpec
    placements: Annotated[list[PlacementIn], Field(min_length=1, max_length=100_000)]
    start_time: EpochSeconds


DECIDE_EXAMPLE: JsonDict = {
    "now": 1767225600.0,
    "nodes": [
        {"id": "n1", "capacity": {"cpu": 32, "gpu": 4}},
        {"id": "n2", "capacity": {"cpu": 32, "gpu": 4}, "allocated": {"cpu": 16}},
    ],
    "running": [
        {
            "job": {"id": "r1", "per_task": {"cpu": 16}, "walltime_s": 600},
            "placements": [{"node_id": "n2", "tasks": 1}],
            "start_time": 1767225000.0,
        }
    ],
    "pending": [
        {"id": "p1", "tasks": 2, "per_task": {"cpu": 8, "gpu": 1}, "walltime_s": 300},
        {"id": "p2", "per_task": {"cpu": 48}, "walltime_s": 60},
    ],
    "policy": "f1",
    "backfill": "easy",
}


class DecideRequest(Schema):
    model_config = ConfigDict(json_schema_extra={"examples": [DECIDE_EXAMPLE]})

    domain: Literal["hpc"] = Field(
        default="hpc", description="The snapshot's domain: `hpc` (this shape) when absent."
    )
    now: EpochSeconds
    nodes: Annotated[list[SnapshotNode], Field(max_length=100_000)]
    running: Annotated[list[SnapshotRunning], Field(max_length=100_000)] = Field(
        default_factory=list
    )
    pending: Annotated[list[JobSpec], Field(max_length=100_000)] = Field(default_factory=list)
    #: Ids of finished jobs that pending jobs may depend on.
    finished: Annotated[list[Id], Field(max_length=100_000)] = Field(default_factory=list)
    policy: PolicyName | None = None
    fallback: PolicyName | None = None
    backfill: BackfillName | None = None
    placement: PlacementName | None = None
    explain: bool = False
    deadline_ms: DeadlineMs | None = Field(default=None, description=DEADLINE_DESCRIPTION)


class PolicyRefRead(ReadSchema):
    name: str
    version: str
    kind: str


class FallbackRead(ReadSchema):
    used: bool
    reason: str | None


class PlacementRead(ReadSchema):
    node_id: str
    tasks: int


class AllocationRead(ReadSchema):
    job_id: str
    placements: list[PlacementRead]
    parallelism_limit: int | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description=(
            "dag clusters: the policy's cap on the slots of the stage's DAG (Decima's "
            "parallelism limit); `placements[].tasks` are the slots granted now. Absent elsewhere."
        ),
    )


class ReservationRead(ReadSchema):
    job_id: str
    start_at: float | None = Field(
        description="When the job is expected to start; null for a dag stage's commitment."
    )
    slots: int | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="dag clusters: slots committed to a stage whose parents have not finished.",
    )


class ShadowRead(ReadSchema):
    policy: str
    allocations: list[AllocationRead]


class DecisionRead(ReadSchema):
    id: str
    request_id: str
    cluster_id: str | None
    created_at: float
    policy: PolicyRefRead
    fallback: FallbackRead
    allocations: list[AllocationRead]
    reservations: list[ReservationRead]
    queue_length: int
    latency_ms: float
    dry_run: bool
    explain: dict[str, Any] | None = None
    #: Present when the cluster runs a shadow policy: its choice, stored but not applied.
    shadow: ShadowRead | None = None
    preemptions: list[str] = Field(
        default_factory=list,
        description=(
            "GPU domain: running jobs this decision stops (they checkpoint and return to "
            "pending, keeping their attained service). Empty for other domains."
        ),
    )
    resizes: list[AllocationRead] = Field(
        default_factory=list,
        description=(
            "GPU domain: running elastic jobs given a new allocation (each entry is the job's "
            "whole allocation after the decision, `tasks` = GPUs per node). `allocations` start "
            "pending jobs only. Empty for other domains."
        ),
    )
    stored: bool = Field(
        default=True,
        description=(
            "Whether the decision is in the decision log. Always true for scheduling rounds. "
            "`POST /v1/decide` answers false when the database was unavailable: the decision "
            "is valid, but `GET /v1/decisions/{id}` will not find it (ADR 0087)."
        ),
    )


class DecisionDetail(DecisionRead):
    input: dict[str, Any]
