"""The fallback chain and step-synchronous batched decisions."""

from __future__ import annotations

import gc
from dataclasses import replace
from pathlib import Path

import pytest

from app.domains.hpc.decision import DecisionConfig, DecisionRun, decide
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.types import Backfill, ClusterState, Job, Node
from app.outcomes import ABANDONED, DecisionRequest, FallbackReason
from app.policy.registry import PolicyRegistry
from app.policy.selector import decide_many, resolve
from tests.fixtures import onnx_models as m


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> PolicyRegistry:
    root: Path = tmp_path_factory.mktemp("models")
    m.write_model(root, "hpc-a", "1", m.kernel_model(seed=11))
    m.write_model(root, "hpc-b", "1", m.kernel_model(seed=12))
    m.write_model(root, "hpc-nan", "1", m.nan_model())
    m.write_model(root, "hpc-nanfresh", "1", m.nan_when_fresh_model())
    m.write_model(root, "hpc-raises", "1", m.raises_when_long_model(limit=6))
    reg = PolicyRegistry(root)
    reg.discover()
    return reg


def _state(n_jobs: int, seed: int = 0, cpus: float = 16.0) -> ClusterState:
    jobs = tuple(
        Job(
            f"j{seed}-{i}",
            {"cpu": float(1 + (i * 5 + seed) % 6)},
            60.0 * (1 + (i * 7 + seed) % 9),
            float(i),
        )
        for i in range(n_jobs)
    )
    nodes = (Node("n1", {"cpu": cpus / 2}), Node("n2", {"cpu": cpus / 2}))
    return ClusterState(now=1000.0, nodes=nodes, pending=jobs)


def test_heuristic_names_decide_directly(registry: PolicyRegistry) -> None:
    state = _state(10)
    [out] = decide_many([DecisionRequest("r", state, policy="sjf")], registry)
    assert not out.fallback_used
    assert out.decision == decide(state, get_heuristic("sjf"))


def test_batched_equals_one_by_one_and_shares_inferences(registry: PolicyRegistry) -> None:
    states = [_state(4 + 3 * k, seed=k) for k in range(6)]
    requests = [DecisionRequest(f"r{k}", s, policy="hpc-a") for k, s in enumerate(states)]
    batched = decide_many(requests, registry)
    entry = registry.find("hpc-a")
    assert entry is not None
    assert entry.policy is not None
    for k, out in enumerate(batched):
        assert out.error is None
        assert not out.fallback_used
        assert out.decision is not None
        assert out.decision.policy.kind == "onnx"
        assert out.decision == decide(states[k], entry.policy)  # same picks as unbatched
    assert max(out.batch_size for out in batched) == 6


def test_one_bad_snapshot_does_not_fail_its_batch_mates(registry: PolicyRegistry) -> None:
    good = _state(6)
    bad = replace(good, nodes=(Node("n1", {"cpu": 4.0}, {"cpu": 9.0}),))  # over-allocated
    out = decide_many(
        [
            DecisionRequest("ok1", good, policy="hpc-a"),
            DecisionRequest("bad", bad, policy="hpc-a"),
            DecisionRequest("ok2", _state(5, seed=3), policy="hpc-a"),
        ],
        registry,
    )
    assert out[1].decision is None
    assert out[1].error_type == "SnapshotError"
    assert out[0].decision is not None
    assert out[2].decision is not None
    assert not out[0].fallback_used


@pytest.mark.parametrize(
    ("policy", "n_jobs", "reason"),
    [
        ("hpc-missing", 5, FallbackReason.MODEL_MISSING),
        ("hpc-nan", 5, FallbackReason.MODEL_REFUSED),
        ("hpc-nanfresh", 5, FallbackReason.NON_FINITE_OUTPUT),
        ("hpc-raises", 12, FallbackReason.INFERENCE_ERROR),
    ],
)
def test_fallback_reasons(
    registry: PolicyRegistry, policy: str, n_jobs: int, reason: FallbackReason
) -> None:
    state = _with_fresh_job(_state(n_jobs))
    config = DecisionConfig(backfill=Backfill.EASY)
    [out] = decide_many(
        [DecisionRequest("r", state, config=config, policy=policy, fallback="f1")], registry
    )
    assert out.fallback_used
    assert out.fallback_reason is reason
    assert out.decision == decide(state, get_heuristic("f1"), config)


def _with_fresh_job(state: ClusterState) -> ClusterState:
    """Add a job submitted at ``now`` (wait feature 0: NaN for ``hpc-nanfresh``)."""
    fresh = Job("fresh", {"cpu": 1.0}, 30.0, state.now)
    return replace(state, pending=(*state.pending, fresh))


def test_non_finite_logits_fail_only_their_own_request(registry: PolicyRegistry) -> None:
    out = decide_many(
        [
            DecisionRequest("clean", _state(6), policy="hpc-nanfresh"),
            DecisionRequest("poisoned", _with_fresh_job(_state(6)), policy="hpc-nanfresh"),
            DecisionRequest("raises", _state(12), policy="hpc-raises"),
            DecisionRequest("clean2", _state(9, seed=2), policy="hpc-nanfresh"),
        ],
        registry,
    )
    assert [o.fallback_reason for o in out] == [
        None,
        FallbackReason.NON_FINITE_OUTPUT,
        FallbackReason.INFERENCE_ERROR,
        None,
    ]
    assert all(o.decision is not None for o in out)
    assert out[0].decision is not None
    assert out[0].decision.policy.name == "hpc-nanfresh"


