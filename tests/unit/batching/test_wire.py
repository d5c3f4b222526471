"""The worker wire format round-trips requests and outcomes exactly; the worker CLI needs Redis."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from app.batching.wire import (
    WireError,
    outcome_from_json,
    outcome_to_json,
    request_from_json,
    request_to_json,
)
from app.cli import main as app_main
from app.domains.hpc.decision import DecisionConfig, decide
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.types import (
    Backfill,
    ClusterState,
    Job,
    Node,
    NodeState,
    Placement,
    PlacementStrategy,
    RunningJob,
)
from app.outcomes import DecisionOutcome, DecisionRequest, FallbackReason, ShadowOutcome


def _state() -> ClusterState:
    running = RunningJob(Job("r", {"cpu": 2.0}, 100.0, 1.0, tasks=2), (Placement("a", 2),), 5.0)
    return ClusterState(
        now=50.0,
        nodes=(
            Node("a", {"cpu": 8.0, "gpu": 1.0}, {"cpu": 4.0}, labels={"rack": "1"}),
            Node("b", {"cpu": 8.0}, state=NodeState.DRAIN),
        ),
        running=(running,),
        pending=(
            Job("p1", {"cpu": 3.0}, 30.0, 10.0, priority=2, user="u", depends_on=("x",)),
            Job("p2", {"cpu": 1.0, "gpu": 1.0}, 60.0, 11.0, labels={"kairos/single-node": "true"}),
        ),
        finished=frozenset({"x"}),
    )


def test_request_round_trip() -> None:
    request = DecisionRequest(
        "req-1",
        _state(),
        DecisionConfig(Backfill.NONE, PlacementStrategy.BEST_FIT, max_allocations=3, explain=True),
        policy="hpc-x@2",
        fallback="sjf",
        shadow="f1",
        deadline=123.5,
    )
    assert request_from_json(request_to_json(request)) == request


def test_the_deadline_crosses_on_the_redis_clock_when_both_sides_know_it() -> None:
    """ADR 0074: the sender adds ``deadline_redis``; a reader converts it to its own clock, and
    a reader without a Redis clock (or an older one) still takes ``deadline`` as sent."""
    request = DecisionRequest("req-2", _state(), deadline=1_000.25)
    sent = request_to_json(request, to_redis=lambda t: t + 40.0)  # the sender is 40 s behind
    assert json.loads(sent)["deadline_redis"] == 1_040.25
    assert json.loads(sent)["deadline"] == 1_000.25
    # the reader is 7 s ahead of Redis: the same instant reads 1_047.25 on its clock
    assert request_from_json(sent, from_redis=lambda t: t + 7.0).deadline == 1_047.25
    assert request_from_json(sent).deadline == 1_000.25
    # an entry from a sender without a Redis clock: its deadline is taken as sent
    assert request_from_json(request_to_json(request), lambda t: t + 7.0).deadline == 1_000.25
    no_deadline = DecisionRequest("req-3", _state())
    assert b"deadline_redis" not in request_to_json(no_deadline, to_redis=lambda t: t + 1.0)


def test_outcome_round_trip() -> None:
    state = _state()
    decision = decide(state, get_heuristic("f1"), DecisionConfig(explain=True))
    outcome = DecisionOutcome(
        "req-1",
        decision,
        fallback_used=True,
        fallback_reason=FallbackReason.NON_FINITE_OUTPUT,
        fallback_detail="nan",
        shadow=ShadowOutcome("sjf", decide(state, get_heuristic("sjf"))),
        batch_size=3,
    )
    back, size, leader = outcome_from_json(outcome_to_json(outcome, batch_size=7, leader=True))
    assert back == outcome
    assert (size, leader) == (7, True)


def test_a_non_finite_float_never_crosses_as_a_number() -> None:
    """Validated input holds none; if one slipped through, the reader refuses the message
    instead of deciding on a snapshot that lost a number (orjson writes NaN as null)."""
    for bad in (float("nan"), float("inf")):
        sent = request_to_json(DecisionRequest("req-4", replace(_state(), now=bad)))
        with pytest.raises(WireError):
            request_from_json(sent)
    # and a message carrying the non-standard literal is refused too
    good = json.loads(request_to_json(DecisionRequest("req-5", _state())))
    with pytest.raises(WireError):
        request_from_json(json.dumps({**good, "deadline": float("nan")}))


def test_what_orjson_refuses_is_written_by_json_and_refused_on_read() -> None:
    """An int beyond 64 bits (not reachable from the API's bounds, but a domain ``Job`` allows
    it) is still written; the reader refuses it instead of handing on an unbounded count."""
    state = _state()
    huge = replace(state, pending=(replace(state.pending[0], priority=2**70),))
    sent = request_to_json(DecisionRequest("req-6", huge))
    assert b"1180591620717411303424" in sent
    with pytest.raises(WireError, match="64-bit integer"):
        request_from_json(sent)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("tasks", "9" * 400),  # int() of it is a 400-digit count: a float of it overflows
        ("tasks", 1e300),
        ("tasks", True),
        ("priority", "1"),
        ("placement", "9" * 400),
    ],
)
def test_counts_that_are_not_64_bit_integers_are_refused(where: str, value: object) -> None:
    good = json.loads(request_to_json(DecisionRequest("req-7", _state())))
    if where == "placement":
        good["state"]["running"][0]["placements"][0][1] = value
    else:
        good["state"]["pending"][0][where] = value
    with pytest.raises(WireError):
        request_from_json(json.dumps(good))


def test_bad_messages_are_typed_errors() -> None:
    with pytest.raises(WireError):
        request_from_json(b'{"v": 99}')
    with pytest.raises(WireError):
        request_from_json(b'{"v": 1, "request_id": "x"}')
    with pytest.raises(WireError):
        outcome_from_json(b"[]")


def test_worker_needs_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAIROS_REDIS_URL", raising=False)
    from app.settings import get_settings

    get_settings.cache_clear()
    try:
        assert app_main(["worker"]) == 2
    finally:
        get_settings.cache_clear()
