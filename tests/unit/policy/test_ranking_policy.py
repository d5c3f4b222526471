"""Ranking ONNX policies (card ``decision_mode: rank``, ADR 0065): one inference per decision."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from app.domains.hpc.decision import DecisionConfig, DecisionRun, decide
from app.domains.hpc.encoding import encode_view, rank_rows
from app.domains.hpc.policy import RankingPolicy, SteppingPolicy, StepView
from app.domains.hpc.types import Backfill, ClusterState, Job, Node, Placement, RunningJob
from app.outcomes import ABANDONED, DecisionRequest, FallbackReason
from app.policy.onnx_policy import (
    OnnxPolicy,
    OnnxRankingPolicy,
    PolicyRefusedError,
    RefusalReason,
)
from app.policy.registry import PolicyRegistry
from app.policy.selector import decide_many
from tests.fixtures import onnx_models as m


def _rank_card(**overrides: object) -> bytes:
    return json.dumps(m.card(**{"decision_mode": "rank", **overrides})).encode()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> PolicyRegistry:
    root: Path = tmp_path_factory.mktemp("models")
    for name, model in (
        ("rank-a", m.kernel_model(seed=21, hidden=12)),
        ("rank-nanfresh", m.nan_when_fresh_model()),
        ("rank-raises", m.raises_when_long_model(limit=6)),
    ):
        m.write_model(root, name, "1", model, m.card(name=name, version="1", decision_mode="rank"))
    reg = PolicyRegistry(root)
    reg.discover()
    return reg


def _state(n_jobs: int, seed: int = 0, *, fresh: bool = False) -> ClusterState:
    jobs = tuple(
        Job(
            f"j{seed}-{i:02d}",
            {"cpu": float(1 + (i * 5 + seed) % 6)},
            60.0 * (1 + (i * 7 + seed) % 9),
            1000.0 if fresh and i == 0 else float(i * 13 % 97),
        )
        for i in range(n_jobs)
    )
    nodes = (Node("n1", {"cpu": 8.0}), Node("n2", {"cpu": 8.0}))
    return ClusterState(now=1000.0, nodes=nodes, pending=jobs)


def test_card_mode_selects_the_class_and_bad_modes_are_refused() -> None:
    model = m.kernel_model(seed=3)
    assert type(OnnxPolicy.from_bytes(model, json.dumps(m.card()).encode())) is OnnxPolicy
    ranking = OnnxPolicy.from_bytes(model, _rank_card())
    assert isinstance(ranking, OnnxRankingPolicy)
    assert isinstance(ranking, RankingPolicy)
    with pytest.raises(PolicyRefusedError) as info:
        OnnxPolicy.from_bytes(model, _rank_card(decision_mode="sometimes"))
    assert info.value.reason is RefusalReason.INVALID_CARD
    assert "decision_mode" in info.value.message


def test_rank_is_the_whole_queue_by_descending_logit_ties_in_fcfs_order() -> None:
    policy = OnnxPolicy.from_bytes(m.kernel_model(seed=5, hidden=12), _rank_card())
    assert isinstance(policy, OnnxRankingPolicy)
    state = _state(200, seed=1)  # more than the 128-row window of stepping models
    run = DecisionRun(state, DecisionConfig())
    view = run.view()
    order = policy.rank(view)
    encoded = encode_view(view, len(view.candidates))
    logits = policy.score(encoded.obs[None], encoded.mask[None])[0]
    assert len(order) == len(view.candidates) == 200
    assert sorted(order) == list(range(200))
    values = [float(logits[i]) for i in order]
    assert values == sorted(values, reverse=True)
    # ties keep FCFS (row) order
    tied = np.zeros(5, dtype=np.float32)
    assert rank_rows(tied, np.ones(5, dtype=np.bool_)) == [0, 1, 2, 3, 4]
    assert rank_rows(np.array([1, 3, 3, 2], np.float32), np.array([1, 1, 1, 0], bool)) == [1, 2, 0]
    assert rank_rows(np.array([np.nan, 1], np.float32), np.array([1, 1], bool)) is None
    assert rank_rows(np.array([np.nan, 1], np.float32), np.array([0, 1], bool)) == [1]


@pytest.mark.parametrize("backfill", [Backfill.EASY, Backfill.NONE])
def test_decide_walks_the_ranked_order_like_an_ordering_policy(backfill: Backfill) -> None:
    policy = OnnxPolicy.from_bytes(m.kernel_model(seed=9, hidden=12), _rank_card())
    assert isinstance(policy, OnnxRankingPolicy)
    running = RunningJob(Job("r0", {"cpu": 6.0}, 500.0, 0.0), (Placement("n1", 1),), 900.0)
    nodes = (Node("n1", {"cpu": 8.0}, {"cpu": 6.0}), Node("n2", {"cpu": 8.0}))
    state = ClusterState(now=1000.0, nodes=nodes, running=(running,), pending=_state(30).pending)
    config = DecisionConfig(backfill=backfill)
    got = decide(state, policy, config)
    run = DecisionRun(state, config)
    view = run.view()
    run.run_order([view.candidates[i] for i in policy.rank(view)])
    assert got.allocations == run.result(policy.ref).allocations
    assert got.policy.kind == "onnx"
    assert got.allocations  # something started


def test_a_batch_of_ranking_requests_takes_one_inference(registry: PolicyRegistry) -> None:
    entry = registry.find("rank-a")
    assert entry is not None
    assert isinstance(entry.policy, OnnxRankingPolicy)
    calls: list[tuple[int, ...]] = []
    real_score = entry.policy.score

    def counting(obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        calls.append(obs.shape)
        return real_score(obs, mask)

    entry.policy.score = counting  # type: ignore[method-assign]
    try:
        states = [_state(5 + 7 * k, seed=k) for k in range(6)]
        outs = decide_many(
            [DecisionRequest(f"r{k}", s, policy="rank-a") for k, s in enumerate(states)], registry
        )
    finally:
        del entry.policy.score
    assert len(calls) == 1
    assert calls[0][0] == 6
    for state, out in zip(states, outs, strict=True):
        assert not out.fallback_used
        assert out.batch_size == 6
        assert out.decision == decide(state, entry.policy)


def test_non_finite_scores_fall_back_for_that_request_only(registry: PolicyRegistry) -> None:
    outs = decide_many(
        [
            DecisionRequest("fresh", _state(8, fresh=True), policy="rank-nanfresh"),
            DecisionRequest("ok", _state(8, seed=2), policy="rank-nanfresh"),
        ],
        registry,
    )
    assert outs[0].fallback_used
    assert outs[0].fallback_reason is FallbackReason.NON_FINITE_OUTPUT
    assert outs[0].decision is not None
    assert outs[0].decision.policy.name == "f1"
    assert not outs[1].fallback_used


def test_inference_errors_and_deadlines_fall_back(registry: PolicyRegistry) -> None:
    [raised] = decide_many([DecisionRequest("long", _state(9), policy="rank-raises")], registry)
    assert raised.fallback_reason is FallbackReason.INFERENCE_ERROR
    late, ok = decide_many(
        [
            DecisionRequest("late", _state(8), policy="rank-a", deadline=1.0),
            DecisionRequest("ok", _state(8, seed=3), policy="rank-a", deadline=1e9),
        ],
        registry,
        clock=lambda: 5.0,
    )
    assert late.fallback_reason is FallbackReason.DEADLINE_EXCEEDED
    assert not ok.fallback_used
    assert ok.decision is not None


def test_stepping_models_are_not_ranking_policies() -> None:
    policy = OnnxPolicy.from_bytes(m.kernel_model(seed=3), json.dumps(m.card()).encode())
    assert isinstance(policy, SteppingPolicy)
    assert not isinstance(policy, RankingPolicy)


@contextmanager
def _walks_recorded(events: list[str]) -> Iterator[None]:
    """Append ``"walk"`` to ``events`` at every ranked walk while the block runs."""
    walked = DecisionRun.run_ranked

    def spy_walk(self: DecisionRun, view: StepView, rows: Iterable[int]) -> None:
        events.append("walk")
        walked(self, view, rows)

    DecisionRun.run_ranked = spy_walk  # type: ignore[method-assign]
    try:
        yield
    finally:
        DecisionRun.run_ranked = walked  # type: ignore[method-assign]


def test_each_request_is_delivered_right_after_its_own_walk(registry: PolicyRegistry) -> None:
    """ADR 0071: request k is answered before request k+1 is walked, not at the batch's end."""
    states = [_state(6 + k, seed=k) for k in range(4)]
    requests = [
        DecisionRequest("heur", states[0], policy="sjf"),
        *(DecisionRequest(f"r{k}", s, policy="rank-a") for k, s in enumerate(states[1:], 1)),
    ]
    events: list[str] = []
    with _walks_recorded(events):
        outs = decide_many(
            requests,
            registry,
            deliver=lambda i, out: events.append(f"deliver {i} {out.request_id}"),
        )
    assert events == [
        "deliver 0 heur",  # a heuristic primary is answered as soon as it is decided
        "walk",
        "deliver 1 r1",
        "walk",
        "deliver 2 r2",
        "walk",
        "deliver 3 r3",
    ]
    assert [o.request_id for o in outs] == ["heur", "r1", "r2", "r3"]
    assert all(o.error is None and not o.fallback_used for o in outs)


