"""Times in explanations, for people: ISO 8601 in UTC and a duration from the decision's ``now``.

Pure: formats the numbers it is given and never reads a clock.
"""

from __future__ import annotations

from datetime import UTC, datetime

_UNITS = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))


def iso_utc(epoch_s: float) -> str:
    """``2026-12-01T20:13:45+00:00``; an instant outside the calendar's years is given in
    seconds since the Unix epoch."""
    try:
        return datetime.fromtimestamp(round(epoch_s), UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return f"{epoch_s:.0f} s after the Unix epoch"


def duration(seconds: float) -> str:
    """The two largest non-zero units of a non-negative duration, e.g. ``1 h 12 min``,
    ``3 d 4 h``, ``45 s``; under half a second is ``0 s``."""
    rest = max(0, round(seconds))
    parts: list[str] = []
    for unit, size in _UNITS:
        count, rest = divmod(rest, size)
        if count or parts:
            parts.append(f"{count} {unit}")
        if len(parts) == 2:
            break
    parts = [p for p in parts if not p.startswith("0 ")] or ["0 s"]
    return " ".join(parts)


def when(at: float, now: float) -> str:
    """``at`` as ``<ISO 8601> (in <duration>)`` seen from ``now`` (``now`` when equal,
    ``<duration> ago`` when earlier)."""
    delta = at - now
    if round(delta) == 0:
        relative = "now"
    elif delta > 0:
        relative = f"in {duration(delta)}"
    else:
        relative = f"{duration(-delta)} ago"
    return f"{iso_utc(at)} ({relative})"
