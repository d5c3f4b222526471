"""Kairos semantics: the simulator drives app.domains.hpc.decision.decide; invariants hold."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domains.hpc.decision import DecisionConfig, apply_decision, earliest_start
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.metrics import avg_bounded_slowdown
from app.domains.hpc.policy import StepView
from app.domains.hpc.rlscheduler import simulate_sequence
from app.domains.hpc.simulate import KairosSimulator, simulate_kairos, workload_from_trace
from app.domains.hpc.swf import SwfTrace, load_swf, parse_swf
from app.domains.hpc.types import Backfill, ClusterState, Decision, PolicyRef

DATA = Path(__file__).resolve().parents[3] / "data"


def _trace(max_nodes: int, ppn: int, rows: list[tuple[int, int, int, int]]) -> SwfTrace:
    """rows: (submit gap, run, procs, request or -1)."""
    lines = [f"; MaxNodes: {max_nodes}\n", f"; MaxProcs: {max_nodes * ppn}\n"]
    t = 0
    for i, (gap, run, procs, req) in enumerate(rows, start=1):
        t += gap
        lines.append(f"{i} {t} -1 {run} {procs} -1 -1 -1 {req} -1 1 {1 + i % 3} -1 -1 0 -1 -1 -1\n")
    return parse_swf(lines)


@st.composite
def workloads(draw, exact_estimates: bool = False):
    max_nodes = draw(st.integers(1, 6))
    ppn = draw(st.sampled_from([1, 2]))
    n = draw(st.integers(1, 25))
    rows = []
    for _ in range(n):
        gap = draw(st.integers(0, 40))
        run = draw(st.integers(1, 120))
        procs = draw(st.integers(1, max_nodes * ppn))
        if exact_estimates:
            req = draw(st.sampled_from([-1, run, run + draw(st.integers(0, 60))]))
        else:
            req = draw(st.sampled_from([-1, max(1, run - 30), run + 30]))
        rows.append((gap, run, procs, req))
    return _trace(max_nodes, ppn, rows)


POLICIES = ["fcfs", "sjf", "wfp3", "unicep", "f1", "smallest"]


def _simulate(trace: SwfTrace, policy: str, backfill: Backfill, pooled: bool = False):
    sim = KairosSimulator(
        workload_from_trace(trace),
        config=DecisionConfig(backfill=backfill),
        pooled=pooled,
        record=True,
    )
    return sim, sim.run(get_heuristic(policy))


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(
    trace=workloads(),
    policy=st.sampled_from(POLICIES),
    backfill=st.sampled_from([Backfill.NONE, Backfill.EASY]),
)
def test_invariants(trace, policy, backfill):
    sim, res = _simulate(trace, policy, backfill)
    # every job starts exactly once, never before it is submitted
    ids = [a.job_id for rec in sim.decisions for a in rec.decision.allocations]
    assert sorted(ids) == sorted(j.id for j in sim.workload.jobs)
    assert (res.start >= res.submit).all()
    # time never goes backwards: decision points are strictly increasing in time
    times = [rec.state.now for rec in sim.decisions]
    assert times == sorted(times)
    assert len(set(times)) == len(times)
    # no node is ever oversubscribed: replay the placements on a per-node timeline
    ends = {j.id: res.start[i] + res.run[i] for i, j in enumerate(sim.workload.jobs)}
    usage: dict[str, list[tuple[float, float]]] = {}
    for rec in sim.decisions:
        for a in rec.decision.allocations:
            for p in a.placements:
                usage.setdefault(p.node_id, []).append((rec.state.now, float(p.tasks)))
                usage[p.node_id].append((ends[a.job_id], -float(p.tasks)))
    ppn = sim.workload.procs_per_node
    for events in usage.values():
        level = 0.0
        for _, delta in sorted(events, key=lambda e: (e[0], e[1])):  # releases first at ties
            level += delta * ppn
            assert level <= ppn + 1e-9


def _reservations(records) -> list[tuple[ClusterState, Decision]]:
    return [(r.state, r.decision) for r in records if r.decision.reservations]


@FAST
@given(trace=workloads(), policy=st.sampled_from(POLICIES))
def test_easy_backfill_never_delays_the_reservation(trace, policy):
    sim, _ = _simulate(trace, policy, Backfill.EASY)
    for state, decision in _reservations(sim.decisions):
        (reservation,) = decision.reservations
        job = next(j for j in state.pending if j.id == reservation.job_id)
        after = apply_decision(state, decision)
        assert earliest_start(after, job) == reservation.start_at


@FAST
@given(trace=workloads(exact_estimates=True))
def test_fcfs_easy_reserved_job_starts_by_its_reservation(trace):
    """With estimates >= run times the FCFS head keeps its place and starts by its shadow time."""
    sim, res = _simulate(trace, "fcfs", Backfill.EASY)
    index = {j.id: i for i, j in enumerate(sim.workload.jobs)}
    for _, decision in _reservations(sim.decisions):
        (reservation,) = decision.reservations
        assert res.start[index[reservation.job_id]] <= reservation.start_at


@FAST
@given(
    trace=workloads(),
    policy=st.sampled_from(POLICIES),
    backfill=st.sampled_from([Backfill.NONE, Backfill.EASY]),
)
def test_pooled_machine_decides_like_per_node_machine(trace, policy, backfill):
    _, a = _simulate(trace, policy, backfill, pooled=False)
    _, b = _simulate(trace, policy, backfill, pooled=True)
    assert a.start.tolist() == b.start.tolist()


def test_fcfs_without_backfilling_matches_rlscheduler_on_lublin():
    """FCFS without backfilling has no quirk to differ on: both semantics agree job by job."""
    trace = load_swf(DATA / "lublin_256.swf.gz")
    kairos = simulate_kairos(
        trace, 1981, 256, get_heuristic("fcfs"), config=DecisionConfig(backfill=Backfill.NONE)
    )
    rls = simulate_sequence(trace, 1981, 256, "fcfs", backfill=False)
    assert kairos.start.tolist() == rls.start.tolist()
    assert avg_bounded_slowdown(kairos) == pytest.approx(avg_bounded_slowdown(rls))


def test_easy_backfilling_helps_on_lublin():
    trace = load_swf(DATA / "lublin_256.swf.gz")
    results = {
        bf: simulate_kairos(
            trace, 1981, 256, get_heuristic("fcfs"), config=DecisionConfig(backfill=bf), pooled=True
        )
        for bf in (Backfill.NONE, Backfill.EASY)
    }
    assert avg_bounded_slowdown(results[Backfill.EASY]) < avg_bounded_slowdown(
        results[Backfill.NONE]
    )
    assert np.isfinite(results[Backfill.EASY].start).all()


class FirstAllowed:
    """A stepping policy (the ONNX policies' interface): the first pickable candidate."""

    ref = PolicyRef("first-allowed", "1", "test")

    def pick(self, view: StepView) -> int:
        return view.mask.index(True)


@pytest.mark.parametrize("backfill", [Backfill.NONE, Backfill.EASY])
def test_stepping_policy_path_equals_fcfs_ordering(backfill):
    """decide() drives stepping policies step by step; first-allowed in FCFS order is FCFS."""
    trace = load_swf(DATA / "lublin_256.swf.gz")
    config = DecisionConfig(backfill=backfill)
    stepping = simulate_kairos(trace, 4022, 160, FirstAllowed(), config=config, pooled=True)
    ordering = simulate_kairos(trace, 4022, 160, get_heuristic("fcfs"), config=config, pooled=True)
    assert stepping.start.tolist() == ordering.start.tolist()
