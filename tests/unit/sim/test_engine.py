"""The simulator's engine (the EASY rules of app.domains.hpc.easy on the pooled count model)
starts every job when the frozen pre-optimisation core (tests/unit/domain/reference) and the
service's decide() do, and the service and the simulator run the same rule functions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domains.hpc import easy
from app.domains.hpc.decision import DecisionConfig, decide
from app.domains.hpc.heuristics import HEURISTICS, get_heuristic
from app.domains.hpc.policy import OrderingPolicy, StepView
from app.domains.hpc.simulate import (
    KairosSimulator,
    is_static,
    pooled_machine,
    simulate_kairos,
    simulate_workload,
    workload_from_trace,
)
from app.domains.hpc.swf import SwfTrace, load_swf, parse_swf
from app.domains.hpc.types import (
    Backfill,
    ClusterState,
    Job,
    Node,
    Placement,
    PolicyRef,
    RunningJob,
)
from sim.engine import run_sequence
from tests.unit.domain.reference import decision as ref_decision

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


def _oracle_starts(
    trace: SwfTrace, policy: OrderingPolicy, backfill: Backfill, *, pooled: bool
) -> list[float]:
    """Start times with the frozen reference core deciding every snapshot."""
    sim = KairosSimulator(
        workload_from_trace(trace), config=DecisionConfig(backfill=backfill), pooled=pooled
    )
    config = ref_decision.DecisionConfig(backfill=backfill)
    while (state := sim.next_state()) is not None:
        sim.apply(ref_decision.decide(state, policy, config), state)
    return sim.result().start.tolist()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trace=traces(),
    policy=st.sampled_from(sorted(HEURISTICS)),
    backfill=st.sampled_from([Backfill.NONE, Backfill.EASY]),
    pooled=st.booleans(),
)
def test_engine_equals_the_frozen_oracle(trace, policy, backfill, pooled):
    heuristic = get_heuristic(policy)
    expected = _oracle_starts(trace, heuristic, backfill, pooled=pooled)
    got = simulate_workload(workload_from_trace(trace), heuristic, backfill)
    assert got.start.tolist() == expected


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
    trace = parse_swf(lines)
    heuristic = get_heuristic(policy)
    got = simulate_workload(workload_from_trace(trace), heuristic, Backfill.EASY)
    assert got.start[6] == 44.0
    assert got.start.tolist() == _oracle_starts(trace, heuristic, Backfill.EASY, pooled=True)


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "wfp3", "unicep", "f1"])
@pytest.mark.parametrize("backfill", [Backfill.NONE, Backfill.EASY])
def test_engine_equals_decide_on_lublin(policy, backfill):
    trace = load_swf(DATA / "lublin_256.swf.gz")
    heuristic = get_heuristic(policy)
    workload = workload_from_trace(trace, 7085, 200)
    core = KairosSimulator(workload, config=DecisionConfig(backfill=backfill), pooled=True)
    expected = core.run(heuristic)  # decide() on a snapshot at every decision point
    got = simulate_workload(workload, heuristic, backfill)
    assert got.start.tolist() == expected.start.tolist()
    assert got.end_time == expected.end_time


def test_static_detection():
    assert is_static(get_heuristic("sjf"))
    assert is_static(get_heuristic("f1"))
    assert not is_static(get_heuristic("wfp3"))
    assert not is_static(get_heuristic("unicep"))


class Reversed:
    """An ordering policy that is no ScoreHeuristic: reverse FCFS (latest submit first)."""

    ref = PolicyRef("reversed", "1", "test")

    def order(self, jobs, now):
        return list(reversed(jobs))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), backfill=st.sampled_from([Backfill.NONE, Backfill.EASY]))
def test_any_ordering_policy_runs_on_the_engine_as_in_the_oracle(trace, backfill):
    policy = Reversed()
    expected = _oracle_starts(trace, policy, backfill, pooled=True)
    got = simulate_workload(workload_from_trace(trace), policy, backfill)
    assert got.start.tolist() == expected


def _ranking_policy(seed: int):
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
def test_engine_equals_decide_for_ranking_onnx_policies(trace, seed, backfill):
    policy = _ranking_policy(seed)
    workload = workload_from_trace(trace)
    core = KairosSimulator(workload, config=DecisionConfig(backfill=backfill), pooled=True)
    expected = core.run(policy)
    got = simulate_workload(workload, policy, backfill)
    assert got.start.tolist() == expected.start.tolist()


@pytest.mark.parametrize("backfill", [Backfill.NONE, Backfill.EASY])
def test_engine_equals_decide_for_a_ranking_policy_on_lublin(backfill):
    trace = load_swf(DATA / "lublin_256.swf.gz")
    policy = _ranking_policy(7)
    workload = workload_from_trace(trace, 7085, 300)
    core = KairosSimulator(workload, config=DecisionConfig(backfill=backfill), pooled=True)
    expected = core.run(policy)
    got = simulate_kairos(
        trace, 7085, 300, policy, config=DecisionConfig(backfill=backfill), pooled=True
    )
    assert got.start.tolist() == expected.start.tolist()


class FirstAllowed:
    """A stepping policy: the first pickable candidate (FCFS order)."""

    ref = PolicyRef("first-allowed", "1", "test")

    def pick(self, view: StepView) -> int:
        return view.mask.index(True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), backfill=st.sampled_from([Backfill.NONE, Backfill.EASY]))
def test_pooled_machine_pick_by_pick_equals_decide_stepping(trace, backfill):
    """The engine's incremental API (arrive/complete between rounds, allowed/pick within one)
    gives a stepping policy's decisions: first allowed in FCFS order, against decide()."""
    workload = workload_from_trace(trace)
    core = KairosSimulator(workload, config=DecisionConfig(backfill=backfill), pooled=True)
    expected = core.run(FirstAllowed()).start.tolist()

    machine = pooled_machine(workload, backfill)
    jobs = workload.jobs
    events = sorted((j.submit_time, 1, i) for i, j in enumerate(jobs))
    start = [-1.0] * len(jobs)
    while events:
        t = events[0][0]
        machine.now = t
        while events and events[0][0] == t:
            _, kind, i = events.pop(0)
            if kind == 0:
                machine.complete(i)
            else:
                machine.arrive(i)
        if not machine.something_fits():
            continue
        machine.begin()
        while not machine.done:
            allowed = [j for j in machine.fcfs_pending() if machine.allowed(j)]
            if not allowed:
                break
            machine.pick(allowed[0])
        for i in machine.started:
            start[i] = t
            events.append((t + workload.run_time[i], 0, i))
        events.sort()
    assert start == expected


