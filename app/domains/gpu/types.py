"""GPU-domain state types (frozen dataclasses, no I/O), over the kernel's cluster types.

* A node is a kernel :class:`~app.kernel.types.Node` whose ``capacity["gpu"]`` is its GPU count
  (only ``up`` nodes take new work).
* A job is a gang: rigid (``min_gpus == max_gpus``: exactly that many GPUs or none) or elastic
  (any count in ``min_gpus..max_gpus``, or none).  It runs iff its allocation is non-empty; a
  pending job that has run before keeps its attained service, executed time, starts and
  preemptions.
* A decision gives the allocations of pending jobs that start, the new allocations of running
  (elastic) jobs that are resized, and the running jobs that are preempted; every other running
  job keeps its GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from app.kernel.types import Allocation, Node, NodeState, Placement, PolicyRef

__all__ = [
    "GPU",
    "Allocation",
    "ClusterSnapshot",
    "GpuDecision",
    "GpuJob",
    "JobKind",
    "Node",
    "NodeState",
    "Placement",
    "PolicyRef",
    "gpu_node",
    "node_gpus",
]

#: the resource name of a GPU in a node's capacity
GPU = "gpu"


class JobKind(StrEnum):
    RIGID = "rigid"
    ELASTIC = "elastic"


def gpu_node(node_id: str, gpus: int, state: NodeState = NodeState.UP) -> Node:
    """A node of ``gpus`` GPUs."""
    return Node(id=node_id, capacity={GPU: float(gpus)}, state=state)


def node_gpus(node: Node) -> int:
    """The node's GPU count (0 when it declares none)."""
    return int(node.capacity.get(GPU, 0.0))


@dataclass(frozen=True, slots=True)
class GpuJob:
    """A training job as a scheduling round sees it.

    ``estimate_s``: estimated total run time on a consolidated placement (a user's walltime, a
    predictor's output or, in simulation, the oracle), ``None`` when unknown.
    ``attained_gpu_s``: GPU-seconds held so far (restart delays included); ``executed_s``:
    seconds held so far.  ``allocation`` is empty for a pending job.
    """

    id: str
    arrival: float
    min_gpus: int
    max_gpus: int
    tenant: str = "default"
    app: str | None = None
    estimate_s: float | None = None
    allocation: tuple[Placement, ...] = ()
    attained_gpu_s: float = 0.0
    executed_s: float = 0.0
    starts: int = 0
    preemptions: int = 0
    #: seconds of restart delay still to run (the job holds GPUs but makes no progress)
    restart_left_s: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> JobKind:
        return JobKind.RIGID if self.min_gpus == self.max_gpus else JobKind.ELASTIC

    @property
    def running(self) -> bool:
        return bool(self.allocation)

    @property
    def gpus(self) -> int:
        """GPUs held now (0 when pending)."""
        return sum(p.tasks for p in self.allocation)

    @property
    def demand(self) -> int:
        """GPUs the job asks for to start: its size if rigid, its minimum if elastic."""
        return self.min_gpus

    def remaining_estimate_s(self, floor_s: float = 1e-9) -> float | None:
        """``max(estimate - executed, floor)``, ``None`` without an estimate."""
        if self.estimate_s is None:
            return None
        return max(self.estimate_s - self.executed_s, floor_s)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The cluster at a decision epoch: its nodes and its active (pending or running) jobs."""

    now: float
    nodes: tuple[Node, ...]
    jobs: tuple[GpuJob, ...]

    @property
    def total_gpus(self) -> int:
        """GPUs of the ``up`` nodes."""
        return sum(node_gpus(n) for n in self.nodes if n.state is NodeState.UP)


@dataclass(frozen=True, slots=True)
class GpuDecision:
    """One round's outcome.  ``reasons``: a short explanation per active job (admitted, kept,
    resized, preempted or left waiting, and why)."""

    policy: PolicyRef
    allocations: tuple[Allocation, ...] = ()
    resizes: tuple[Allocation, ...] = ()
    preemptions: tuple[str, ...] = ()
    reasons: Mapping[str, str] = field(default_factory=dict)

    def placements(self, state: ClusterSnapshot) -> dict[str, tuple[Placement, ...]]:
        """Every job's allocation after the decision is applied (running jobs only)."""
        out = {j.id: j.allocation for j in state.jobs if j.running}
        for jid in self.preemptions:
            out.pop(jid, None)
        for a in (*self.allocations, *self.resizes):
            out[a.job_id] = a.placements
        return out