def test_a_request_whose_caller_gave_up_costs_no_walk_and_no_fallback(
    registry: PolicyRegistry,
) -> None:
    states = [_state(8, seed=k) for k in range(3)]
    requests = [DecisionRequest(f"r{k}", s, policy="rank-a") for k, s in enumerate(states)]
    gave_up = {1}
    delivered: list[int] = []
    walks: list[str] = []
    with _walks_recorded(walks):
        outs = decide_many(
            requests,
            registry,
            wanted=lambda i: i not in gave_up,
            deliver=lambda i, _out: delivered.append(i),
        )
    assert len(walks) == 2
    assert delivered == [0, 2]
    assert outs[1].decision is None
    assert outs[1].error_type == ABANDONED
    assert not outs[1].fallback_used  # the fallback was not computed for nobody
    for k in (0, 2):
        assert outs[k].decision == decide(states[k], registry.find("rank-a").policy)  # type: ignore[union-attr]


def test_an_abandoned_request_past_its_deadline_gets_no_fallback(
    registry: PolicyRegistry,
) -> None:
    late = DecisionRequest("late", _state(8), policy="rank-a", deadline=1.0)
    [out] = decide_many([late], registry, clock=lambda: 5.0, wanted=lambda _i: False)
    assert out.error_type == ABANDONED
    assert out.decision is None
