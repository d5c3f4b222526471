from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Required, TypeAlias

from pydantic import Field

# typing_extensions.TypedDict so pydantic can validate these on Python 3.11 too.
from typing_extensions import TypedDict

from kairos_client._models import BaseModel
from kairos_client.types.shared import Placement

DagState: TypeAlias = Literal["pending", "running", "finished", "cancelled", "failed"]
StageState: TypeAlias = Literal["pending", "running", "finished", "cancelled", "failed"]


class DagSettingsParam(TypedDict, total=False):
    """``dag`` of ``clusters.upsert`` (dag clusters): one executor slot and the weighted-fair
    alpha."""

    executor_capacity: Mapping[str, float]
    weighted_fair_alpha: float


class DagSettings(BaseModel):
    """A dag cluster's settings: one executor slot (``None``: 1 of ``cpu``, else of the first
    resource) and the alpha of the ``weighted_fair`` heuristic."""

    executor_capacity: dict[str, float] | None = None
    weighted_fair_alpha: float = 0.0


class StageProfileParam(TypedDict, total=False):
    """Decima's duration record for one executor count (seconds; simulator use only)."""

    first_wave: Sequence[float]
    rest_wave: Sequence[float]
    fresh: Sequence[float]


class StageSpecParam(TypedDict, total=False):
    """One stage of a DAG: ``tasks`` independent tasks of ``per_task`` each (ids without ``:``)."""

    id: Required[str]
    tasks: Required[int]
    per_task: Required[Mapping[str, float]]
    task_duration_s: Required[float]
    depends_on: Sequence[str]
    max_parallelism: int
    profile: Mapping[str, StageProfileParam]


class DagSpecParam(TypedDict, total=False):
    """A DAG of a ``decide_dag`` snapshot (``DagSpec``; ids without ``:``)."""

    id: Required[str]
    stages: Required[Sequence[StageSpecParam]]
    submit_time: float
    priority: int
    user: str
    queue: str
    labels: Mapping[str, str]


class StageProgressParam(TypedDict, total=False):
    stage_id: Required[str]
    launched: int
    finished: int
    running_slots: int


class DagStateParam(TypedDict, total=False):
    """A DAG and its stages' progress in a ``decide_dag`` snapshot."""

    spec: Required[DagSpecParam]
    stage_progress: Sequence[StageProgressParam]


class RoundTriggerParam(TypedDict, total=False):
    """What caused a dag round: after ``stage_released`` the DAG of ``job_id`` keeps its slots."""

    type: Required[Literal["stage_released", "dag_arrived", "slots_added", "periodic"]]
    job_id: str


class DagStage(BaseModel):
    """A stage's progress; the stage is also the job ``job_id`` (``{dag_id}:{stage_id}``)."""

    id: str
    job_id: str
    state: StageState
    runnable: bool = False
    tasks: int
    launched: int = 0
    finished: int = 0
    running_slots: int = 0
    unlaunched: int = 0
    per_task: dict[str, float]
    task_duration_s: float
    depends_on: list[str] = Field(default_factory=list[str])
    max_parallelism: int | None = None
    parallelism_limit: int | None = None
    reserved_slots: int = 0
    placements: list[Placement] = Field(default_factory=list[Placement])
    """Executor slots held, per node (``tasks`` = slots)."""
    start_time: float | None = None
    end_time: float | None = None


class Dag(BaseModel):
    """A DAG job of a dag cluster with its stages' progress; ``jct_s`` once finished."""

    id: str
    cluster_id: str
    state: DagState
    submit_time: float
    start_time: float | None = None
    end_time: float | None = None
    jct_s: float | None = None
    priority: int = 0
    user: str | None = None
    queue: str | None = None
    labels: dict[str, str] = Field(default_factory=dict[str, str])
    tasks: int
    finished_tasks: int = 0
    running_slots: int = 0
    stages: list[DagStage] = Field(default_factory=list[DagStage])
