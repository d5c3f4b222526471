"""The fast rlscheduler simulator equals a literal list-sorting re-statement (the oracle)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domains.hpc.rlscheduler import RlsPolicy, simulate_sequence
from app.domains.hpc.swf import parse_swf
from sim.rlscheduler_reference import reference_simulate


@st.composite
def traces(draw, exact_estimates: bool):
    max_nodes = draw(st.integers(1, 12))
    ppn = draw(st.sampled_from([1, 2, 4]))
    n = draw(st.integers(1, 60))
    lines = [f"; MaxNodes: {max_nodes}\n", f"; MaxProcs: {max_nodes * ppn}\n"]
    t = draw(st.integers(0, 3))
    for i in range(1, n + 1):
        t += draw(st.sampled_from([0, 0, 1, 5, 20, 60]))
        run = draw(st.sampled_from([1, 5, 10, 30, 60, 61, 200]))
        procs = draw(st.integers(1, max_nodes * ppn))
        req = -1 if exact_estimates else draw(st.sampled_from([-1, run, run * 2, run + 7]))
        lines.append(f"{i} {t} -1 {run} {procs} -1 -1 -1 {req} -1 1 -1 -1 -1 0 -1 -1 -1\n")
    return parse_swf(lines)


def _check(trace, policy, backfill):
    n = trace.n_jobs
    fast = simulate_sequence(trace, 0, n, policy, backfill=backfill)
    starts, end = reference_simulate(trace, 0, n, policy, backfill=backfill)
    assert fast.start.tolist() == starts
    assert fast.end_time == end


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    trace=traces(exact_estimates=True),
    policy=st.sampled_from(list(RlsPolicy)),
    backfill=st.booleans(),
)
def test_matches_reference_with_exact_estimates(trace, policy, backfill):
    _check(trace, policy, backfill)


@SETTINGS
@given(
    trace=traces(exact_estimates=False),
    policy=st.sampled_from(list(RlsPolicy)),
    backfill=st.booleans(),
)
def test_matches_reference_with_over_estimates(trace, policy, backfill):
    _check(trace, policy, backfill)


def _ranking_policy(seed: int):
    import json

    from app.policy.onnx_policy import OnnxPolicy
    from tests.fixtures.onnx_models import card, kernel_model

    return OnnxPolicy.from_bytes(
        kernel_model(seed=seed, hidden=16), json.dumps(card(decision_mode="rank")).encode()
    )


@SETTINGS
@given(
    trace=traces(exact_estimates=False),
    seed=st.integers(0, 3),
    backfill=st.booleans(),
)
def test_a_learned_picker_runs_the_same_in_both_simulators(trace, seed, backfill):
    policy = _ranking_policy(seed)
    n = trace.n_jobs
    fast = simulate_sequence(trace, 0, n, policy, backfill=backfill)
    starts, end = reference_simulate(trace, 0, n, policy, backfill=backfill)
    assert fast.start.tolist() == starts
    assert fast.end_time == end
