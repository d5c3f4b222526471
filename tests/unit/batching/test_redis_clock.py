"""The Redis clock estimator (ADR 0074): the offset comes from the sample with the shortest round
trip among the last ``window``; the server here is a scripted ``TIME`` (the real server is in
``tests/integration/batching/test_clock_skew.py``)."""

from __future__ import annotations

import pytest

from app.batching.redis_clock import RedisClock


class _Scripted:
    """Answers ``TIME`` at server time ``local + true_offset``, after ``out`` seconds on the way
    there and ``back`` seconds on the way back (the local clock is advanced accordingly)."""

    def __init__(self, now: list[float], true_offset: float) -> None:
        self.now = now
        self.true_offset = true_offset
        self.legs: list[tuple[float, float]] = []

    async def time(self) -> tuple[int, int]:
        out, back = self.legs.pop(0)
        self.now[0] += out
        server = self.now[0] + self.true_offset
        self.now[0] += back
        seconds = int(server)
        return seconds, round((server - seconds) * 1e6)


async def test_the_shortest_round_trip_wins_and_bounds_the_error() -> None:
    now = [1_000.0]
    server = _Scripted(now, true_offset=-3.0)
    clock = RedisClock(lambda: now[0], window=4)
    # a busy loop: the answer is read 40 ms late; then a quick, symmetric exchange
    server.legs = [(0.001, 0.040), (0.0005, 0.0005)]
    await clock.sample(server)
    assert clock.offset == pytest.approx(-3.0 - 0.0195, abs=1e-6)
    assert clock.uncertainty == pytest.approx(0.0205)
    await clock.sample(server)
    assert clock.offset == pytest.approx(-3.0, abs=1e-6)
    assert clock.uncertainty == pytest.approx(0.0005)
    assert clock.to_redis(10.0) == pytest.approx(7.0, abs=1e-6)
    assert clock.from_redis(7.0) == pytest.approx(10.0, abs=1e-6)


async def test_old_samples_leave_the_window() -> None:
    """A clock stepped since (or a sample from before) stops counting after ``window`` samples."""
    now = [1_000.0]
    server = _Scripted(now, true_offset=5.0)
    clock = RedisClock(lambda: now[0], window=2)
    server.legs = [(0.0, 0.0)]
    await clock.sample(server)
    assert clock.offset == pytest.approx(5.0, abs=1e-6)
    server.true_offset = 2.0  # the local clock was stepped 3 s forward
    server.legs = [(0.001, 0.001), (0.001, 0.001)]
    await clock.sample(server)
    assert clock.offset == pytest.approx(5.0, abs=1e-6)  # the perfect old sample still wins
    await clock.sample(server)
    assert clock.offset == pytest.approx(2.0, abs=1e-6)


def test_before_the_first_sample_conversions_are_the_identity() -> None:
    clock = RedisClock(lambda: 42.0)
    assert not clock.synced
    assert clock.offset is None
    assert clock.uncertainty is None
    assert clock.now() == 42.0
    assert clock.to_redis(1.5) == 1.5
    assert clock.from_redis(1.5) == 1.5
