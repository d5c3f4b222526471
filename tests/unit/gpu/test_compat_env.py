"""The ``pollux-compat`` Gymnasium env: the reset/step contract, and a run of it with a scorer's
scores as actions is ``simulate_pollux`` of the same scorer (one engine), with the return the
grid's job-steps."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from app.domains.gpu.compat_env import GpuCompatEnv
from app.domains.gpu.encoding import FEATURE_NAMES, NUM_FEATURES, EncodingConstants, FloatArray
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.philly import TRAIN_WEEKS, VALIDATION_WEEKS, PhillyJob, split_weeks
from app.domains.gpu.simulate import Semantics, SimJob, simulate, simulate_pollux
from sim.gpu_data import PHILLY_CSV, generated_workloads, load_applications, load_philly

WINDOW = 16
SIZE = FEATURE_NAMES.index("gpus_per_cluster")
ATTAINED = FEATURE_NAMES.index("attained")


@functools.cache
def _rows() -> list[PhillyJob]:
    return split_weeks(load_philly(PHILLY_CSV), TRAIN_WEEKS, VALIDATION_WEEKS)[0]


def _workload(seed: int, n: int = 24) -> list[SimJob]:
    """A workload of the trainer's kind: Pollux rows generated from the Philly training weeks."""
    return generated_workloads(_rows(), [seed], n)[0]


def _env(jobs: list[SimJob], constants: EncodingConstants | None = None) -> GpuCompatEnv:
    return GpuCompatEnv(
        lambda _rng: jobs, load_applications(), nodes=4, constants=constants, window=WINDOW
    )


def _scores(obs: FloatArray) -> FloatArray:
    """A scorer that is neither FIFO nor the tie order: small and least-attained first."""
    out: FloatArray = (-0.6 * obs[:, SIZE] - 0.4 * obs[:, ATTAINED]).astype(np.float32)
    return out


def test_reset_and_step_follow_the_spaces() -> None:
    env = _env(_workload(0))
    obs, info = env.reset(seed=3)
    assert obs["obs"].shape == (WINDOW, NUM_FEATURES)
    assert obs["obs"].dtype == np.float32
    assert env.observation_space.contains({"obs": obs["obs"], "mask": obs["mask"].astype(np.int8)})
    assert info["rows"] >= 1
    assert (obs["mask"] & (info["held"] == 0)).any(), "asked only where a pending row could start"
    assert info["capacity"] == 16
    with pytest.raises(ValueError, match="16 scores"):
        env.step(np.zeros(3, dtype=np.float32))
    _, reward, terminated, truncated, _ = env.step(np.zeros(WINDOW, dtype=np.float32))
    assert reward < 0.0
    assert not truncated
    assert not terminated


def test_gymnasium_env_checker_passes() -> None:
    check_env(_env(_workload(1)).unwrapped, skip_render_check=True)


def test_a_run_of_the_env_is_simulate_pollux_of_the_same_scorer() -> None:
    jobs = _workload(2)
    env = _env(jobs)
    obs, info = env.reset(seed=0)
    ret, done, decisions = float(info["reward_before"]), False, 0
    while not done:
        obs, reward, done, _, info = env.step(_scores(obs["obs"]))
        ret += reward
        decisions += 1
    policy = ScoredPolicy("probe", "0", lambda o, m: _scores(o), EncodingConstants(), WINDOW)
    ref = simulate_pollux(jobs, load_applications(), policy, nodes=4)
    assert info["jcts"] == pytest.approx(ref.jcts, abs=0.0)
    assert decisions > 1
    # the return counts each 60-s step's active jobs: sum(JCT) on the grid
    assert -ret * 3600.0 == pytest.approx(sum(60.0 * np.ceil(np.asarray(ref.jcts) / 60.0)), rel=0.1)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(WINDOW, dtype=np.float32))


def test_the_two_dlas_key_as_actions_is_the_heuristics_run() -> None:
    """The key ``-4 las_queue + 2 running + wait`` (threshold 57,600 GPU-s) walked by the env is
    the library's tiresias-2dlas under pollux-compat: the start of ``training.gpu_ppo
    --init-key tiresias-2dlas``."""
    names = list(FEATURE_NAMES)
    w = np.zeros(NUM_FEATURES, dtype=np.float32)
    w[names.index("las_queue")], w[names.index("running")], w[names.index("wait")] = -4, 2, 1
    jobs = _workload(4, n=30)
    env = _env(jobs, EncodingConstants(las_threshold_gpu_s=57600.0))
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        obs, _, done, _, info = env.step((obs["obs"] @ w).astype(np.float32))
    ref = simulate(
        jobs, "tiresias-2dlas", Semantics.POLLUX_COMPAT, nodes=4, apps=load_applications()
    )
    assert info["jcts"] == pytest.approx(ref.jcts, abs=0.0)
