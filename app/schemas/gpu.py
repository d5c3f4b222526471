"""The GPU domain's API schemas: a gpu cluster's settings, the ``POST /v1/decide`` GPU snapshot
and the attained service Kairos tracks for a job on a gpu cluster.

The snapshot is the GPU codec's JSON form (:func:`app.domains.gpu.codec.state_to_json`) with
``domain: "gpu"`` and what to decide it with, so a stored GPU decision's input
(``GET /v1/decisions/{id}``) is a valid body of ``POST /v1/decide`` as it is.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from app.schemas.cluster import (
    GpuClusterSettings,
    GpuPlacementName,
    GpuSettingsRead,
    NodeStateName,
    PolicyName,
    Seconds,
)
from app.schemas.common import (
    Duration,
    EpochSeconds,
    Id,
    Labels,
    Schema,
    ShortText,
)
from app.schemas.decision import DEADLINE_DESCRIPTION, DeadlineMs
from app.schemas.job import GpuServiceRead

__all__ = [
    "APP_LABEL",
    "GPU_DECIDE_EXAMPLE",
    "GpuClusterSettings",
    "GpuDecideRequest",
    "GpuJobIn",
    "GpuNodeIn",
    "GpuPlacementIn",
    "GpuPlacementName",
    "GpuServiceRead",
    "GpuSettingsRead",
]

#: GPUs of one node or one job (a whole count).
GpuCount = Annotated[int, Field(ge=0, le=1_000_000, strict=True)]
PositiveGpus = Annotated[int, Field(ge=1, le=1_000_000, strict=True)]
Count = Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)]

#: the label of a GPU job that names its application (model), read by policies that use it
APP_LABEL = "kairos/app"


class GpuNodeIn(Schema):
    id: Id
    gpus: GpuCount
    state: NodeStateName = "up"


class GpuPlacementIn(Schema):
    node_id: Id
    gpus: PositiveGpus


class GpuJobIn(Schema):
    """An active job: pending (empty ``allocation``) or running, with its service so far."""

    id: Id
    arrival: EpochSeconds
    min_gpus: PositiveGpus
    max_gpus: PositiveGpus | None = Field(
        default=None, description="Elastic jobs: the most GPUs it may hold (default `min_gpus`)."
    )
    tenant: ShortText = "default"
    app: ShortText | None = None
    estimate_s: Duration | None = None
    allocation: Annotated[list[GpuPlacementIn], Field(max_length=100_000)] = Field(
        default_factory=list
    )
    attained_gpu_s: Seconds = 0.0
    executed_s: Seconds = 0.0
    starts: Count = 0
    preemptions: Count = 0
    restart_left_s: Seconds = 0.0
    labels: Labels = Field(default_factory=dict)


GPU_DECIDE_EXAMPLE: JsonDict = {
    "domain": "gpu",
    "now": 1767225600.0,
    "nodes": [{"id": "n1", "gpus": 4}, {"id": "n2", "gpus": 4}],
    "jobs": [
        {
            "id": "long",
            "arrival": 1767210000.0,
            "min_gpus": 4,
            "allocation": [{"node_id": "n1", "gpus": 4}],
            "attained_gpu_s": 62400.0,
            "executed_s": 15600.0,
            "starts": 1,
        },
        {"id": "new", "arrival": 1767225500.0, "min_gpus": 8, "tenant": "bob"},
        {"id": "elastic", "arrival": 1767225550.0, "min_gpus": 1, "max_gpus": 4},
    ],
    "policy": "tiresias-2dlas",
    "explain": True,
}


class GpuDecideRequest(Schema):
    """A GPU cluster snapshot to decide (``domain: "gpu"``)."""

    model_config = ConfigDict(json_schema_extra={"examples": [GPU_DECIDE_EXAMPLE]})

    domain: Literal["gpu"]
    now: EpochSeconds
    nodes: Annotated[list[GpuNodeIn], Field(max_length=100_000)]
    jobs: Annotated[list[GpuJobIn], Field(max_length=100_000)] = Field(default_factory=list)
    policy: PolicyName | None = Field(
        default=None,
        description="A GPU heuristic or GPU model (default: the GPU default policy).",
    )
    fallback: PolicyName | None = Field(
        default=None, description="A GPU heuristic (default `tiresias-2dlas`)."
    )
    gpu: GpuClusterSettings | None = None
    explain: bool = False
    deadline_ms: DeadlineMs | None = Field(default=None, description=DEADLINE_DESCRIPTION)
