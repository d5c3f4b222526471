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


#: An elastic training job of a gpu cluster: 2..8 GPUs, one per task, no run-time estimate.
GPU_JOB_EXAMPLE: JsonDict = {
    "id": "bert-3",
    "tasks": 4,
    "per_task": {"gpu": 1},
    "user": "alice",
    "labels": {"kairos/app": "bert"},
    "min_tasks": 2,
    "max_tasks": 8,
}

WALLTIME_DESCRIPTION = (
    "Requested (estimated) run time, seconds. Required on hpc clusters (a job without it is "
    "422 naming this field); optional on gpu clusters, where it is the job's estimate, read "
    "only by the estimate-aware policies: `sjf`, `srtf` and `srsf` order the jobs without one "
    "after those with one (by arrival, then id), `optimus` gives each of them the same unit of "
    "remaining work; the default policies (`gpu-v1`, `tiresias-2dlas`) never read it."
)


class JobCreate(Schema):
    """A job as submitted to a cluster (``POST .../jobs``, ``.../jobs/batch``)."""

    model_config = ConfigDict(json_schema_extra={"examples": [JOB_EXAMPLE, GPU_JOB_EXAMPLE]})

    id: Id
    tasks: TaskCount = 1
    per_task: NonZeroResources
    # Stored and hashed as null when unset (never left out): a resubmission that drops it is a
    # 409 naming it.
    walltime_s: Duration | None = Field(default=None, description=WALLTIME_DESCRIPTION)
    submit_time: EpochSeconds | None = None
    priority: Annotated[int, Field(ge=-(2**31), le=2**31 - 1, strict=True)] = 0
    user: ShortText | None = None
    queue: ShortText | None = None
    depends_on: Annotated[list[Id], Field(max_length=1024)] = Field(default_factory=list)
    labels: Labels = Field(default_factory=dict)
    # Left out of the stored spec (and its hash) when unset, so specs stored before them hash
    # the same.
    min_tasks: TaskCount | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description=(
            "gpu clusters, elastic jobs: the fewest tasks (GPUs) it runs with (default `tasks`)."
        ),
    )
    max_tasks: TaskCount | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description=(
            "gpu clusters, elastic jobs: the most tasks (GPUs) it may be given (default the "
            "larger of `tasks` and `min_tasks`). A job with `min_tasks` < `max_tasks` is elastic: "
            "rounds may start it at any size in between and resize it while it runs."
        ),
    )


class JobSpec(JobCreate):
    """A job of an hpc snapshot (``POST /v1/decide``): the run time is required (EASY backfill
    and the walltime features read it)."""

    model_config = ConfigDict(json_schema_extra={"examples": [JOB_EXAMPLE]})

    walltime_s: Duration = Field(description="Requested (estimated) run time, seconds.")


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

    jobs: Annotated[list[JobCreate], Field(min_length=1, max_length=MAX_BATCH_JOBS)]


class PlacementRead(ReadSchema):
    node_id: str
    tasks: int


class JobWarning(ReadSchema):
    """Why an accepted job cannot run on the cluster's current nodes."""

    code: Literal["no_nodes", "task_exceeds_every_node", "gang_exceeds_cluster"]
    message: str
    field: str | None = Field(description="The job's field: `per_task.<resource>` or `tasks`.")


class GpuServiceRead(ReadSchema):
    """A job's service on a gpu cluster, from Kairos's own decisions (never from the caller):
    the counters as of ``accounted_at`` (the last round that saw the job running, or the end of
    a job that finished or failed while running)."""

    attained_gpu_s: float = Field(description="GPU-seconds held (restart delays included).")
    executed_s: float = Field(description="Seconds held.")
    starts: int
    preemptions: int
    restart_left_s: float = Field(description="Restart delay still to run, seconds.")
    accounted_at: float | None = Field(description="Epoch seconds the counters are as of.")


class JobRead(ReadSchema):
    id: str
    cluster_id: str
    state: JobStateName
    tasks: int
    per_task: dict[str, float]
    walltime_s: float | None = Field(
        description="The requested (estimated) run time; null for a gpu job submitted without one."
    )
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
    min_tasks: int | None = Field(
        default=None, description="gpu clusters: an elastic job's fewest tasks (GPUs)."
    )
    max_tasks: int | None = Field(
        default=None, description="gpu clusters: an elastic job's most tasks (GPUs)."
    )
    service: GpuServiceRead | None = Field(
        default=None,
        description=(
            "gpu clusters: the job's attained service, starts and preemptions, tracked by Kairos "
            "from its own decisions (a preempted job keeps it)."
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
