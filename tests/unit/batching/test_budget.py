"""A queued request's deadline counts from its batch's start (app.batching.budget), and the
budget and latest start cross the Redis wire on the server's clock."""

from __future__ import annotations

import pytest

from app.batching.budget import Budgeted, budget_of, deadline_from, started
from app.batching.wire import queued_from_json, request_from_json, request_to_json
from app.domains.hpc.types import ClusterState, Job, Node
from app.outcomes import DecisionRequest


def _request(deadline: float | None) -> DecisionRequest:
    state = ClusterState(
        now=10.0, nodes=(Node("n", {"cpu": 4.0}),), pending=(Job("j", {"cpu": 1.0}, 60.0, 0.0),)
    )
    return DecisionRequest("r", state, policy="sjf", deadline=deadline)


def test_the_budget_is_what_is_left_of_the_deadline() -> None:
    assert budget_of(_request(100.05), 100.0) == pytest.approx(0.05)
    assert budget_of(_request(99.0), 100.0) == 0.0
    assert budget_of(_request(None), 100.0) is None


def test_the_deadline_counts_from_the_batch_start_plus_the_batch_mates_work() -> None:
    item = Budgeted(_request(100.05), 0.05)
    assert deadline_from(item, 107.0) == pytest.approx(107.05)
    assert deadline_from(item, 107.0, shared_s=0.02) == pytest.approx(107.07)
    # the requester stops waiting at start_by + budget: never later than that
    bounded = Budgeted(_request(100.05), 0.05, start_by=101.0)
    assert deadline_from(bounded, 100.5, shared_s=10.0) == pytest.approx(101.05)
    assert deadline_from(bounded, 102.0) == pytest.approx(101.05)
    # no budget: the deadline as it came
    assert deadline_from(Budgeted(_request(100.05), None), 107.0) == 100.05
    assert deadline_from(Budgeted(_request(None), None), 107.0) is None


def test_started_rebases_each_request_of_a_batch() -> None:
    items = [Budgeted(_request(100.05), 0.05), Budgeted(_request(None), None)]
    rebased = started(items, 200.0, shared_s=0.01)
    assert rebased[0].deadline == pytest.approx(200.06)
    assert rebased[1].deadline is None
    assert rebased[1] is items[1].request  # unchanged requests are not copied


def test_budget_and_latest_start_cross_the_wire_on_the_redis_clock() -> None:
    request = _request(100.05)

    def to_redis(t: float) -> float:
        return t + 1000.0

    def from_redis(t: float) -> float:
        return t - 1000.0 + 3.0  # the reader's clock runs three seconds ahead

    text = request_to_json(request, to_redis, budget_s=0.05, start_by=101.0)
    queued = queued_from_json(text, from_redis)
    assert queued.budget_s == 0.05
    assert queued.start_by == pytest.approx(104.0)
    assert queued.request.deadline == pytest.approx(103.05)
    # without the reader's conversion, the sender's clock; a reader of the old kind keeps the
    # deadline as it came
    plain = queued_from_json(text)
    assert (plain.budget_s, plain.start_by, plain.request.deadline) == (0.05, 101.0, 100.05)
    assert request_from_json(text) == plain.request


def test_an_entry_without_a_budget_keeps_its_deadline() -> None:
    queued = queued_from_json(request_to_json(_request(100.05)))
    assert queued.budget_s is None
    assert queued.start_by is None
    assert queued.request.deadline == 100.05
