"""The DAG domain's API schemas (spec section 7.2): DAG jobs of stages, their progress, a dag
cluster's settings and the ``POST /v1/decide`` DAG snapshot.

A DAG's stages are also jobs ``"{dag_id}:{stage_id}"``, so DAG and stage ids may not contain
``:``. The decide snapshot's ``dags[].spec`` is the DAG codec's JSON form
(:func:`app.domains.dag.codec.state_to_json`), so a stored DAG decision's input
(``GET /v1/decisions/{id}``) is a valid body of ``POST /v1/decide`` as it is.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints
from pydantic.config import JsonDict

from app.schemas.cluster import PolicyName
from app.schemas.common import (
    Duration,
    EpochSeconds,
    Labels,
    NonZeroResources,
    ReadSchema,
    Schema,
    ShortText,
)
from app.schemas.decision import DEADLINE_DESCRIPTION, DeadlineMs, RoundTrigger, SnapshotNode
from app.schemas.job import PlacementRead, TaskCount

#: DAG and stage ids: an id (``app.schemas.common.ID_PATTERN``) without ``:``.
DAG_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
DagId = Annotated[str, StringConstraints(pattern=DAG_ID_PATTERN)]
StageId = Annotated[str, StringConstraints(pattern=DAG_ID_PATTERN)]
#: Stages of one DAG.
MAX_STAGES = 1024
Count = Annotated[int, Field(ge=0, le=1_000_000, strict=True)]
Seconds = Annotated[float, Field(ge=0, le=1e10, allow_inf_nan=False, strict=True)]
DagStateName = Literal["pending", "running", "finished", "cancelled", "failed"]
StageStateName = Literal["pending", "running", "finished", "cancelled", "failed"]


class StageProfile(Schema):
    """Decima's per-executor-count duration record (spec 1.1), in seconds: read by the
    simulator and the offline evaluator only."""

    first_wave: Annotated[list[Seconds], Field(max_length=10_000)] = Field(default_factory=list)
    rest_wave: Annotated[list[Seconds], Field(max_length=10_000)] = Field(default_factory=list)
    fresh: Annotated[list[Seconds], Field(max_length=10_000)] = Field(default_factory=list)


class StageSpec(Schema):
    id: StageId = Field(description="Unique within the DAG; no `:`.")
    tasks: TaskCount = Field(description="Independent, identical tasks (not a gang).")
    per_task: NonZeroResources = Field(
        description="One task's demand; it must fit one executor slot of the cluster."
    )
    task_duration_s: Duration = Field(description="Estimated seconds per task.")
    depends_on: Annotated[list[StageId], Field(max_length=MAX_STAGES)] = Field(
        default_factory=list,
        description="Stages of the same DAG that must finish before a task of this one starts.",
    )
    max_parallelism: Annotated[int, Field(ge=1, le=1_000_000, strict=True)] | None = Field(
        default=None, description="At most this many slots run the stage at once."
    )
    profile: Annotated[dict[str, StageProfile], Field(max_length=64)] | None = Field(
        default=None,
        description=(
            'Optional `{"<executors>": {first_wave, rest_wave, fresh}}` durations (s); used by '
            "the simulator and offline evaluator only."
        ),
    )


DAG_EXAMPLE: JsonDict = {
    "id": "q9-1",
    "user": "alice",
    "stages": [
        {"id": "scan", "tasks": 8, "per_task": {"cpu": 1}, "task_duration_s": 2.5},
        {"id": "filter", "tasks": 4, "per_task": {"cpu": 1}, "task_duration_s": 1.0},
        {
            "id": "join",
            "tasks": 2,
            "per_task": {"cpu": 1},
            "task_duration_s": 4.0,
            "depends_on": ["scan", "filter"],
            "max_parallelism": 2,
        },
    ],
}


class DagSpec(Schema):
    model_config = ConfigDict(json_schema_extra={"examples": [DAG_EXAMPLE]})

    id: DagId = Field(description="Unique within the cluster; no `:`.")
    submit_time: EpochSeconds | None = None
    priority: Annotated[int, Field(ge=-(2**31), le=2**31 - 1, strict=True)] = 0
    user: ShortText | None = None
    queue: ShortText | None = None
    labels: Labels = Field(default_factory=dict)
    stages: Annotated[list[StageSpec], Field(min_length=1, max_length=MAX_STAGES)]


class StageRead(ReadSchema):
    id: str
    job_id: str = Field(description="The stage as a job: `{dag_id}:{stage_id}`.")
    state: StageStateName
    runnable: bool = Field(description="Every parent finished and tasks are left to launch.")
    tasks: int
    launched: int = Field(description="Tasks started (finished ones included).")
    finished: int
    running_slots: int = Field(description="Slots holding a task of the stage now.")
    unlaunched: int
    per_task: dict[str, float]
    task_duration_s: float
    depends_on: list[str]
    max_parallelism: int | None
    parallelism_limit: int | None = Field(
        description="The policy's executor cap for the DAG at the stage's last grant."
    )
    reserved_slots: int = Field(
        description="Slots the last round committed to the stage while its parents ran."
    )
    placements: list[PlacementRead] = Field(description="Slots held, per node.")
    start_time: float | None
    end_time: float | None


class DagRead(ReadSchema):
    id: str
    cluster_id: str
    state: DagStateName
    submit_time: float
    start_time: float | None
    end_time: float | None
    jct_s: float | None = Field(description="Job completion time (end - submit) once finished.")
    priority: int
    user: str | None
    queue: str | None
    labels: dict[str, str]
    tasks: int
    finished_tasks: int
    running_slots: int
    stages: list[StageRead]


# -- the stateless snapshot ------------------------------------------------------------------------


class StageProgressIn(Schema):
    stage_id: StageId
    launched: Count = 0
    finished: Count = 0
    running_slots: Count = 0


class DagStateIn(Schema):
    spec: DagSpec
    stage_progress: Annotated[list[StageProgressIn], Field(max_length=MAX_STAGES)] = Field(
        default_factory=list
    )


DAG_DECIDE_EXAMPLE: JsonDict = {
    "domain": "dag",
    "now": 1767225600.0,
    "nodes": [
        {"id": "n1", "capacity": {"cpu": 4}},
        {"id": "n2", "capacity": {"cpu": 4}, "allocated": {"cpu": 2}},
    ],
    "executor_capacity": {"cpu": 1},
    "dags": [
        {
            "spec": {
                "id": "q1",
                "submit_time": 1767225000.0,
                "stages": [
                    {"id": "map", "tasks": 6, "per_task": {"cpu": 1}, "task_duration_s": 3.0},
                    {
                        "id": "reduce",
                        "tasks": 2,
                        "per_task": {"cpu": 1},
                        "task_duration_s": 5.0,
                        "depends_on": ["map"],
                    },
                ],
            },
            "stage_progress": [
                {"stage_id": "map", "launched": 4, "finished": 2, "running_slots": 2}
            ],
        },
        {
            "spec": {
                "id": "q2",
                "submit_time": 1767225500.0,
                "stages": [
                    {"id": "scan", "tasks": 3, "per_task": {"cpu": 1}, "task_duration_s": 1.0}
                ],
            }
        },
    ],
    "policy": "fair",
    "explain": True,
}


class DagDecideRequest(Schema):
    """A DAG cluster snapshot to decide (``domain: "dag"``). Free slots are derived from the
    nodes: an ``up`` node holds ``floor(min over resources of (capacity - allocated) /
    executor_capacity)`` free slots."""

    model_config = ConfigDict(json_schema_extra={"examples": [DAG_DECIDE_EXAMPLE]})

    domain: Literal["dag"]
    now: EpochSeconds
    nodes: Annotated[list[SnapshotNode], Field(max_length=100_000)]
    executor_capacity: NonZeroResources | None = Field(
        default=None, description="One executor slot (default: 1 `cpu`)."
    )
    dags: Annotated[list[DagStateIn], Field(max_length=10_000)] = Field(default_factory=list)
    trigger: RoundTrigger | None = None
    policy: PolicyName | None = Field(
        default=None, description="A DAG heuristic or DAG model (default: the cluster default)."
    )
    fallback: PolicyName | None = Field(default=None, description="A DAG heuristic (`fair`).")
    weighted_fair_alpha: Annotated[float, Field(ge=-16, le=16, allow_inf_nan=False)] = 0.0
    explain: bool = False
    deadline_ms: DeadlineMs | None = Field(default=None, description=DEADLINE_DESCRIPTION)
