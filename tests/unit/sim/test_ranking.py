"""One feature formula: the ranking encoder of the simulators, the engine's env and the service's
StepView encoder give the same rows for one state, and each of them computes them with
:func:`app.domains.hpc.encoding.features` (a second copy of the formulas fails the spy)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.domains.hpc import encoding
from app.domains.hpc.decision import DecisionConfig, DecisionRun
from app.domains.hpc.encoding import encode_view
from app.domains.hpc.env import SchedulingEnv
from app.domains.hpc.policy import Phase
from app.domains.hpc.ranking import HeadEncoder
from app.domains.hpc.swf import SwfTrace, load_swf
from app.domains.hpc.types import ClusterState, Job, Node, Placement, RunningJob

DATA = Path(__file__).resolve().parents[3] / "data"


@contextmanager
def calls_of(fn: Callable[..., object]) -> Iterator[list[int]]:
    """Counts the calls of ``fn``'s code object, however the caller imported it."""
    code = fn.__code__
    count = [0]

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code:
            count[0] += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield count
    finally:
        sys.setprofile(previous)


@pytest.fixture(scope="module")
def lublin() -> SwfTrace:
    return load_swf(DATA / "lublin_256.swf.gz")


def _round_opening(env: SchedulingEnv, steps: int) -> None:
    """Step the first allowed row until a round has just opened after ``steps`` steps."""
    _, info = env.reset(seed=0, options={"start": 3000})
    done = 0
    while True:
        machine = env._batch.episode(0).machine
        if done >= steps and machine.phase is Phase.HEAD and not machine.started:
            pending = machine.fcfs_pending()
            if 4 <= len(pending) <= env.max_candidates and machine.free > 0:
                return
        _, _, terminated, _, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        assert not terminated
        done += 1


@pytest.mark.parametrize("steps", [0, 40, 120])
def test_env_service_and_ranking_encoders_are_the_one_formula(lublin: SwfTrace, steps: int) -> None:
    env = SchedulingEnv(lublin, sequence_length=256)
    _round_opening(env, steps)
    ep = env._batch.episode(0)
    machine = ep.machine
    ppn = lublin.procs_per_node
    capacity = machine.nodes * ppn
    ids = [machine.fcfs[h][1] for h in range(ep.length)]

    def job(h: int) -> Job:
        return Job(ids[h], {"cpu": ppn}, ep.walltime[h], ep.submit[h], tasks=ep.tasks[h])

    pending = machine.fcfs_pending()
    state = ClusterState(
        now=machine.now,
        nodes=(Node("pool", {"cpu": capacity}, {"cpu": (machine.nodes - machine.free) * ppn}),),
        running=tuple(
            RunningJob(job(h), (Placement("pool", ep.tasks[h]),), ep.start_time[h])
            for h in machine.running
        ),
        pending=tuple(job(h) for h in pending),
    )
    with calls_of(encoding.features) as env_calls:
        view = env._batch.settle()
    width = int(view.candidates[0])
    assert width == len(pending)
    env_obs = view.obs[0, :width]
    assert [ep.machine.fcfs[h] for h in view.handle[0, :width]] == [
        machine.fcfs[h] for h in pending
    ]

    run = DecisionRun(state, DecisionConfig())
    with calls_of(encoding.features) as service_calls:
        service = encode_view(run.view(), env.max_candidates)

    tasks = np.asarray(ep.tasks, dtype=np.float64)
    ranker = HeadEncoder(
        np.asarray(ep.submit), np.asarray(ep.walltime), tasks * ppn, float(capacity)
    )
    at = np.asarray(pending, dtype=np.intp)
    with calls_of(encoding.features) as ranking_calls:
        ranked = ranker.encode(at, machine.now, tasks[at] <= machine.free, machine.free * ppn)

    assert min(env_calls[0], service_calls[0], ranking_calls[0]) >= 1
    assert service.obs.shape == env_obs.shape == ranked.shape
    assert env_obs.tobytes() == service.obs.tobytes()
    assert ranked.tobytes() == service.obs.tobytes()
    assert (view.mask[0, :width] == service.mask).all()


def test_the_spy_sees_a_copy_that_bypasses_the_formula() -> None:
    """The spy counts only the formula's code: a path that restates it reads zero."""

    def restated(x: float) -> float:
        return x / encoding.WAIT_SCALE_S

    with calls_of(encoding.features) as seen:
        restated(1.0)
        encoding.static_features(np.ones((1, 1)), np.zeros(1), np.ones(1), np.zeros(1), 1.0, [1.0])
    assert seen[0] == 0


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    q=st.integers(1, 40),
    used=st.sampled_from([0.0, 1.0, 12.0, 31.0, 32.0]),
    now=st.floats(0.0, 1e7),
)
def test_head_encoder_equals_the_service_encoder(
    seed: int, q: int, used: float, now: float
) -> None:
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(0.0, now, q)).round()
    walltime = rng.choice([0.0, 1.0, 9.0, 60.0, 3600.0, 86_400.0, 1e6], q)
    tasks = rng.integers(1, 5, q)
    per_task = rng.choice([1.0, 2.0, 8.0], q)
    jobs = tuple(
        Job(
            f"j{i:03d}",
            {"cpu": float(per_task[i])},
            float(walltime[i]),
            float(submit[i]),
            tasks=int(tasks[i]),
        )
        for i in range(q)
    )
    state = ClusterState(now=now, nodes=(Node("pool", {"cpu": 32.0}, {"cpu": used}),), pending=jobs)
    run = DecisionRun(state, DecisionConfig())
    assume(not run.done)  # some job fits: the decision has a first view
    view = run.view()
    expected = encode_view(view, len(view.candidates)).obs
    order = [int(j.id[1:]) for j in view.candidates]
    demand = tasks * per_task
    encoder = HeadEncoder(submit, walltime, demand, 32.0)
    at = np.asarray(order, dtype=np.intp)
    got = encoder.encode(at, now, demand[at] <= 32.0 - used, 32.0 - used)
    assert got.tobytes() == expected.tobytes()