def test_deadline(registry: PolicyRegistry) -> None:
    ticks = iter(range(1000))
    [late, on_time] = decide_many(
        [
            DecisionRequest("late", _state(8), policy="hpc-a", deadline=3.0),
            DecisionRequest("ok", _state(8), policy="hpc-a", deadline=1e9),
        ],
        registry,
        clock=lambda: float(next(ticks)),  # one tick per step: "late" expires after 2 steps
        fallback_reserve_s=0.0,
    )
    assert late.fallback_reason is FallbackReason.DEADLINE_EXCEEDED
    assert not on_time.fallback_used


def test_shadow_is_computed_stored_and_never_served(registry: PolicyRegistry) -> None:
    state = _state(9)
    entry_a, entry_b = registry.find("hpc-a"), registry.find("hpc-b")
    assert entry_a is not None
    assert entry_a.policy is not None
    assert entry_b is not None
    assert entry_b.policy is not None
    [out, heur, broken] = decide_many(
        [
            DecisionRequest("s", state, policy="hpc-a", shadow="hpc-b"),
            DecisionRequest("h", state, policy="hpc-a", shadow="sjf"),
            DecisionRequest("x", state, policy="fcfs", shadow="hpc-missing"),
        ],
        registry,
    )
    assert out.decision == decide(state, entry_a.policy)
    assert out.shadow is not None
    assert out.shadow.decision == decide(state, entry_b.policy)
    assert heur.shadow is not None
    assert heur.shadow.decision == decide(state, get_heuristic("sjf"))
    assert broken.shadow is not None
    assert broken.shadow.decision is None
    assert broken.shadow.reason == "model_missing"
    assert not broken.fallback_used


def test_resolve() -> None:
    assert resolve("F1", None).heuristic is not None
    assert resolve("hpc-kernel", None).reason is FallbackReason.MODEL_MISSING


def test_stepping_requests_are_delivered_as_they_leave_the_lock_step(
    registry: PolicyRegistry,
) -> None:
    """ADR 0071: a short decision is answered when it is done, not when its batch is."""
    entry = registry.find("hpc-a")
    assert entry is not None
    assert entry.policy is not None
    long_state, short_state = _state(14, seed=1, cpus=64.0), _state(2, seed=2)
    delivered: list[tuple[str, bool]] = []
    done_runs: list[str] = []
    requests = [
        DecisionRequest("long", long_state, policy="hpc-a"),
        DecisionRequest("short", short_state, policy="hpc-a"),
        DecisionRequest("shadowed", short_state, policy="hpc-a", shadow="hpc-b"),
    ]
    outs = decide_many(
        requests,
        registry,
        deliver=lambda i, out: delivered.append((out.request_id, out.shadow is not None)),
        wanted=lambda i: done_runs.append(requests[i].request_id) or True,  # type: ignore[func-returns-value]
    )
    # "short" leaves the lock-step after a few steps, "long" keeps stepping; "shadowed" waits
    # for its shadow model's group, which runs after the primary's
    assert delivered == [("short", False), ("long", False), ("shadowed", True)]
    assert [o.request_id for o in outs] == ["long", "short", "shadowed"]
    assert outs[0].decision == decide(long_state, entry.policy)
    assert outs[1].decision == decide(short_state, entry.policy)
    # the caller is asked about before its start and before each step it takes part in
    assert done_runs.count("long") > done_runs.count("short") >= 2


def test_a_stepping_request_abandoned_mid_way_stops_stepping(registry: PolicyRegistry) -> None:
    calls = {"n": 0}

    def wanted(i: int) -> bool:
        if i == 0:
            calls["n"] += 1
            return calls["n"] <= 3  # gives up after its second step
        return True

    delivered: list[int] = []
    outs = decide_many(
        [
            DecisionRequest("quits", _state(12, seed=3, cpus=64.0), policy="hpc-a"),
            DecisionRequest("stays", _state(12, seed=4, cpus=64.0), policy="hpc-a"),
        ],
        registry,
        wanted=wanted,
        deliver=lambda i, _out: delivered.append(i),
    )
    assert calls["n"] == 4  # asked at its start, before 2 steps, then refused
    assert outs[0].error_type == ABANDONED
    assert not outs[0].fallback_used
    assert delivered == [1]
    assert outs[1].decision is not None
    assert not outs[1].fallback_used


def test_a_decided_batch_leaves_no_reference_cycles(registry: PolicyRegistry) -> None:
    """Every run of a batch (primary and shadow slots) is freed by reference counting once
    ``decide_many`` returns: nothing of it waits for a full garbage collection."""
    requests = [
        DecisionRequest("a", _state(8, seed=1), policy="hpc-a"),
        DecisionRequest("b", _state(5, seed=2), policy="hpc-a", shadow="hpc-b"),
        DecisionRequest("c", _state(3, seed=3), policy="sjf", shadow="hpc-a"),
    ]
    gc.collect()
    gc.disable()
    try:
        outs = decide_many(requests, registry)
        assert [o.fallback_used for o in outs] == [False] * 3
        del outs
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [type(o).__name__ for o in gc.garbage if isinstance(o, DecisionRun | Job)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cyclic == []
