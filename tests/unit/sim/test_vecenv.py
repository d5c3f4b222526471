"""VectorSchedulingEnv re-states SchedulingEnv on node counts: every step must be identical."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.domains.hpc.env import SchedulingEnv
from app.domains.hpc.swf import load_swf
from app.domains.hpc.types import Backfill
from sim.vecenv import VectorSchedulingEnv

DATA = Path(__file__).resolve().parents[3] / "data"


@pytest.fixture(scope="module")
def lublin():
    return load_swf(DATA / "lublin_256.swf.gz")


def _compare(trace, start, length, backfill, seed, max_candidates=128, reward="bsld"):
    ref = SchedulingEnv(
        trace, sequence_length=length, backfill=backfill, max_candidates=max_candidates,
        reward=reward,
    )  # fmt: skip
    vec = VectorSchedulingEnv(
        trace, 1, sequence_length=length, backfill=backfill, max_candidates=max_candidates,
        reward=reward,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    obs_r, info_r = ref.reset(options={"start": start})
    obs_v, info_v = vec.reset(seed=0, options={"starts": [start]})
    steps = 0
    while True:
        np.testing.assert_array_equal(obs_v["action_mask"][0], obs_r["action_mask"])
        np.testing.assert_array_equal(obs_v["obs"][0], obs_r["obs"])
        np.testing.assert_array_equal(info_v["candidate_index"][0], info_r["candidate_index"])
        action = int(rng.choice(np.flatnonzero(obs_r["action_mask"])))
        obs_r, rew_r, term_r, trunc_r, info_r = ref.step(action)
        obs_v, rew_v, term_v, trunc_v, info_v = vec.step([action])
        steps += 1
        assert rew_v[0] == pytest.approx(rew_r, rel=1e-12)
        assert bool(term_v[0]) == term_r
        assert not trunc_r
        assert not trunc_v[0]
        if term_r:
            return steps


@pytest.mark.parametrize("backfill", [Backfill.EASY, Backfill.NONE])
@pytest.mark.parametrize(("start", "seed"), [(1981, 0), (4299, 1), (7085, 2)])
def test_same_steps_as_the_generic_env(lublin, backfill, start, seed):
    assert _compare(lublin, start, 96, backfill, seed) >= 96


def test_same_steps_with_a_small_window(lublin):
    """Long queues: the candidate window (SJF/smallest interleave) must match too."""
    assert _compare(lublin, 2756, 96, Backfill.NONE, 5, max_candidates=8) >= 96


def test_same_steps_with_fractional_nodes_and_utilisation_reward(tmp_path):
    lines = ["; MaxNodes: 6\n", "; MaxProcs: 12\n"]
    rng = np.random.default_rng(7)
    t = 0
    for i in range(1, 400):
        t += int(rng.choice([0, 3, 30, 200]))
        run = int(rng.integers(1, 2000))
        req = int(run * rng.choice([1, 1.5, 3]))
        procs = int(rng.integers(1, 13))
        lines.append(f"{i} {t} -1 {run} {procs} -1 -1 -1 {req} -1 1 -1 -1 -1 0 -1 -1 -1\n")
    path = tmp_path / "small.swf"
    path.write_text("".join(lines))
    trace = load_swf(path)
    for backfill in (Backfill.EASY, Backfill.NONE):
        _compare(trace, 60, 64, backfill, 3, reward="utilization")


def test_same_steps_when_jobs_overrun_their_requests(tmp_path):
    """Under-estimates: overdue jobs count as released at now in the shadow, as in the core."""
    lines = ["; MaxNodes: 8\n", "; MaxProcs: 8\n"]
    rng = np.random.default_rng(11)
    t = 0
    for i in range(1, 400):
        t += int(rng.choice([0, 3, 30, 200]))
        run = int(rng.integers(1, 2000))
        req = max(1, int(run * rng.choice([0.2, 0.5, 1, 3])))
        procs = int(rng.integers(1, 9))
        lines.append(f"{i} {t} -1 {run} {procs} -1 -1 -1 {req} -1 1 -1 -1 -1 0 -1 -1 -1\n")
    path = tmp_path / "overrun.swf"
    path.write_text("".join(lines))
    trace = load_swf(path)
    for seed in (3, 4):
        _compare(trace, 60, 64, Backfill.EASY, seed)


def test_batch_autoresets_and_reports_episodes(lublin):
    vec = VectorSchedulingEnv(lublin, 4, sequence_length=32)
    obs, info = vec.reset(seed=3)
    assert obs["obs"].shape == (4, 128, 13)
    assert obs["obs"].dtype == np.float32
    assert info["action_mask"].dtype == np.int8
    done = 0
    for _ in range(400):
        actions = [int(np.flatnonzero(m)[0]) for m in info["action_mask"]]
        obs, rewards, terminated, truncated, info = vec.step(actions)
        assert not info["invalid_action"].any()
        assert not truncated.any()
        done += int(terminated.sum())
        assert (rewards[terminated] <= -1.0).all()
        assert (rewards[~terminated] == 0.0).all()
        assert np.isfinite(info["episode_bsld"][terminated]).all()
    assert done >= 4
    again = VectorSchedulingEnv(lublin, 4, sequence_length=32)
    _, info2 = again.reset(seed=3)
    assert (info2["sequence_start"] == vec.reset(seed=3)[1]["sequence_start"]).all()
