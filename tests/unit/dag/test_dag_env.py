"""The DAG Gymnasium env: spaces, masks, actions, rewards, and that it runs the simulator's
decision functions (a policy stepped through the env ends where run_episode ends)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.spaces import MultiDiscrete

from app.domains.dag.decima import DecimaPolicy, DecimaWeights, choice_mask, decima_forward
from app.domains.dag.env import DagSchedulingEnv
from app.domains.dag.simulate import SimConfig, run_episode
from app.domains.dag.tpch import TpchLibrary
from sim.dag_data import load_decima, load_tpch


@pytest.fixture(scope="module")
def lib() -> TpchLibrary:
    return load_tpch()


def small_env(lib: TpchLibrary, **kw: object) -> DagSchedulingEnv:
    args: dict[str, object] = {"num_executors": 5, "num_jobs": 4, "time_limit_mean_s": None}
    args.update(kw)
    return DagSchedulingEnv(lib, **args)  # type: ignore[arg-type]


def test_defaults_are_the_spark_sched_sim_training_configuration(lib: TpchLibrary) -> None:
    env = DagSchedulingEnv(lib)
    assert env.cfg.semantics == "kairos"
    assert env.cfg.num_executors == 50
    assert env.num_jobs == 200
    assert env.interval_ms == 25_000.0
    assert env.time_limit_mean_s == 20_000.0
    assert isinstance(env.action_space, MultiDiscrete)
    assert env.action_space.nvec.tolist() == [200 * env.max_stages, 50]


def test_reset_observation_is_in_the_space_and_masks_are_consistent(lib: TpchLibrary) -> None:
    env = small_env(lib)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert not (obs["select_mask"] & ~obs["stage_mask"]).any()
    compact = info["obs"]
    num_j, num_s = compact.stage_mask.shape
    np.testing.assert_array_equal(obs["x"][:num_j, :num_s], compact.x)
    np.testing.assert_array_equal(obs["select_mask"][:num_j, :num_s], compact.select_mask)
    assert obs["stage_mask"][num_j:].sum() == 0
    assert choice_mask(compact).any()  # every observed round has a choice
    # only the source (the whole cluster at t = 0) can be committed
    assert obs["exec_mask"][0].sum() == 5


def test_same_seed_same_episode(lib: TpchLibrary) -> None:
    a, b = small_env(lib), small_env(lib)
    oa, _ = a.reset(seed=11)
    ob, _ = b.reset(seed=11)
    for key in oa:
        np.testing.assert_array_equal(oa[key], ob[key])
    oc, _ = small_env(lib).reset(seed=12)
    assert any(not np.array_equal(oa[k], oc[k]) for k in oa)


def test_invalid_action_is_repaired_and_flagged(lib: TpchLibrary) -> None:
    env = small_env(lib)
    obs, _ = env.reset(seed=5)
    masked = int(np.flatnonzero(obs["select_mask"].reshape(-1) == 0)[0])
    _, _, _, _, info = env.step(np.array([masked, 0]))
    assert info["invalid_action"]
    env.reset(seed=5)
    first = int(np.flatnonzero(obs["select_mask"].reshape(-1))[0])
    _, _, _, _, info = env.step(np.array([first, 10_000]))  # k beyond the allowed counts
    assert info["invalid_action"]
    env.reset(seed=5)
    _, _, _, _, info = env.step(np.array([first, 0]))
    assert not info["invalid_action"]


def test_step_before_reset_is_an_error(lib: TpchLibrary) -> None:
    with pytest.raises(RuntimeError, match="reset"):
        small_env(lib).step(np.array([0, 0]))


def _argmax_action(env: DagSchedulingEnv, w: DecimaWeights, info: dict[str, object]) -> np.ndarray:
    obs = info["obs"]
    stage_logits, exec_logits = decima_forward(w, obs)  # type: ignore[arg-type]
    allowed = choice_mask(obs)  # type: ignore[arg-type]
    flat = int(np.argmax(np.where(allowed, stage_logits, -np.inf)))
    j, s = divmod(flat, allowed.shape[1])
    k = int(np.argmax(np.where(obs.exec_mask[j], exec_logits[j], -np.inf)))  # type: ignore[attr-defined]
    return np.array([j * env.max_stages + s, k])


def test_env_runs_the_simulators_decision_functions(lib: TpchLibrary) -> None:
    """Greedy Decima through the env and through run_episode: the same episode; the return is
    minus the sum of the JCTs."""
    w = load_decima()
    env = small_env(lib, num_executors=10, num_jobs=6)
    _, info = env.reset(seed=21)
    total, steps, done = 0.0, 0, False
    while not done:
        _, reward, done, truncated, info = env.step(_argmax_action(env, w, info))
        assert not truncated
        assert not info["invalid_action"]
        total += reward
        steps += 1
    ref = run_episode(
        lib,
        SimConfig("kairos", 10),
        DecimaPolicy(w, mode="argmax"),
        seed=21,
        num_init=1,
        num_stream=5,
        interval_ms=25_000.0,
    )
    got = env.episode_result()
    np.testing.assert_array_equal(got.completion_ms, ref.completion_ms)
    assert steps <= ref.decisions
    assert total == pytest.approx(-float(np.sum(ref.jct_ms)) / 1000.0, rel=1e-9)


def test_time_limit_truncates(lib: TpchLibrary) -> None:
    env = small_env(lib, num_jobs=30, time_limit_mean_s=1.0)  # a mean of 1 s: cut early
    _, info = env.reset(seed=2)
    done = truncated = False
    while not (done or truncated):
        obs = info["obs"]
        first = np.argwhere(choice_mask(obs))[0]
        _, _, done, truncated, info = env.step(np.array([first[0] * env.max_stages + first[1], 0]))
    assert truncated
    assert not done
    assert np.isnan(env.episode_result().completion_ms).any()
