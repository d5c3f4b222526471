"""Jobs: the spec an orchestrator submits and the job as Kairos tracks it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from app.schemas.common import (
    Duration,
    EpochSeconds,
    Id,
    Labels,
    NonZeroResources,
    ReadSchema,
    Schema,
    ShortText,
)

JobStateName = Literal["pending", "running", "finished", "failed", "cancelled"]
JobEventType = Literal["finished", "failed", "released", "cancelled", "task_finished"]

MAX_BATCH_JOBS = 10_000
#: Tasks of one job, and of one placement of it.
MAX_TASKS = 1_000_000
TaskCount = Annotated[int, Field(ge=1, le=MAX_TASKS, strict=True)]

JOB_EXAMPLE: JsonDict = {
    "id": "train-42",
    "tasks": 4,
    "per_task": {"cpu": 8, "memory_gb": 32, "gpu": 1},
    "walltime_s": 3600,
    "priority": 10,
    "user": "alice",
    "queue": "gpu",
}


class JobSpec(Schema):
    model_config = ConfigDict(json_schema_extra={"examples": [JOB_EXAMPLE]})

    id: Id
    tasks: TaskCount = 1
    per_task: NonZeroResources
    walltime_s: Duration
    submit_time: EpochSeconds | None = None
    priority: Annotated[int, Field(ge=-(2**31), le=2**31 - 1, strict=True)] = 0
    user: ShortText | None = None
    queue: ShortText | None = None
    depends_on: Annotated[list[Id], Field(max_length=1024)] = Field(default_factory=list)
    labels: Labels = Field(default_factory=dict)


class JobBatchCreate(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "jobs": [
                        {"id": "a", "per_task": {"cpu": 4}, "walltime_s": 600},
                        {"id": "b", "tasks": 2, "per_task": {"cpu": 16}, "walltime_s": 60},
                    ]
                }
            ]
        }
    )

    jobs: Annotated[list[JobSpec], Field(min_length=1, max_length=MAX_BATCH_JOBS)]


class PlacementRead(ReadSchema):
    node_id: str
    tasks: int


class JobWarning(ReadSchema):
    """Why an accepted job cannot run on the cluster's current nodes."""

    code: Literal["no_nodes", "task_exceeds_every_node", "gang_exceeds_cluster"]
    message: str
    field: str | None = Field(description="The job's field: `per_task.<resource>` or `tasks`.")


class JobRead(ReadSchema):
    id: str
    cluster_id: str
    state: JobStateName
    tasks: int
    per_task: dict[str, float]
    walltime_s: float
    submit_time: float
    priority: int
    user: str | None
    queue: str | None
    depends_on: list[str]
    labels: dict[str, str]
    placements: list[PlacementRead]
    start_time: float | None
    end_time: float | None
    decision_id: str | None
    warnings: list[JobWarning] = Field(
        default_factory=list,
        description=(
            "For a pending job: why it cannot run on any of the cluster's current nodes, in any "
            "state (a task larger than every node, a gang larger than all nodes together, no "
            "nodes). The job is kept and waits for nodes to be added."
        ),
    )


class JobBatchRead(ReadSchema):
    jobs: list[JobRead]


class JobEventCreate(Schema):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"type": "finished", "at": 1767225600.0}]}
    )

    type: JobEventType
    at: EpochSeconds | None = None
    count: Annotated[int, Field(ge=1, le=MAX_TASKS, strict=True)] | None = Field(
        default=None,
        description=(
            "Stages of a DAG, `task_finished`: how many of its tasks finished (default 1). Each "
            "finished task's slot starts the stage's next unlaunched task, or is freed when none "
            "is left."
        ),
    )
    slots: Annotated[int, Field(ge=1, le=MAX_TASKS, strict=True)] | None = Field(
        default=None,
        description=(
            "Stages of a DAG, `released`: how many of its slots are returned without running "
            "their task (default: all it holds); the tasks go back to unlaunched."
        ),
    )
    node_id: Id | None = Field(
        default=None,
        description=(
            "Stages of a DAG: the node whose slots are freed (default: the stage's last "
            "placements first)."
        ),
    )
