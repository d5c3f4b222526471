"""The engine's vector env (app.domains.hpc.env) against the frozen node-count twin.

``tests/unit/domain/reference/vecenv.py`` is the batched env that restated the EASY rules and the
features before issue 19.  Driven with the same actions, the engine's env gives the same
observations, masks, candidate indices, rewards and episode ends at every step, except that it
does not offer the twin's no-op steps: a HEAD step in which no pending job fits, where a pick can
only reserve a job that the next round reserves afresh (nothing can start either way).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.domains.hpc.env import SchedulingEnv, VectorSchedulingEnv
from app.domains.hpc.swf import load_swf
from app.domains.hpc.types import Backfill
from tests.unit.domain.reference.vecenv import VectorSchedulingEnv as FrozenVectorEnv

DATA = Path(__file__).resolve().parents[3] / "data"


@pytest.fixture(scope="module")
def lublin():
    return load_swf(DATA / "lublin_256.swf.gz")


def _no_op_step(frozen) -> bool:
    ep = frozen._episodes[0]
    return not ep.backfill_phase and not ep.stopped and not ep._something_fits()


def _compare(trace, start, length, backfill, seed, max_candidates=128, reward="bsld"):
    kw = {"sequence_length": length, "backfill": backfill, "max_candidates": max_candidates,
          "reward": reward}  # fmt: skip
    old = FrozenVectorEnv(trace, 1, **kw)
    new = VectorSchedulingEnv(trace, 1, **kw)
    single = SchedulingEnv(trace, **kw)
    obs_o, info_o = old.reset(seed=0, options={"starts": [start]})
    obs_n, info_n = new.reset(seed=0, options={"starts": [start]})
    obs_s, info_s = single.reset(options={"start": start})
    rng = np.random.default_rng(seed)
    steps = skipped = 0
    while True:
        while _no_op_step(old):
            first = int(np.flatnonzero(obs_o["action_mask"][0])[0])
            obs_o, rew_o, term_o, _, info_o = old.step([first])
            assert not term_o[0]
            assert rew_o[0] == 0.0
            skipped += 1
        np.testing.assert_array_equal(obs_n["obs"][0], obs_o["obs"][0])
        np.testing.assert_array_equal(obs_s["obs"], obs_o["obs"][0])
        np.testing.assert_array_equal(obs_n["action_mask"][0], obs_o["action_mask"][0])
        np.testing.assert_array_equal(obs_s["action_mask"], obs_o["action_mask"][0])
        np.testing.assert_array_equal(info_n["candidate_index"][0], info_o["candidate_index"][0])
        np.testing.assert_array_equal(info_s["candidate_index"], info_o["candidate_index"][0])
        action = int(rng.choice(np.flatnonzero(obs_o["action_mask"][0])))
        obs_o, rew_o, term_o, trunc_o, info_o = old.step([action])
        obs_n, rew_n, term_n, trunc_n, info_n = new.step([action])
        obs_s, rew_s, term_s, trunc_s, info_s = single.step(action)
        steps += 1
        assert rew_n[0] == rew_o[0] == rew_s
        assert bool(term_n[0]) == bool(term_o[0]) == term_s
        assert not trunc_o[0]
        assert not trunc_n[0]
        assert not trunc_s
        if term_o[0]:
            return steps, skipped


@pytest.mark.parametrize("backfill", [Backfill.EASY, Backfill.NONE])
@pytest.mark.parametrize(("start", "seed"), [(1981, 0), (4299, 1), (7085, 2)])
def test_same_steps_as_the_frozen_twin(lublin, backfill, start, seed):
    steps, skipped = _compare(lublin, start, 96, backfill, seed)
    assert steps >= 96
    assert skipped > 0  # the twin's no-op steps do occur, and are the only difference


def test_same_steps_with_a_small_window(lublin):
    """Long queues: the candidate window (SJF/smallest interleave) must match too."""
    assert _compare(lublin, 2756, 96, Backfill.NONE, 5, max_candidates=8)[0] >= 96
    assert _compare(lublin, 2756, 96, Backfill.EASY, 6, max_candidates=8)[0] >= 96


def _swf(tmp_path, name, max_nodes, max_procs, req_factors, seed):
    lines = [f"; MaxNodes: {max_nodes}\n", f"; MaxProcs: {max_procs}\n"]
    rng = np.random.default_rng(seed)
    t = 0
    for i in range(1, 400):
        t += int(rng.choice([0, 3, 30, 200]))
        run = int(rng.integers(1, 2000))
        req = max(1, int(run * rng.choice(req_factors)))
        procs = int(rng.integers(1, max_procs + 1))
        lines.append(f"{i} {t} -1 {run} {procs} -1 -1 -1 {req} -1 1 -1 -1 -1 0 -1 -1 -1\n")
    path = tmp_path / name
    path.write_text("".join(lines))
    return load_swf(path)


def test_same_steps_with_fractional_nodes_and_utilisation_reward(tmp_path):
    trace = _swf(tmp_path, "small.swf", 6, 12, [1, 1.5, 3], 7)
    for backfill in (Backfill.EASY, Backfill.NONE):
        _compare(trace, 60, 64, backfill, 3, reward="utilization")


def test_same_steps_when_jobs_overrun_their_requests(tmp_path):
    """Under-estimates: overdue jobs count as released at now in the shadow, as in the core."""
    trace = _swf(tmp_path, "overrun.swf", 8, 8, [0.2, 0.5, 1, 3], 11)
    for seed in (3, 4):
        _compare(trace, 60, 64, Backfill.EASY, seed)


def test_batch_slots_equal_single_episodes(lublin):
    """Slots stepped together give each slot's own single-env episode."""
    starts = [1981 + 37 * b for b in range(8)]
    vec = VectorSchedulingEnv(lublin, 8, sequence_length=48)
    obs, info = vec.reset(seed=0, options={"starts": starts})
    singles = [SchedulingEnv(lublin, sequence_length=48) for _ in starts]
    s_obs = [env.reset(options={"start": s})[0] for env, s in zip(singles, starts, strict=True)]
    live = [True] * 8
    while any(live):
        actions = info["action_mask"].argmax(axis=1)
        for b in range(8):
            if live[b]:
                np.testing.assert_array_equal(obs["obs"][b], s_obs[b]["obs"])
        obs, rewards, terminated, _, info = vec.step(actions)
        for b in range(8):
            if live[b]:
                s_obs[b], reward, term, _, _ = singles[b].step(int(actions[b]))
                assert rewards[b] == reward
                assert bool(terminated[b]) == term
                live[b] = not term


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


def test_the_batched_twin_is_gone():
    import importlib.util

    assert importlib.util.find_spec("sim.vecenv") is None
