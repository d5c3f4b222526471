"""Named resource vectors (``Mapping[str, float]``; a missing name counts as zero) and the one
tolerance of every fit test.

The decision loop converts vectors once per decision to dense tuples in a fixed resource order
(:func:`to_tuple`) and works on plain floats from there.
"""

from __future__ import annotations

from app.kernel.types import Resources

#: Relative slack of every fit test: ``demand <= free + FIT_EPS * max(1, capacity)``.
#: It absorbs float noise (0.1 + 0.2 > 0.3) without letting a real over-allocation through.
FIT_EPS = 1e-9


def to_tuple(r: Resources, names: tuple[str, ...]) -> tuple[float, ...]:
    """The amounts of ``r`` in the order of ``names`` (zero where ``r`` has no such name)."""
    get = r.get
    return tuple([float(get(n, 0.0)) for n in names])
