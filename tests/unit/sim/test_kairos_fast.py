"""The fast heuristic twin starts every job exactly when the real core (KairosSimulator) does."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.heuristics import HEURISTICS, get_heuristic
from app.domains.hpc.simulate import KairosSimulator, simulate_kairos, workload_from_trace
from app.domains.hpc.swf import load_swf, parse_swf
from app.domains.hpc.types import Backfill
from sim.kairos_fast import is_static, simulate_kairos_fast, simulate_workload_fast

DATA = Path(__file__).resolve().parents[3] / "data"


@st.composite
def traces(draw):
    max_nodes = draw(st.integers(1, 10))
    ppn = draw(st.sampled_from([1, 2]))
    n = draw(st.integers(1, 40))
    lines = [f"; MaxNodes: {max_nodes}\n", f"; MaxProcs: {max_nodes * ppn}\n"]
    t = 0
    for i in range(1, n + 1):
        t += draw(st.sampled_from([0, 0, 1, 7, 30, 90]))
        run = draw(st.sampled_from([1, 10, 30, 60, 61, 300]))
        procs = draw(st.integers(1, max_nodes * ppn))
        req = draw(st.sampled_from([-1, run, run * 3, max(1, run - 20)]))
        user = draw(st.integers(1, 3))
        lines.append(f"{i} {t} -1 {run} {procs} -1 -1 -1 {req} -1 1 {user} -1 -1 0 -1 -1 -1\n")
    return parse_swf(lines)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trace=traces(),
    policy=st.sampled_from(sorted(HEURISTICS)),
    backfill=st.sampled_from([Backfill.NONE, Backfill.EASY]),
)
def test_fast_twin_equals_the_core(trace, policy, backfill):
    heuristic = get_heuristic(policy)
    workload = workload_from_trace(trace)
    core = KairosSimulator(workload, config=DecisionConfig(backfill=backfill), pooled=True)
    expected = core.run(heuristic)
    got = simulate_workload_fast(workload, heuristic, backfill)
    assert got.start.tolist() == expected.start.tolist()
    assert got.end_time == expected.end_time


@pytest.mark.parametrize("policy", ["fcfs", "f1"])
def test_overdue_jobs_release_together_at_now(policy):
    # jobs 1 and 2 overrun their requests (ends 40 and 41 are past at t=44): the core releases
    # both at now, so job 5's reservation leaves one node spare and job 7 backfills at 44
    rows = [(0, 60, 1, 40), (0, 61, 1, 41), (0, 1, 1, 1), (0, 1, 1, 1), (7, 1, 9, 1),
            (14, 1, 1, 1), (44, 1, 1, 1)]  # fmt: skip
    lines = ["; MaxNodes: 10\n", "; MaxProcs: 10\n"]
    lines += [
        f"{i} {s} -1 {r} {p} -1 -1 -1 {q} -1 1 1 -1 -1 0 -1 -1 -1\n"
        for i, (s, r, p, q) in enumerate(rows, start=1)
    ]
    workload = workload_from_trace(parse_swf(lines))
    heuristic = get_heuristic(policy)
    core = KairosSimulator(workload, config=DecisionConfig(backfill=Backfill.EASY), pooled=True)
    expected = core.run(heuristic)
    got = simulate_workload_fast(workload, heuristic, Backfill.EASY)
    assert expected.start[6] == 44.0
    assert got.start.tolist() == expected.start.tolist()


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "wfp3", "unicep", "f1"])
@pytest.mark.parametrize("backfill", [Backfill.NONE, Backfill.EASY])
def test_fast_twin_equals_the_core_on_lublin(policy, backfill):
    trace = load_swf(DATA / "lublin_256.swf.gz")
    heuristic = get_heuristic(policy)
    expected = simulate_kairos(
        trace, 7085, 200, heuristic, config=DecisionConfig(backfill=backfill), pooled=True
    )
    got = simulate_kairos_fast(trace, 7085, 200, heuristic, backfill=backfill)
    assert got.start.tolist() == expected.start.tolist()


def test_static_detection():
    assert is_static(get_heuristic("sjf"))
    assert is_static(get_heuristic("f1"))
    assert not is_static(get_heuristic("wfp3"))
    assert not is_static(get_heuristic("unicep"))


def _ranking_policy(seed: int):
    import json

    from app.policy.onnx_policy import OnnxPolicy, OnnxRankingPolicy
    from tests.fixtures.onnx_models import card, kernel_model

    policy = OnnxPolicy.from_bytes(
        kernel_model(seed=seed, hidden=16),
        json.dumps(card(decision_mode="rank")).encode(),
    )
    assert isinstance(policy, OnnxRankingPolicy)
    return policy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trace=traces(),
    seed=st.integers(0, 3),
    backfill=st.sampled_from([Backfill.NONE, Backfill.EASY]),
)
def test_fast_twin_equals_the_core_for_ranking_onnx_policies(trace, seed, backfill):
    policy = _ranking_policy(seed)
    workload = workload_from_trace(trace)
    core = KairosSimulator(workload, config=DecisionConfig(backfill=backfill), pooled=True)
    expected = core.run(policy)
    got = simulate_workload_fast(workload, policy, backfill)
    assert got.start.tolist() == expected.start.tolist()


@pytest.mark.parametrize("backfill", [Backfill.NONE, Backfill.EASY])
def test_fast_twin_equals_the_core_for_a_ranking_policy_on_lublin(backfill):
    trace = load_swf(DATA / "lublin_256.swf.gz")
    policy = _ranking_policy(7)
    expected = simulate_kairos(
        trace, 7085, 300, policy, config=DecisionConfig(backfill=backfill), pooled=True
    )
    got = simulate_kairos_fast(trace, 7085, 300, policy, backfill=backfill)
    assert got.start.tolist() == expected.start.tolist()
