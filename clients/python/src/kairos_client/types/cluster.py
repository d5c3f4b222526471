from __future__ import annotations

from pydantic import Field

from kairos_client._models import BaseModel
from kairos_client.types.dag import DagSettings
from kairos_client.types.gpu import GpuSettings


class Cluster(BaseModel):
    """A cluster: its resource names, scheduling configuration and current totals.

    ``nodes``, ``total_capacity`` and ``allocated`` count every node; ``schedulable_nodes``,
    ``schedulable_capacity`` and ``free`` count the nodes that are ``up``. ``capacity`` is a
    deprecated alias of ``schedulable_capacity``.
    """

    id: str
    name: str | None = None
    domain: str = "hpc"
    """``hpc``, ``gpu`` or ``dag``: the rules that decide the cluster (fixed at creation)."""
    resources: list[str]
    policy: str
    fallback: str
    backfill: str
    placement: str | None = None
    shadow_policy: str | None = None
    labels: dict[str, str] = Field(default_factory=dict[str, str])
    created_at: float
    updated_at: float
    nodes: int = 0
    """Number of nodes in every state."""
    schedulable_nodes: int = 0
    """Number of ``up`` nodes."""
    total_capacity: dict[str, float] = Field(default_factory=dict[str, float])
    """Capacity summed over all nodes."""
    schedulable_capacity: dict[str, float] = Field(default_factory=dict[str, float])
    """Capacity summed over the ``up`` nodes."""
    capacity: dict[str, float] = Field(default_factory=dict[str, float])
    """Deprecated: the same as ``schedulable_capacity``."""
    allocated: dict[str, float] = Field(default_factory=dict[str, float])
    free: dict[str, float] = Field(default_factory=dict[str, float])
    pending_jobs: int = 0
    running_jobs: int = 0
    gpu: GpuSettings | None = None
    """gpu clusters: restart cost, 2D-LAS thresholds and placement."""
    dag: DagSettings | None = None
    """dag clusters: the executor slot and the weighted-fair alpha."""
