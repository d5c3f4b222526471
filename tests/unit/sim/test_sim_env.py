from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from app.domains.hpc.env import SchedulingEnv
from app.domains.hpc.swf import load_swf
from app.domains.hpc.types import Backfill

DATA = Path(__file__).resolve().parents[3] / "data"


@pytest.fixture(scope="module")
def trace():
    return load_swf(DATA / "lublin_256.swf.gz")


def _episode(env, seed, pick):
    obs, info = env.reset(seed=seed)
    total_steps, reward, done = 0, 0.0, False
    actions = []
    while not done:
        assert env.observation_space.contains(obs)
        assert (obs["action_mask"] == info["action_mask"]).all()
        action = pick(obs, info)
        actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["invalid_action"]
        done = terminated or truncated
        total_steps += 1
    return total_steps, reward, terminated, truncated, actions


def first_allowed(obs, info):
    return int(np.flatnonzero(info["action_mask"])[0])


def test_check_env_passes(trace):
    env = SchedulingEnv(trace, sequence_length=32)
    check_env(env, skip_render_check=True)


def test_episode_terminates_with_the_bsld_reward(trace):
    env = SchedulingEnv(trace, sequence_length=48, backfill=Backfill.EASY)
    steps, reward, terminated, truncated, _ = _episode(env, 3, first_allowed)
    assert terminated
    assert not truncated
    assert steps >= 48  # one step per started job at least
    assert reward <= -1.0  # -avg bsld, and bsld >= 1


def test_same_seed_same_episode(trace):
    env = SchedulingEnv(trace, sequence_length=40)
    a = _episode(env, 11, first_allowed)
    b = _episode(env, 11, first_allowed)
    assert a == b
    env.reset(seed=11)
    first = env.sequence_start
    env.reset(seed=12)
    assert env.sequence_start != first


def test_truncation_is_distinct_from_termination(trace):
    env = SchedulingEnv(trace, sequence_length=64, max_steps=5)
    steps, reward, terminated, truncated, _ = _episode(env, 0, first_allowed)
    assert (steps, reward, terminated, truncated) == (5, 0.0, False, True)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_masked_action_falls_back_and_is_reported(trace):
    env = SchedulingEnv(trace, sequence_length=32)
    _, info = env.reset(seed=0)
    masked = np.flatnonzero(info["action_mask"] == 0)
    _, _, _, _, info = env.step(int(masked[0]))
    assert info["invalid_action"]


def test_start_option_pins_the_sequence(trace):
    env = SchedulingEnv(trace, sequence_length=32)
    _, info = env.reset(seed=0, options={"start": 1981})
    assert info["sequence_start"] == 1981 == env.sequence_start
