"""Request parameter shapes (``TypedDict``): pass plain dicts, type checkers check the keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Required

# typing_extensions.TypedDict so pydantic can validate these on Python 3.11 too.
from typing_extensions import TypedDict


class PlacementParam(TypedDict):
    node_id: str
    tasks: int


class NodeParam(TypedDict, total=False):
    """A node in ``nodes.upsert_many``."""

    id: Required[str]
    capacity: Required[Mapping[str, float]]
    labels: Mapping[str, str]
    state: Literal["up", "down", "drain"]


class _JobFields(TypedDict, total=False):
    """The fields a submitted job and a job of an hpc ``decide`` snapshot share."""

    id: Required[str]
    per_task: Required[Mapping[str, float]]
    tasks: int
    submit_time: float
    priority: int
    user: str
    queue: str
    depends_on: Sequence[str]
    labels: Mapping[str, str]
    min_tasks: int
    """gpu clusters, elastic jobs: the fewest tasks (GPUs) it runs with (default ``tasks``)."""
    max_tasks: int
    """gpu clusters, elastic jobs: the most tasks (GPUs) it may be given."""


class JobCreateParam(_JobFields, total=False):
    """A job to submit (``JobCreate`` in the API)."""

    walltime_s: float
    """The requested (estimated) run time: required on hpc clusters, optional on gpu clusters
    (the job's estimate, read only by the estimate-aware policies)."""


class JobSpecParam(_JobFields, total=False):
    """A job of an hpc ``decide`` snapshot (``JobSpec`` in the API): ``walltime_s`` is required.
    ``jobs.submit_many`` takes it too."""

    walltime_s: Required[float]


class SnapshotNodeParam(TypedDict, total=False):
    """A node in a stateless ``decide`` snapshot."""

    id: Required[str]
    capacity: Required[Mapping[str, float]]
    allocated: Mapping[str, float]
    state: Literal["up", "down", "drain"]
    labels: Mapping[str, str]


class RunningJobParam(TypedDict):
    """A running job in a stateless ``decide`` snapshot."""

    job: JobSpecParam
    placements: Sequence[PlacementParam]
    start_time: float


__all__ = [
    "JobCreateParam",
    "JobSpecParam",
    "NodeParam",
    "PlacementParam",
    "RunningJobParam",
    "SnapshotNodeParam",
]
