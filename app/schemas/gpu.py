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

from app.schemas.cluster import NodeStateName, PolicyName
from app.schemas.common import (
    Duration,
    EpochSeconds,
    Id,
    Labels,
    ReadSchema,
    Schema,
    ShortText,
)
from app.schemas.decision import DEADLINE_DESCRIPTION, DeadlineMs

#: GPUs of one node or one job (a whole count).
GpuCount = Annotated[int, Field(ge=0, le=1_000_000, strict=True)]
PositiveGpus = Annotated[int, Field(ge=1, le=1_000_000, strict=True)]
#: A non-negative, finite number of seconds (or GPU-seconds) of service.
Seconds = Annotated[float, Field(ge=0, le=1e15, allow_inf_nan=False, strict=True)]
Count = Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)]
GpuPlacementName = Literal["consolidate", "most-free"]

#: the label of a GPU job that names its application (model), read by policies that use it
APP_LABEL = "kairos/app"


class GpuClusterSettings(Schema):
    """How a gpu cluster's rounds account time and place jobs (spec sections 7.2-7.5)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"restart_cost_s": 30, "las_thresholds_gpu_s": [3250]}]}
    )

    restart_cost_s: Seconds = Field(
        default=30.0,
        description=(
            "Seconds of restart delay charged to a job each time it is started or resized: it "
            "holds its GPUs (and accrues attained service) but makes no progress meanwhile."
        ),
    )
    las_thresholds_gpu_s: Annotated[list[Seconds], Field(max_length=16)] = Field(
        default_factory=lambda: [3250.0, 7200.0],
        description=(
            "Attained-service thresholds (GPU-seconds, ascending) of the 2D-LAS and 2D-Gittins "
            "queues: a job with more attained service than the k-th threshold is in queue k."
        ),
    )
    placement: GpuPlacementName = Field(
        default="consolidate",
        description=(
            "`consolidate`: a gang on the single node that fits it best, else on as few nodes as "
            "possible; `most-free`: repeatedly the node with the most free GPUs."
        ),
    )


class GpuSettingsRead(ReadSchema):
    restart_cost_s: float
    las_thresholds_gpu_s: list[float]
    placement: str


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


class GpuServiceRead(ReadSchema):
    """A job's service on a gpu cluster, from Kairos's own decisions: accounted up to
    ``accounted_at`` and, for a job holding GPUs then, up to now (or its end)."""

    attained_gpu_s: float = Field(description="GPU-seconds held (restart delays included).")
    executed_s: float = Field(description="Seconds held.")
    starts: int
    preemptions: int
    restart_left_s: float = Field(description="Restart delay still to run, seconds.")
    accounted_at: float | None = Field(description="Epoch seconds the counters were advanced to.")
