"""Queue-order heuristics (:class:`~app.domains.hpc.policy.OrderingPolicy` implementations).

``HEURISTICS`` maps each name to an instance with the default job size (``cpu``);
:func:`get_heuristic` builds one for another size resource.  Every heuristic is
``PolicyRef(name, "1", "heuristic")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from app.domains.hpc.heuristics.base import (
    DEFAULT_SIZE_RESOURCE,
    HEURISTIC_KIND,
    HEURISTIC_VERSION,
    ScoreHeuristic,
    job_size,
)
from app.domains.hpc.heuristics.f1 import F1
from app.domains.hpc.heuristics.f2 import F2
from app.domains.hpc.heuristics.f3 import F3
from app.domains.hpc.heuristics.f4 import F4
from app.domains.hpc.heuristics.fcfs import Fcfs
from app.domains.hpc.heuristics.priority import Priority
from app.domains.hpc.heuristics.sjf import Sjf
from app.domains.hpc.heuristics.smallest import Smallest
from app.domains.hpc.heuristics.unicep import Unicep
from app.domains.hpc.heuristics.wfp3 import Wfp3
from app.domains.hpc.policy import OrderingPolicy
from app.kernel.errors import UnknownHeuristicError

__all__ = [
    "DEFAULT_SIZE_RESOURCE",
    "HEURISTICS",
    "HEURISTIC_CLASSES",
    "HEURISTIC_DESCRIPTIONS",
    "HEURISTIC_KIND",
    "HEURISTIC_VERSION",
    "ScoreHeuristic",
    "get_heuristic",
    "job_size",
]

_CLASSES: tuple[type[ScoreHeuristic], ...] = (
    Fcfs,
    Sjf,
    Smallest,
    Priority,
    Wfp3,
    Unicep,
    F1,
    F2,
    F3,
    F4,
)

#: name -> class, in a stable listing order
HEURISTIC_CLASSES: Mapping[str, type[ScoreHeuristic]] = MappingProxyType(
    {c.name: c for c in _CLASSES}
)
#: name -> one-line description (for ``GET /v1/policies``)
HEURISTIC_DESCRIPTIONS: Mapping[str, str] = MappingProxyType(
    {c.name: c.description for c in _CLASSES}
)
#: name -> instance with the default size resource (``cpu``); instances are stateless
HEURISTICS: Mapping[str, OrderingPolicy] = MappingProxyType({c.name: c() for c in _CLASSES})


def get_heuristic(name: str, size_resource: str = DEFAULT_SIZE_RESOURCE) -> OrderingPolicy:
    """The heuristic called ``name`` (case-insensitive); :class:`UnknownHeuristicError` if none."""
    cls = HEURISTIC_CLASSES.get(name.strip().lower())
    if cls is None:
        raise UnknownHeuristicError(name, tuple(HEURISTIC_CLASSES))
    if size_resource == DEFAULT_SIZE_RESOURCE:
        return HEURISTICS[cls.name]
    return cls(size_resource)
