"""Cluster types shared by every domain (frozen dataclasses, no I/O).

Resources are named vectors: a mapping of resource name (``"cpu"``, ``"memory_gb"``, ``"gpu"``)
to a non-negative float.  A resource missing from a mapping counts as zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

Resources = Mapping[str, float]

EMPTY_RESOURCES: Resources = MappingProxyType({})


class Gang(Protocol):
    """What placement needs of a job: ``tasks`` identical tasks of ``per_task`` each, spread
    over nodes unless ``single_node``."""

    @property
    def per_task(self) -> Resources: ...

    @property
    def tasks(self) -> int: ...

    @property
    def single_node(self) -> bool: ...


class NodeState(StrEnum):
    UP = "up"
    DOWN = "down"
    DRAIN = "drain"


class PlacementStrategy(StrEnum):
    FIRST_FIT = "first_fit"
    BEST_FIT = "best_fit"
    TETRIS = "tetris"


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    capacity: Resources
    allocated: Resources = field(default_factory=dict)
    state: NodeState = NodeState.UP
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Placement:
    node_id: str
    tasks: int


@dataclass(frozen=True, slots=True)
class Allocation:
    job_id: str
    placements: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: str
    start_at: float


@dataclass(frozen=True, slots=True)
class PolicyRef:
    name: str
    version: str
    kind: str  # "heuristic" | "onnx"
