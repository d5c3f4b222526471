""":func:`app.policy.deciders.decide_requests`: one batch of any mix of domains, each request
decided by its own domain's chain and answered in order, early through ``deliver``; and the
wire (:mod:`app.batching.wire`) carries every domain's request and outcome to a worker and back
unchanged, HPC messages still in version 1."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.batching.wire import (
    DOMAIN_WIRE_VERSION,
    WIRE_VERSION,
    WireError,
    outcome_from_json,
    outcome_to_json,
    request_from_json,
    request_to_json,
)
from app.domains.dag.types import DagConfig
from app.domains.gpu.heuristics import GpuConfig, Placement
from app.domains.gpu.types import ClusterSnapshot, GpuJob, gpu_node
from app.domains.gpu.types import Placement as GpuPlacement
from app.domains.hpc.types import ClusterState, Job, Node
from app.outcomes import ABANDONED, DecisionOutcome, DecisionRequest, FallbackReason
from app.policy.deciders import decide_requests, fallback_for
from app.schemas.dag import DAG_DECIDE_EXAMPLE
from app.services.dag_rounds import snapshot_of

NOW = 1000.0


def _hpc() -> DecisionRequest:
    state = ClusterState(
        now=NOW,
        nodes=(Node("a", {"cpu": 4.0}),),
        running=(),
        pending=(Job("j", {"cpu": 2.0}, 60.0, 900.0),),
    )
    return DecisionRequest("h", state, policy="sjf")


def _gpu_state() -> ClusterSnapshot:
    return ClusterSnapshot(
        now=NOW,
        nodes=(gpu_node("n0", 4), gpu_node("n1", 4)),
        jobs=(
            GpuJob("old", 0.0, 4, 4, allocation=(GpuPlacement("n0", 4),), attained_gpu_s=40_000),
            GpuJob("a", 10.0, 4, 4),
            GpuJob("b", 20.0, 4, 4),
        ),
    )


def _gpu(**kw: Any) -> DecisionRequest:
    return DecisionRequest(
        "g",
        _gpu_state(),
        GpuConfig(placement=Placement.MOST_FREE, las_thresholds=(100.0,)),
        policy=kw.pop("policy", "tiresias-2dlas"),
        fallback="fifo",
        domain="gpu",
        **kw,
    )


def _dag(**kw: Any) -> DecisionRequest:
    state = snapshot_of({**DAG_DECIDE_EXAMPLE}).state
    return DecisionRequest(
        "d",
        state,
        DagConfig(alpha=0.5, explain=True),
        policy=kw.pop("policy", "sjf_cp"),
        fallback="fair",
        domain="dag",
        **kw,
    )


def test_a_mixed_batch_is_decided_in_order_each_by_its_own_domain() -> None:
    delivered: dict[int, DecisionOutcome] = {}
    out = decide_requests(
        [_gpu(), _hpc(), _dag(shadow="fifo")],
        None,
        deliver=lambda i, o: delivered.__setitem__(i, o),
    )
    assert [o.request_id for o in out] == ["g", "h", "d"]
    assert [o.domain for o in out] == ["gpu", "hpc", "dag"]
    assert delivered == dict(enumerate(out))
    gpu, hpc, dag = out
    assert (gpu.policy.name, gpu.fallback_used) == ("tiresias-2dlas", False)
    assert gpu.decision.preemptions == ("old",)  # 2D-LAS: the long-served job gives way
    assert (hpc.policy.name, [a.job_id for a in hpc.decision.allocations]) == ("sjf", ["j"])
    assert (dag.policy.name, dag.policy.kind, dag.fallback_used) == ("sjf_cp", "heuristic", False)
    assert dag.decision.allocations
    assert dag.explanation
    assert dag.shadow is not None
    assert dag.shadow.policy == "fifo"
    assert dag.shadow.decision is not None


def test_a_missing_model_falls_back_and_says_why_in_every_domain() -> None:
    gpu, dag = decide_requests([_gpu(policy="gpu-nope@1"), _dag(policy="dag-nope@1")], None)
    assert (gpu.policy.name, gpu.fallback_reason) == ("fifo", FallbackReason.MODEL_MISSING)
    assert (dag.policy.name, dag.fallback_reason) == ("fair", FallbackReason.MODEL_MISSING)


def test_a_passed_deadline_hands_the_primary_to_the_fallback() -> None:
    (out,) = decide_requests([_dag(deadline=NOW)], None, clock=lambda: NOW + 1)
    assert (out.policy.name, out.fallback_reason) == ("fair", FallbackReason.DEADLINE_EXCEEDED)
    assert out.decision.allocations


def test_an_abandoned_request_costs_no_work() -> None:
    out = decide_requests([_gpu(), _dag()], None, wanted=lambda i: i == 0)
    assert out[0].decision is not None
    assert (out[1].decision, out[1].error_type) == (None, ABANDONED)


def test_the_fallback_of_any_domain() -> None:
    out = fallback_for(_gpu(), FallbackReason.DEADLINE_EXCEEDED, "late")
    assert (out.policy.name, out.fallback_used, out.fallback_detail) == ("fifo", True, "late")


@pytest.mark.parametrize("make", [_gpu, _dag])
def test_domain_requests_and_outcomes_cross_the_wire_unchanged(make: Any) -> None:
    request = make(shadow="fifo", deadline=2_000.0)
    raw = request_to_json(request)
    assert json.loads(raw)["v"] == DOMAIN_WIRE_VERSION
    assert request_from_json(raw) == request
    (outcome,) = decide_requests([request], None)
    back, size, leader = outcome_from_json(outcome_to_json(outcome, batch_size=3, leader=True))
    assert (size, leader) == (3, True)
    assert back == outcome


def test_hpc_messages_stay_version_1() -> None:
    request = _hpc()
    raw = json.loads(request_to_json(request))
    assert raw["v"] == WIRE_VERSION
    assert "domain" not in raw
    (outcome,) = decide_requests([request], None)
    assert json.loads(outcome_to_json(outcome, batch_size=1, leader=True))["v"] == WIRE_VERSION


def test_an_unknown_domain_or_version_is_refused() -> None:
    raw = json.loads(request_to_json(_gpu()))
    with pytest.raises(WireError, match="unknown domain"):
        request_from_json(json.dumps({**raw, "domain": "quantum"}))
    with pytest.raises(WireError, match="wire version"):
        request_from_json(json.dumps({**raw, "v": 3}))
    with pytest.raises(WireError):  # a malformed DAG config
        request_from_json(
            json.dumps({**json.loads(request_to_json(_dag())), "config": {"alpha": "x"}})
        )
