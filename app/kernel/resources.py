"""Named resource vectors: ``Mapping[str, float]``, a missing name counts as zero.

These helpers are for clarity at the edges (API, tests, explain).  The decision loop converts
vectors once per decision to dense arrays in a fixed resource order (:func:`resource_names`,
:func:`to_tuple`) and works on plain floats from there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from app.kernel.types import Resources

#: Relative slack of every fit test: ``demand <= free + FIT_EPS * max(1, capacity)``.
#: It absorbs float noise (0.1 + 0.2 > 0.3) without letting a real over-allocation through.
FIT_EPS = 1e-9


def slack(capacity: float) -> float:
    """The absolute tolerance used for a resource of this capacity."""
    return FIT_EPS * max(1.0, abs(capacity))


def get(r: Resources, name: str) -> float:
    return float(r.get(name, 0.0))


def resource_names(*vectors: Resources) -> tuple[str, ...]:
    """Sorted union of the names used by ``vectors``."""
    names: set[str] = set()
    for v in vectors:
        names.update(v.keys())
    return tuple(sorted(names))


def names_of(vectors: Iterable[Resources]) -> tuple[str, ...]:
    names: set[str] = set()
    for v in vectors:
        names.update(v.keys())
    return tuple(sorted(names))


def to_tuple(r: Resources, names: tuple[str, ...]) -> tuple[float, ...]:
    get = r.get
    return tuple([float(get(n, 0.0)) for n in names])


def from_tuple(values: Iterable[float], names: tuple[str, ...]) -> dict[str, float]:
    return dict(zip(names, values, strict=True))


def add(a: Resources, b: Resources) -> dict[str, float]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) + v
    return out


def sub(a: Resources, b: Resources) -> dict[str, float]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) - v
    return out


def scale(r: Resources, k: float) -> dict[str, float]:
    """``r * k``; used as ``scale(job.per_task, job.tasks)`` for a gang's total demand."""
    return {n: v * k for n, v in r.items()}


def total(vectors: Iterable[Resources]) -> dict[str, float]:
    out: dict[str, float] = {}
    for v in vectors:
        for k, x in v.items():
            out[k] = out.get(k, 0.0) + x
    return out


def dot(a: Resources, b: Resources) -> float:
    return sum(v * b.get(k, 0.0) for k, v in a.items())


def fits(demand: Resources, free: Resources, capacity: Resources | None = None) -> bool:
    """True when every component of ``demand`` is at most ``free`` (with :data:`FIT_EPS` slack).

    The slack is relative to ``capacity`` when given, else to ``free``.  NaN demand never fits.
    """
    for k, d in demand.items():
        if not d > 0.0:
            if math.isnan(d):
                return False
            continue
        f = free.get(k, 0.0)
        ref = capacity.get(k, 0.0) if capacity is not None else f
        if not d <= f + slack(ref):
            return False
    return True


def max_tasks(
    per_task: Resources, free: Resources, capacity: Resources | None = None
) -> int | None:
    """How many copies of ``per_task`` fit in ``free``; ``None`` when unbounded (zero demand)."""
    best: int | None = None
    for k, d in per_task.items():
        if not d > 0.0:
            if math.isnan(d):
                return 0
            continue
        f = free.get(k, 0.0)
        ref = capacity.get(k, 0.0) if capacity is not None else f
        n = max(0, math.floor((f + slack(ref)) / d))
        best = n if best is None else min(best, n)
    return best


def dominant_share(demand: Resources, capacity: Resources) -> float:
    """``max_r demand_r / capacity_r`` (DRF); ``inf`` when a demanded resource is missing."""
    share = 0.0
    for k, d in demand.items():
        if d <= 0.0:
            continue
        c = capacity.get(k, 0.0)
        share = max(share, d / c if c > 0.0 else math.inf)
    return share


def is_valid(r: Resources) -> bool:
    """Every component finite and non-negative."""
    return all(math.isfinite(v) and v >= 0.0 for v in r.values())


def clamp_nonnegative(r: Resources) -> dict[str, float]:
    return {k: max(0.0, v) for k, v in r.items()}
