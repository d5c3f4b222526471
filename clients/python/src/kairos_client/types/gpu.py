"""GPU clusters: their settings, the attained service Kairos tracks per job, and the snapshot
shapes of a stateless GPU decision (``Client.decide_gpu``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Required, TypeAlias

from pydantic import Field

# typing_extensions.TypedDict so pydantic can validate these on Python 3.11 too.
from typing_extensions import TypedDict

from kairos_client._models import BaseModel

GpuPlacementName: TypeAlias = Literal["consolidate", "most-free"]


class GpuSettings(BaseModel):
    """A gpu cluster's settings: the restart delay charged to each start or resize, the 2D-LAS
    queue thresholds (attained GPU-seconds) and the placement rule."""

    restart_cost_s: float = 30.0
    las_thresholds_gpu_s: list[float] = Field(default_factory=lambda: [3250.0, 7200.0])
    placement: str = "consolidate"


class GpuService(BaseModel):
    """A job's service on a gpu cluster, tracked by Kairos from its own decisions (a preempted
    job keeps it): counters as of ``accounted_at``."""

    attained_gpu_s: float
    executed_s: float
    starts: int
    preemptions: int
    restart_left_s: float
    accounted_at: float | None = None


class GpuSettingsParam(TypedDict, total=False):
    """``gpu`` of ``clusters.upsert`` (gpu clusters) and of ``decide_gpu``."""

    restart_cost_s: float
    las_thresholds_gpu_s: Sequence[float]
    placement: GpuPlacementName


class GpuNodeParam(TypedDict, total=False):
    """A node of a GPU snapshot: its GPU count."""

    id: Required[str]
    gpus: Required[int]
    state: Literal["up", "down", "drain"]


class GpuPlacementParam(TypedDict):
    node_id: str
    gpus: int


class GpuJobParam(TypedDict, total=False):
    """An active job of a GPU snapshot: pending (no ``allocation``) or running, with its
    service so far. Rigid when ``max_gpus`` is left out (or equals ``min_gpus``)."""

    id: Required[str]
    arrival: Required[float]
    min_gpus: Required[int]
    max_gpus: int
    tenant: str
    app: str
    estimate_s: float
    allocation: Sequence[GpuPlacementParam]
    attained_gpu_s: float
    executed_s: float
    starts: int
    preemptions: int
    restart_left_s: float
    labels: Mapping[str, str]
