"""The GPU Gymnasium env: the reset/step contract, and a run of it is the simulator's run of
the same scorer (one engine) with return -sum(JCT) / reward scale."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from app.domains.gpu.encoding import FEATURE_NAMES, NUM_FEATURES, BoolArray, FloatArray
from app.domains.gpu.env import GpuSchedulingEnv
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.simulate import Semantics, SimJob, event_config, simulate_events

ATTAINED = FEATURE_NAMES.index("attained")
SIZE = FEATURE_NAMES.index("gpus_per_cluster")


def _workload(seed: int, n: int = 30) -> list[SimJob]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(120.0, n))
    return [
        SimJob(
            id=f"j{i}",
            arrival=float(t[i]),
            min_gpus=(g := int(rng.choice([1, 1, 2, 4, 8, 12]))),
            max_gpus=g,
            duration_s=float(rng.lognormal(6.5, 1.5)),
        )
        for i in range(n)
    ]


def _las_like(obs: FloatArray, mask: BoolArray) -> FloatArray:
    del mask
    out: FloatArray = (-0.7 * obs[:, ATTAINED] - 0.3 * obs[:, SIZE]).astype(np.float32)
    return out


def _env(jobs: list[SimJob], semantics: Semantics = Semantics.KAIROS) -> GpuSchedulingEnv:
    return GpuSchedulingEnv(lambda _rng: jobs, event_config(semantics, 4, 4), window=16)


def test_reset_and_step_follow_the_spaces() -> None:
    env = _env(_workload(0))
    obs, info = env.reset(seed=3)
    assert obs["obs"].shape == (16, NUM_FEATURES)
    assert obs["obs"].dtype == np.float32
    assert obs["mask"].shape == (16,)
    assert env.observation_space.contains({"obs": obs["obs"], "mask": obs["mask"].astype(np.int8)})
    assert info["rows"] >= 1
    assert obs["mask"][: info["rows"]].any()
    assert not obs["mask"][info["rows"] :].any()
    assert info["capacity"] == 16
    with pytest.raises(ValueError, match="16 scores"):
        env.step(np.zeros(3, dtype=np.float32))
    _, reward, terminated, truncated, _ = env.step(np.zeros(16, dtype=np.float32))
    assert reward <= 0.0
    assert not truncated
    assert not terminated


def test_gymnasium_env_checker_passes() -> None:
    check_env(_env(_workload(1)).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("semantics", [Semantics.KAIROS, Semantics.PHILLY_RIGID])
def test_the_env_runs_the_simulator_of_the_same_scorer(semantics: Semantics) -> None:
    jobs = _workload(2)
    env = _env(jobs, semantics)
    obs, info = env.reset(seed=0)
    ret, steps, done = float(info["reward_before"]), 0, False
    while not done:
        obs, reward, done, _, info = env.step(
            np.resize(_las_like(obs["obs"], obs["mask"]), 16).astype(np.float32)
        )
        ret += reward
        steps += 1
    sim = simulate_events(jobs, ScoredPolicy("las-like", "0", _las_like, window=16), env.config)
    assert info["jcts"] == pytest.approx(sim.jcts)
    assert ret == pytest.approx(-sum(sim.jcts) / 3600.0)
    assert steps > 0
    assert all(math.isfinite(j) for j in info["jcts"])
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(16, dtype=np.float32))


def test_reset_takes_a_workload_and_refuses_one_without_durations() -> None:
    env = _env(_workload(4))
    _, info = env.reset(options={"jobs": _workload(5, n=3)})
    assert {j.id for j in info["jobs"]} <= {"j0", "j1", "j2"}
    with pytest.raises(ValueError, match="duration"):
        env.reset(options={"jobs": [SimJob("x", 0.0, 1, 1)]})
