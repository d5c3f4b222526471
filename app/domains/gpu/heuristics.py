"""The GPU domain's heuristic library (spec section 8.2): each is a priority key (ascending,
ties by arrival then id) plus an admission mode, or one of the two allocation rules (DRF's
share-ordered walk, Optimus's marginal gain).

Notation: ``a`` arrival, ``g`` GPUs (held if running, else the demand), ``x`` executed seconds,
``A`` attained GPU-seconds, ``e`` estimated total duration, ``r = max(e - x, eps)`` estimated
remaining.  A key that needs an estimate sorts jobs without one last.

* preemptive: every active job is walked in key order, admitted if it fits (skip otherwise);
  running jobs not admitted are preempted;
* non-preemptive: running jobs keep their GPUs; pending jobs in key order are admitted if they
  fit; ``block`` stops at the first that does not.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from app.domains.gpu.types import GpuJob, PolicyRef
from app.kernel.errors import UnknownHeuristicError

__all__ = [
    "DEFAULT_FALLBACK",
    "HEURISTICS",
    "GittinsTable",
    "GpuConfig",
    "GpuHeuristic",
    "Mode",
    "Placement",
    "get_heuristic",
    "heuristic_names",
    "queue_level",
]

DEFAULT_FALLBACK = "tiresias-2dlas"
#: Tiresias's quantum of the Gittins index, GPU-seconds
GITTINS_DELTA_GPU_S = 3250.0
INF = math.inf


class Mode(StrEnum):
    KEY = "key"
    DRF = "drf"
    OPTIMUS = "optimus"


class Placement(StrEnum):
    #: best fit on one node, else whole free nodes then a best-fit remainder (section 7.4)
    CONSOLIDATE = "consolidate"
    #: repeatedly the node with the most free GPUs (Pollux and Tiresias simulators)
    MOST_FREE = "most-free"


@dataclass(frozen=True, slots=True)
class GittinsTable:
    """Gittins indices from an empirical GPU-time distribution (Tiresias's formula, spec
    section 2.4, with the textbook expected remaining service ``sum(S_j - a)``).

    ``index(a)``: with ``i`` the first sample above ``a`` and ``k`` the first above ``a + delta``
    (``n - 1`` beyond the largest), ``P = (k - i) / (n - i)`` and
    ``E = (sum_{j=i}^{k-1} (S_j - a) + delta (n - k)) / (n - i)``; the index is ``P / E`` (0
    beyond the largest sample)."""

    samples: tuple[float, ...]
    delta: float = GITTINS_DELTA_GPU_S

    @staticmethod
    def of(values: Sequence[float], delta: float = GITTINS_DELTA_GPU_S) -> GittinsTable:
        return GittinsTable(tuple(sorted(float(v) for v in values)), delta)

    def index(self, attained: float) -> float:
        s = self.samples
        n = len(s)
        i = bisect.bisect_right(s, attained)
        if i >= n:
            return 0.0
        k = bisect.bisect_right(s, attained + self.delta)
        if k >= n:
            k = n - 1
        k = max(k, i)
        p = (k - i) / (n - i)
        e = (math.fsum(v - attained for v in s[i:k]) + self.delta * (n - k)) / (n - i)
        return p / e if e > 0 else 0.0


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """What a round needs besides the snapshot and the policy."""

    placement: Placement = Placement.CONSOLIDATE
    #: 2D-LAS queue thresholds on attained GPU-seconds (``kairos``: Tiresias's 3 queues)
    las_thresholds: tuple[float, ...] = (3250.0, 7200.0)
    #: for ``tiresias-2dgittins``; without one the index is 0 and the order is 2D-LAS's
    gittins: GittinsTable | None = None
    #: elastic speedup ``s(g) = g ** alpha`` (Optimus's model when no table is given)
    speedup_alpha: float = 0.8
    #: Optimus's time per unit of work of a job on ``g`` GPUs; overrides ``speedup_alpha``
    step_time: Callable[[GpuJob, int], float] | None = field(default=None, compare=False)


def queue_level(attained_gpu_s: float, thresholds: Sequence[float]) -> int:
    """The 2D-LAS queue of a job: how many thresholds its attained service has reached."""
    return bisect.bisect_right(list(thresholds), attained_gpu_s)


KeyFn = Callable[[GpuJob, GpuConfig], tuple[float, ...]]


def _size(j: GpuJob) -> int:
    return j.gpus if j.running else j.demand


def _est(j: GpuJob) -> float:
    return INF if j.estimate_s is None else j.estimate_s


def _rem(j: GpuJob) -> float:
    r = j.remaining_estimate_s()
    return INF if r is None else r


def _2dlas(j: GpuJob, c: GpuConfig) -> tuple[float, ...]:
    return (float(queue_level(j.attained_gpu_s, c.las_thresholds)), 0.0 if j.running else 1.0)


def _2dgittins(j: GpuJob, c: GpuConfig) -> tuple[float, ...]:
    gi = 0.0 if c.gittins is None else c.gittins.index(j.attained_gpu_s)
    return (float(queue_level(j.attained_gpu_s, c.las_thresholds)), -gi)


@dataclass(frozen=True, slots=True)
class GpuHeuristic:
    """A heuristic of the library; ``ref`` names it in decisions."""

    name: str
    description: str
    mode: Mode = Mode.KEY
    key: KeyFn | None = None
    preemptive: bool = True
    block: bool = False
    #: the key reads the estimate (information-aware)
    needs_estimate: bool = False

    @property
    def ref(self) -> PolicyRef:
        return PolicyRef(self.name, "1", "heuristic")

    def sort_key(self, job: GpuJob, config: GpuConfig) -> tuple[float | str, ...]:
        base = self.key(job, config) if self.key is not None else ()
        return (*base, job.arrival, job.id)


_LIBRARY: tuple[GpuHeuristic, ...] = (
    GpuHeuristic(
        "fifo",
        "arrival order, running jobs kept, stop at the first that does not fit",
        key=lambda j, _c: (j.arrival,),
        preemptive=False,
        block=True,
    ),
    GpuHeuristic(
        "fifo-skip",
        "arrival order, running jobs kept, later jobs may start first (first fit)",
        key=lambda j, _c: (j.arrival,),
        preemptive=False,
    ),
    GpuHeuristic(
        "sjf",
        "shortest estimated duration first, running jobs kept",
        key=lambda j, _c: (_est(j),),
        preemptive=False,
        needs_estimate=True,
    ),
    GpuHeuristic(
        "srtf",
        "shortest estimated remaining time first, preemptive",
        key=lambda j, _c: (_rem(j),),
        needs_estimate=True,
    ),
    GpuHeuristic(
        "srsf",
        "smallest estimated remaining GPU-time (remaining x GPUs) first, preemptive",
        key=lambda j, _c: (_rem(j) * _size(j),),
        needs_estimate=True,
    ),
    GpuHeuristic(
        "smallest-first",
        "fewest GPUs first, preemptive",
        key=lambda j, _c: (float(_size(j)),),
    ),
    GpuHeuristic(
        "las",
        "least attained GPU-seconds first, re-sorted every round, preemptive",
        key=lambda j, _c: (j.attained_gpu_s,),
    ),
    GpuHeuristic(
        "tiresias-2dlas",
        "discretised 2D-LAS: queue by attained GPU-seconds, running jobs ahead in their queue",
        key=_2dlas,
    ),
    GpuHeuristic(
        "tiresias-2dgittins",
        "discretised 2D-Gittins: queue by attained GPU-seconds, highest Gittins index first",
        key=_2dgittins,
    ),
    GpuHeuristic(
        "drf",
        "lowest tenant dominant (GPU) share first, recomputed after each admission",
        mode=Mode.DRF,
    ),
    GpuHeuristic(
        "optimus",
        "every job at its minimum, then one GPU at a time to the largest marginal gain",
        mode=Mode.OPTIMUS,
    ),
)

HEURISTICS: Mapping[str, GpuHeuristic] = MappingProxyType({h.name: h for h in _LIBRARY})


def heuristic_names() -> tuple[str, ...]:
    return tuple(sorted(HEURISTICS))


def get_heuristic(name: str) -> GpuHeuristic:
    """The heuristic ``name`` (:class:`UnknownHeuristicError` if none)."""
    try:
        return HEURISTICS[name.strip().lower()]
    except KeyError:
        raise UnknownHeuristicError(name, heuristic_names()) from None
