"""Clusters and nodes."""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, ValidationInfo, field_validator
from pydantic.config import JsonDict

from app.schemas.common import (
    Id,
    Labels,
    Name,
    NonZeroResources,
    ReadSchema,
    ResourceName,
    Schema,
)

#: ``"<policy name>[@version]"``.
PolicyName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}(@[A-Za-z0-9_.\-]{1,63})?$")
]
BackfillName = Literal["easy", "none"]
PlacementName = Literal["first_fit", "best_fit", "tetris"]
NodeStateName = Literal["up", "down", "drain"]
#: The scheduling domains a cluster may declare (``app.domains``).
DomainName = Literal["hpc", "gpu", "dag"]
GpuPlacementName = Literal["consolidate", "most-free"]
#: A non-negative, finite number of seconds (or GPU-seconds).
Seconds = Annotated[float, Field(ge=0, le=1e15, allow_inf_nan=False, strict=True)]

CLUSTER_EXAMPLE: JsonDict = {
    "name": "Training cluster",
    "resources": ["cpu", "memory_gb", "gpu"],
    "policy": "f1",
    "fallback": "f1",
    "backfill": "easy",
    "labels": {"region": "eu-west"},
}


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

    @field_validator("las_thresholds_gpu_s")
    @classmethod
    def _ascending(cls, value: list[float]) -> list[float]:
        if any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError("the thresholds must be strictly ascending")
        return value


class GpuSettingsRead(ReadSchema):
    restart_cost_s: float
    las_thresholds_gpu_s: list[float]
    placement: str


class DagClusterSettings(Schema):
    """A dag cluster's settings (``clusters.domain_config``)."""

    executor_capacity: NonZeroResources | None = Field(
        default=None,
        description=(
            "One executor slot: a node holds as many slots as fit its capacity, and a task "
            "must fit one slot. Default: 1 of the cluster's `cpu` resource (else of its first)."
        ),
    )
    weighted_fair_alpha: Annotated[float, Field(ge=-16, le=16, allow_inf_nan=False)] = Field(
        default=0.0, description="alpha of the `weighted_fair` heuristic."
    )


#: A cluster of GPU training jobs (domain gpu) with its settings.
GPU_CLUSTER_EXAMPLE: JsonDict = {
    "name": "Training GPUs",
    "domain": "gpu",
    "resources": ["gpu"],
    "fallback": "tiresias-2dlas",
    "gpu": {"restart_cost_s": 30, "las_thresholds_gpu_s": [3250, 7200]},
}


class ClusterUpsert(Schema):
    model_config = ConfigDict(
        json_schema_extra={"examples": [CLUSTER_EXAMPLE, GPU_CLUSTER_EXAMPLE]}
    )

    name: Name | None = None
    domain: DomainName = Field(
        default="hpc",
        description=(
            "The scheduling domain whose rules decide this cluster: `hpc` (batch gangs, EASY "
            "backfilling), `gpu` (GPU training jobs: preemption, elastic resizes, attained "
            "service) or `dag` (jobs as DAGs of stages). Fixed when the cluster is created."
        ),
    )
    resources: Annotated[list[ResourceName], Field(min_length=1, max_length=64)]
    policy: PolicyName | None = None
    fallback: PolicyName | None = None
    backfill: BackfillName | None = None
    placement: PlacementName | None = None
    shadow_policy: PolicyName | None = None
    labels: Labels = Field(default_factory=dict)
    gpu: GpuClusterSettings | None = Field(
        default=None,
        description="gpu clusters: restart cost, 2D-LAS thresholds and placement (defaults).",
    )
    dag: DagClusterSettings | None = Field(
        default=None,
        description="dag clusters: the executor slot and the weighted-fair alpha (defaults).",
    )

    @field_validator("dag")
    @classmethod
    def _dag_settings_need_a_dag_cluster(
        cls, value: DagClusterSettings | None, info: ValidationInfo
    ) -> DagClusterSettings | None:
        if value is not None and info.data.get("domain", "hpc") != "dag":
            raise ValueError("only a cluster with domain 'dag' takes dag settings")
        return value

    @field_validator("gpu")
    @classmethod
    def _gpu_settings_need_a_gpu_cluster(
        cls, value: GpuClusterSettings | None, info: ValidationInfo
    ) -> GpuClusterSettings | None:
        if value is not None and info.data.get("domain", "hpc") != "gpu":
            raise ValueError("only a cluster with domain 'gpu' takes gpu settings")
        return value


class ClusterRead(ReadSchema):
    id: str
    name: str | None
    domain: DomainName = "hpc"
    resources: list[str]
    policy: str
    fallback: str
    backfill: str
    placement: str
    shadow_policy: str | None
    labels: dict[str, str]
    created_at: float
    updated_at: float
    nodes: int = Field(description="Number of nodes in every state (`up`, `drain`, `down`).")
    schedulable_nodes: int = Field(description="Number of `up` nodes (new work is placed there).")
    total_capacity: dict[str, float] = Field(description="Capacity summed over all nodes.")
    schedulable_capacity: dict[str, float] = Field(
        description="Capacity summed over the `up` nodes."
    )
    capacity: dict[str, float] = Field(
        description="Deprecated: the same as `schedulable_capacity` (the `up` nodes only).",
        json_schema_extra={"deprecated": True},
    )
    allocated: dict[str, float] = Field(description="Allocated amounts summed over all nodes.")
    free: dict[str, float] = Field(description="Free amounts summed over the `up` nodes.")
    pending_jobs: int
    running_jobs: int
    gpu: GpuSettingsRead | None = Field(
        default=None, description="gpu clusters: the cluster's gpu settings."
    )
    dag: DagClusterSettings | None = Field(
        default=None, description="dag clusters: the cluster's dag settings."
    )


NODE_EXAMPLE: JsonDict = {
    "capacity": {"cpu": 64, "memory_gb": 256, "gpu": 8},
    "labels": {"rack": "r1"},
}


class NodeUpsert(Schema):
    model_config = ConfigDict(json_schema_extra={"examples": [NODE_EXAMPLE]})

    capacity: NonZeroResources
    labels: Labels = Field(default_factory=dict)
    state: NodeStateName = "up"


class NodeBulkItem(NodeUpsert):
    id: Id


class NodeBulkUpsert(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "nodes": [
                        {"id": "n1", "capacity": {"cpu": 64, "memory_gb": 256, "gpu": 8}},
                        {"id": "n2", "capacity": {"cpu": 64, "memory_gb": 256}, "state": "drain"},
                    ]
                }
            ]
        }
    )

    nodes: Annotated[list[NodeBulkItem], Field(min_length=1, max_length=10_000)]


class NodeRead(ReadSchema):
    id: str
    cluster_id: str
    capacity: dict[str, float]
    allocated: dict[str, float]
    free: dict[str, float]
    labels: dict[str, str]
    state: str
    updated_at: float


class NodeBulkRead(ReadSchema):
    nodes: list[NodeRead]
