"""The decision gate: a per-process limit on decisions in flight, refused with 429 past it."""

from __future__ import annotations

import pytest

from app.services.decision import DecisionGate
from app.services.errors import TooManyRequestsError


def _refused_on_entry(gate: DecisionGate) -> TooManyRequestsError:
    with pytest.raises(TooManyRequestsError) as refused:
        gate.admit().__enter__()
    return refused.value


def test_the_hard_limit_is_named_and_counted() -> None:
    gate = DecisionGate(2, retry_after_s=3)
    with gate.admit(), gate.admit():
        refused = _refused_on_entry(gate)
    assert "KAIROS_MAX_DECISIONS_IN_FLIGHT" in refused.message
    assert refused.headers == {"Retry-After": "3"}
    assert gate.refused == {"limit": 1}
    with gate.admit():  # the others left: admitted again
        assert gate.in_flight == 1


def test_no_limit_admits_any_number() -> None:
    gate = DecisionGate(0)
    holds = [gate.admit() for _ in range(500)]
    for hold in holds:
        hold.__enter__()
    assert gate.in_flight == 500
    assert gate.refusal() is None


def test_a_failed_decision_still_leaves_the_gate() -> None:
    gate = DecisionGate(1)

    def failing() -> None:
        with gate.admit():
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        failing()
    assert gate.in_flight == 0
    assert gate.refusal() is None


def test_asking_whether_it_would_refuse_counts_nothing() -> None:
    """``refusal`` only says why (the admission middleware may still answer from an
    ``Idempotency-Key``); ``refuse`` counts it and gives the 429."""
    gate = DecisionGate(1)
    assert gate.refusal() is None
    with gate.admit():
        refusal = gate.refusal()
        assert refusal is not None
        assert refusal.reason == "limit"
        assert gate.refused == {"limit": 0}
        error = gate.refuse(refusal)
        assert error.status_code == 429
        assert error.code == "overloaded"
        assert gate.refused == {"limit": 1}


def test_a_retry_after_below_one_second_is_refused() -> None:
    with pytest.raises(ValueError, match="retry_after_s"):
        DecisionGate(0, retry_after_s=0)
