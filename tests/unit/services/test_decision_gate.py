"""The decision gate's deadline admission (ADR 0077) on a fake clock: the pace is the time
between completions while the replica is busy, and a decision is refused when
``(in_flight + 1) * pace`` passes its deadline."""

from __future__ import annotations

import contextlib

import pytest

from app.services.decision import DecisionGate
from app.services.errors import TooManyRequestsError


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _gate(clock: Clock, *, by_deadline: bool = True, limit: int = 0) -> DecisionGate:
    return DecisionGate(limit, by_deadline=by_deadline, clock=clock)


def _busy_period(gate: DecisionGate, clock: Clock, count: int, step_s: float) -> None:
    """``count`` decisions admitted together, completing ``step_s`` apart."""
    holds = [contextlib.ExitStack() for _ in range(count)]
    for hold in holds:
        hold.enter_context(gate.admit(deadline_s=3600.0))
    for hold in holds:
        clock.now += step_s
        hold.close()


def test_the_pace_is_the_time_between_completions_while_busy() -> None:
    clock = Clock()
    gate = _gate(clock)
    assert gate.interval_s is None
    assert gate.expected_wait_s() is None
    _busy_period(gate, clock, 5, 0.010)
    assert gate.interval_s == pytest.approx(0.010)
    clock.now += 60.0  # idle: not part of any interval
    _busy_period(gate, clock, 5, 0.010)
    assert gate.interval_s == pytest.approx(0.010)
    assert gate.in_flight == 0
    assert gate.expected_wait_s() == pytest.approx(0.010)


def test_the_pace_follows_a_slower_backlog() -> None:
    clock = Clock()
    gate = _gate(clock)
    _busy_period(gate, clock, 5, 0.010)
    _busy_period(gate, clock, 60, 0.030)
    assert gate.interval_s == pytest.approx(0.030, rel=0.01)


def test_a_decision_that_would_miss_its_deadline_is_refused() -> None:
    clock = Clock()
    gate = _gate(clock)
    _busy_period(gate, clock, 5, 0.010)
    with contextlib.ExitStack() as ahead:
        for _ in range(4):
            ahead.enter_context(gate.admit(deadline_s=1.0))
        # four ahead at 10 ms each: answered in about 50 ms
        assert gate.expected_wait_s() == pytest.approx(0.050)
        with pytest.raises(TooManyRequestsError) as refused:
            gate.admit(deadline_s=0.040).__enter__()  # refused on entry
        assert refused.value.code == "overloaded"
        assert "deadline of 40 ms" in refused.value.message
        assert "KAIROS_ADMISSION=deadline" in refused.value.message
        assert refused.value.headers == {"Retry-After": "1"}
        assert gate.in_flight == 4
        with gate.admit(deadline_s=0.060):  # a longer deadline is admitted
            assert gate.in_flight == 5
    assert gate.refused == {"limit": 0, "deadline": 1}


def test_a_decision_finding_nothing_in_flight_is_always_admitted() -> None:
    clock = Clock()
    gate = _gate(clock)
    _busy_period(gate, clock, 3, 5.0)  # a pace of 5 s per decision
    with gate.admit(deadline_s=0.001):
        assert gate.in_flight == 1
    assert gate.refused["deadline"] == 0


def test_before_any_completion_every_decision_is_admitted() -> None:
    gate = _gate(Clock())
    with contextlib.ExitStack() as stack:
        for _ in range(100):
            stack.enter_context(gate.admit(deadline_s=0.001))
    assert gate.refused == {"limit": 0, "deadline": 0}


def test_limit_admission_ignores_the_pace() -> None:
    clock = Clock()
    gate = _gate(clock, by_deadline=False)
    _busy_period(gate, clock, 3, 5.0)
    with contextlib.ExitStack() as stack:
        for _ in range(10):
            stack.enter_context(gate.admit(deadline_s=0.001))
    assert gate.refused == {"limit": 0, "deadline": 0}


def test_the_limit_is_checked_first_and_named() -> None:
    clock = Clock()
    gate = _gate(clock, limit=2)
    _busy_period(gate, clock, 2, 5.0)
    with gate.admit(), gate.admit(), pytest.raises(TooManyRequestsError) as refused:
        gate.admit(deadline_s=0.001).__enter__()  # refused on entry
    assert "KAIROS_MAX_DECISIONS_IN_FLIGHT" in refused.value.message
    assert gate.refused == {"limit": 1, "deadline": 0}


def test_a_failed_decision_still_leaves_the_gate_and_counts_as_a_completion() -> None:
    clock = Clock()
    gate = _gate(clock)

    def failing() -> None:
        with gate.admit(deadline_s=1.0):
            clock.now += 0.02
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        failing()
    assert gate.in_flight == 0
    assert gate.interval_s == pytest.approx(0.02)
