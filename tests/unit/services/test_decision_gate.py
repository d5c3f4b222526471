"""The decision gate's deadline admission (ADR 0077) on a fake clock: an AIMD concurrency limit
that grows while decisions meet their deadline and is cut when one misses it."""

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


def _wave(
    gate: DecisionGate, clock: Clock, count: int, latency_s: float, deadline_s: float
) -> None:
    """``count`` decisions admitted together, each answered ``latency_s`` after admission."""
    holds = [contextlib.ExitStack() for _ in range(count)]
    for hold in holds:
        hold.enter_context(gate.admit(deadline_s=deadline_s))
    clock.now += latency_s
    for hold in holds:
        hold.close()


def _refused_on_entry(gate: DecisionGate, deadline_s: float) -> TooManyRequestsError:
    with pytest.raises(TooManyRequestsError) as refused:
        gate.admit(deadline_s=deadline_s).__enter__()
    return refused.value


def test_decisions_meeting_their_deadline_grow_a_limit_in_use() -> None:
    clock = Clock()
    gate = _gate(clock)
    assert gate.adaptive_limit == DecisionGate.INITIAL
    for _ in range(10):
        _wave(gate, clock, 16, 0.010, 0.050)
    # +1/limit per completion while at least half the limit is in flight: about +0.5 a wave
    assert 19.0 < gate.adaptive_limit < 22.0
    assert gate.refused == {"limit": 0, "deadline": 0}


def test_light_load_does_not_grow_the_limit() -> None:
    clock = Clock()
    gate = _gate(clock)
    for _ in range(100):
        _wave(gate, clock, 2, 0.010, 0.050)
    assert gate.adaptive_limit == DecisionGate.INITIAL


def test_a_missed_deadline_cuts_the_limit_once_per_window() -> None:
    clock = Clock()
    gate = _gate(clock)
    _wave(gate, clock, 12, 0.080, 0.050)  # twelve late answers, admitted before any cut
    assert gate.adaptive_limit == pytest.approx(DecisionGate.INITIAL * DecisionGate.BACKOFF)
    _wave(gate, clock, 4, 0.080, 0.050)  # admitted after the cut: a fresh signal
    assert gate.adaptive_limit == pytest.approx(DecisionGate.INITIAL * DecisionGate.BACKOFF**2)


def test_the_limit_stays_between_the_floor_and_the_hard_limit() -> None:
    clock = Clock()
    gate = _gate(clock, limit=20)
    for _ in range(100):
        _wave(gate, clock, 4, 0.080, 0.050)
    assert gate.adaptive_limit == DecisionGate.FLOOR
    for _ in range(200):
        _wave(gate, clock, int(gate.adaptive_limit), 0.010, 0.050)
    assert gate.adaptive_limit == 20.0


def test_past_the_adaptive_limit_a_decision_is_refused() -> None:
    clock = Clock()
    gate = _gate(clock)
    for _ in range(30):  # a backlog that keeps missing its deadline
        _wave(gate, clock, int(gate.adaptive_limit), 0.200, 0.050)
    assert gate.adaptive_limit == DecisionGate.FLOOR
    with contextlib.ExitStack() as ahead:
        for _ in range(4):
            ahead.enter_context(gate.admit(deadline_s=0.050))
        refused = _refused_on_entry(gate, 0.050)
        assert refused.code == "overloaded"
        assert "adaptive limit" in refused.message
        assert "KAIROS_ADMISSION=deadline" in refused.message
        assert refused.headers == {"Retry-After": "1"}
        assert gate.in_flight == 4
    assert gate.refused == {"limit": 0, "deadline": 1}
    # room again once they leave; answers within the deadline grow it back
    for _ in range(20):
        _wave(gate, clock, int(gate.adaptive_limit), 0.010, 0.050)
    assert gate.adaptive_limit > DecisionGate.FLOOR + 2


def test_limit_admission_ignores_deadlines() -> None:
    clock = Clock()
    gate = _gate(clock, by_deadline=False)
    for _ in range(30):
        _wave(gate, clock, 8, 0.200, 0.050)
    assert gate.adaptive_limit == DecisionGate.INITIAL
    with contextlib.ExitStack() as stack:
        for _ in range(100):
            stack.enter_context(gate.admit(deadline_s=0.001))
    assert gate.refused == {"limit": 0, "deadline": 0}


def test_the_hard_limit_is_checked_first_and_named() -> None:
    gate = _gate(Clock(), limit=2)
    with gate.admit(), gate.admit():
        refused = _refused_on_entry(gate, 0.050)
    assert "KAIROS_MAX_DECISIONS_IN_FLIGHT" in refused.message
    assert gate.refused == {"limit": 1, "deadline": 0}


def test_a_failed_decision_still_leaves_the_gate_and_counts() -> None:
    clock = Clock()
    gate = _gate(clock)

    def failing() -> None:
        with gate.admit(deadline_s=0.050):
            clock.now += 0.2
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        failing()
    assert gate.in_flight == 0
    assert gate.adaptive_limit == pytest.approx(DecisionGate.INITIAL * DecisionGate.BACKOFF)


def test_asking_whether_it_would_refuse_counts_nothing() -> None:
    """``refusal`` only says why (the admission middleware may still answer from an
    ``Idempotency-Key``); ``refuse`` counts it and gives the 429."""
    gate = DecisionGate(1)
    assert gate.refusal() is None
    with gate.admit():
        refusal = gate.refusal()
        assert refusal is not None
        assert refusal.reason == "limit"
        assert gate.refused == {"limit": 0, "deadline": 0}
        error = gate.refuse(refusal)
        assert error.status_code == 429
        assert error.code == "overloaded"
        assert gate.refused == {"limit": 1, "deadline": 0}


def test_the_adaptive_limit_takes_its_tuning_from_the_caller() -> None:
    """``KAIROS_ADMISSION_INITIAL_LIMIT`` / ``_MIN_LIMIT`` / ``_BACKOFF`` and
    ``KAIROS_RETRY_AFTER_S`` reach the gate as these arguments."""
    clock = Clock()
    gate = DecisionGate(
        0, by_deadline=True, clock=clock, initial=8.0, floor=2.0, backoff=0.5, retry_after_s=3
    )
    assert gate.adaptive_limit == 8.0
    _wave(gate, clock, 8, latency_s=0.2, deadline_s=0.05)  # late: cut by the backoff
    assert gate.adaptive_limit == 4.0
    _wave(gate, clock, 4, latency_s=0.2, deadline_s=0.05)
    _wave(gate, clock, 2, latency_s=0.2, deadline_s=0.05)
    assert gate.adaptive_limit == 2.0  # the floor
    with contextlib.ExitStack() as stack:
        for _ in range(2):
            stack.enter_context(gate.admit(deadline_s=0.05))
        refused = _refused_on_entry(gate, 0.05)
    assert refused.headers == {"Retry-After": "3"}


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"initial": 4.0, "floor": 8.0}, "floor"),
        ({"floor": 0.5, "initial": 4.0}, "floor"),
        ({"backoff": 1.0}, "backoff"),
        ({"backoff": 0.0}, "backoff"),
        ({"retry_after_s": 0}, "retry_after_s"),
    ],
)
def test_a_tuning_that_cannot_work_is_refused(kwargs: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        DecisionGate(0, by_deadline=True, **kwargs)  # type: ignore[arg-type]
