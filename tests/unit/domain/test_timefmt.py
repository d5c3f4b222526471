"""Times in explanations: ISO 8601 with the offset and a duration from the decision's now."""

from __future__ import annotations

import pytest

from app.kernel.timefmt import duration, iso_utc, when


def test_iso_utc_has_the_offset() -> None:
    assert iso_utc(1796156025) == "2026-12-01T20:13:45+00:00"


def test_iso_utc_outside_the_calendar_is_in_seconds() -> None:
    assert iso_utc(5e11) == "500000000000 s after the Unix epoch"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.2, "0 s"),
        (45, "45 s"),
        (59.6, "1 min"),
        (3600, "1 h"),
        (4320, "1 h 12 min"),
        (90061, "1 d 1 h"),
    ],
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_when_is_relative_to_now() -> None:
    assert when(1796156025, 1796156025 - 4320) == "2026-12-01T20:13:45+00:00 (in 1 h 12 min)"
    assert when(100, 100) == "1970-01-01T00:01:40+00:00 (now)"
    assert when(5, 10) == "1970-01-01T00:00:05+00:00 (5 s ago)"
