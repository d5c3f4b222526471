"""GPU-domain metrics (spec section 9) of a simulated run.

* JCT = completion - arrival; percentiles are nearest-rank (the value at rank
  ``ceil(p / 100 * n)`` of the sorted JCTs);
* makespan = max completion - min arrival, or max completion from ``t = 0`` under
  ``pollux-compat`` (the artifact's plots);
* GPU utilisation = integral of allocated GPUs over time / (total GPUs x makespan);
* preemptions = running jobs stopped by a decision (completions are not preemptions).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["RunResult", "nearest_rank", "summary"]


@dataclass(slots=True)
class RunResult:
    """One simulated run, per job in workload order; ``usage``: (time, GPUs allocated from
    then until the next entry), ascending."""

    ids: list[str]
    arrivals: list[float]
    completions: list[float]
    preemptions: list[int]
    starts: list[int]
    total_gpus: int
    usage: list[tuple[float, int]] = field(default_factory=list)
    #: makespan measured from t = 0 instead of the first arrival
    origin_zero: bool = False

    @property
    def jcts(self) -> list[float]:
        return [c - a for a, c in zip(self.arrivals, self.completions, strict=True)]


def nearest_rank(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile, nearest-rank."""
    if not values:
        return math.nan
    s = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(s)))
    return s[min(rank, len(s)) - 1]


def _busy_integral(usage: Sequence[tuple[float, int]], end: float) -> float:
    total = 0.0
    for (t, g), nxt in zip(usage, [*usage[1:], (end, 0)], strict=True):
        total += g * max(0.0, min(nxt[0], end) - t)
    return total


def summary(res: RunResult) -> dict[str, float | int]:
    """avg/p50/p99 JCT, makespan, GPU utilisation and preemptions of a run."""
    jcts = res.jcts
    end = max(res.completions) if res.completions else 0.0
    origin = 0.0 if res.origin_zero or not res.arrivals else min(res.arrivals)
    makespan = end - origin
    busy = _busy_integral(res.usage, end)
    util = busy / (res.total_gpus * makespan) if makespan > 0 and res.total_gpus else 0.0
    return {
        "avg_jct_s": math.fsum(jcts) / len(jcts) if jcts else math.nan,
        "p50_jct_s": nearest_rank(jcts, 50),
        "p99_jct_s": nearest_rank(jcts, 99),
        "makespan_s": makespan,
        "gpu_utilization": util,
        "preemptions": sum(res.preemptions),
    }