def test_the_service_and_the_simulator_run_the_same_rules(monkeypatch):
    """One statement of EASY: decide() and the simulator both go through easy.EasyRound."""
    calls: list[str] = []
    rule_b = easy.EasyRound._backfill_on

    def spy(self, job, placement):
        calls.append(type(self.model).__name__)
        return rule_b(self, job, placement)

    monkeypatch.setattr(easy.EasyRound, "_backfill_on", spy)
    trace = load_swf(DATA / "lublin_256.swf.gz")
    run_sequence(trace, "f1", start=7085, length=200, backfill=Backfill.EASY)
    assert calls
    assert set(calls) == {"PooledMachine"}
    calls.clear()
    # "big" waits for the running job (shadow time 50); "a" ends by then: rule (a) backfills it
    running = RunningJob(Job("r", {"cpu": 3.0}, 50.0, -1.0), (Placement("n0", 1),), 0.0)
    state = ClusterState(
        now=0.0,
        nodes=(Node("n0", {"cpu": 4.0}, {"cpu": 3.0}), Node("n1", {"cpu": 4.0})),
        running=(running,),
        pending=(Job("big", {"cpu": 4.0}, 100.0, 0.0, tasks=2), Job("a", {"cpu": 1.0}, 10.0, 1.0)),
    )
    decision = decide(state, get_heuristic("fcfs"), DecisionConfig(backfill=Backfill.EASY))
    assert [a.job_id for a in decision.allocations] == ["a"]
    assert calls == ["_MatrixModel"]


def test_the_env_and_the_service_run_the_same_rules(monkeypatch):
    """The training env's picks go through easy.EasyRound and its masks through
    easy.backfill_mask, as decide() for a stepping policy."""
    from app.domains.hpc.env import VectorSchedulingEnv
    from training.hpc_env import HpcEpisode, JobTable

    picks: list[str] = []
    masks: list[int] = []
    pick, mask = easy.EasyRound.pick, easy.backfill_mask

    def spy_pick(self, job):
        picks.append(type(self.model).__name__)
        return pick(self, job)

    def spy_mask(fits, ends, shadow, holds):
        masks.append(len(fits))
        return mask(fits, ends, shadow, holds)

    monkeypatch.setattr(easy.EasyRound, "pick", spy_pick)
    monkeypatch.setattr(easy, "backfill_mask", spy_mask)
    monkeypatch.setattr("app.domains.hpc.env.backfill_mask", spy_mask)
    monkeypatch.setattr("app.domains.hpc.decision.backfill_mask", spy_mask)
    trace = load_swf(DATA / "lublin_256.swf.gz")
    env = VectorSchedulingEnv(trace, 4, sequence_length=64)
    _, info = env.reset(seed=1)
    for _ in range(50):
        _, _, _, _, info = env.step(info["action_mask"].argmax(axis=1))
    assert len(picks) == 200
    assert set(picks) == {"PooledMachine"}
    assert masks
    picks.clear()
    masks.clear()
    episode = HpcEpisode(JobTable.from_swf(str(DATA / "lublin_256.swf.gz")))
    episode.reset(7085, 64)
    while not episode.done:
        episode.step_queue(episode.teacher_pos("sjf"))
    assert set(picks) == {"PooledMachine"}
    assert masks
    picks.clear()
    masks.clear()
    workload = workload_from_trace(trace, 7085, 64)
    KairosSimulator(workload, config=DecisionConfig(), pooled=True).run(FirstAllowed())
    assert set(picks) == {"_MatrixModel"}
    assert masks


def test_the_twin_is_gone():
    assert importlib.util.find_spec("sim.kairos_fast") is None
