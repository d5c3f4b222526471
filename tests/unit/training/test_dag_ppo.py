"""training/dag_ppo.py: the batched torch network equals the numpy forward pass (and so the ONNX
export) on recorded env observations; returns, baselines, an update and the model it writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from app.domains.dag.decima import DecimaObs, choice_mask, decima_forward
from app.domains.dag.env import DagSchedulingEnv
from app.policy.dag_onnx import read_dag_model
from sim.dag_data import DEFAULT_DECIMA, load_decima, load_tpch
from training.dag_export import weights_from_onnx
from training.dag_ppo import (
    DecimaNet,
    EnvConfig,
    Sample,
    _dist_terms,
    _load_init,
    _tpch,
    advantages,
    build_parser,
    collate,
    discounted_returns,
    main,
    ppo_update,
    rollout,
)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """As training runs (``--torch-threads 1``): small batches are slower on more threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _net() -> DecimaNet:
    init = _load_init(DEFAULT_DECIMA)
    net = DecimaNet({k: tuple(v.shape) for k, v in init.items()})
    net.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    return net


def _recorded(n: int = 120) -> list[tuple[DecimaObs, int, int]]:
    env = DagSchedulingEnv(load_tpch(), num_executors=10, num_jobs=12, time_limit_mean_s=None)
    _, info = env.reset(seed=8)
    rng = np.random.default_rng(0)
    out: list[tuple[DecimaObs, int, int]] = []
    done = False
    while not done and len(out) < n:
        obs = info["obs"]
        cand = np.flatnonzero(choice_mask(obs).reshape(-1))
        flat = int(cand[rng.integers(cand.size)])
        j, s = divmod(flat, obs.stage_mask.shape[1])
        k = int(rng.integers(int(obs.exec_mask[j].sum())))
        out.append((obs, flat, k))
        _, _, done, _, info = env.step(np.array([j * env.max_stages + s, k]))
    return out


def test_torch_forward_equals_the_numpy_forward() -> None:
    w = load_decima()
    rec = _recorded()
    assert max(o.height for o, _, _ in rec) >= 3
    assert max(o.stage_mask.shape[0] for o, _, _ in rec) >= 4
    samples = [Sample.of(o, flat, k, 0.0, i) for i, (o, flat, k) in enumerate(rec)]
    batch, height = collate(samples)
    with torch.no_grad():
        stage_t, exec_t = _net()(batch, height)
    worst = 0.0
    for i, (obs, flat, _) in enumerate(rec):
        s_ref, e_ref = decima_forward(w, obs)
        active = obs.stage_mask.reshape(-1)
        allowed = choice_mask(obs).reshape(-1)[active]
        got = stage_t[i, : int(active.sum())].numpy()
        worst = max(worst, float(np.abs(got[allowed] - s_ref.reshape(-1)[active][allowed]).max()))
        assert (got[~allowed] < -1e8).all()
        j = flat // obs.stage_mask.shape[1]
        row = obs.exec_mask[j]
        worst = max(worst, float(np.abs(exec_t[i].numpy()[row] - e_ref[j][row]).max()))
    assert worst <= 1e-5


def test_log_probs_are_those_of_the_sampling_distribution() -> None:
    w = load_decima()
    rec = _recorded(30)
    samples = []
    for i, (obs, flat, k) in enumerate(rec):
        s_ref, e_ref = decima_forward(w, obs)
        allowed = choice_mask(obs).reshape(-1)
        z = s_ref.reshape(-1)[allowed].astype(np.float64)
        lp_s = (
            z[int(np.flatnonzero(np.flatnonzero(allowed) == flat)[0])]
            - np.log(np.exp(z - z.max()).sum())
            - z.max()
        )
        j = flat // obs.stage_mask.shape[1]
        ze = e_ref[j][obs.exec_mask[j]].astype(np.float64)
        lp_e = ze[k] - ze.max() - np.log(np.exp(ze - ze.max()).sum())
        samples.append(Sample.of(obs, flat, k, float(lp_s + lp_e), i))
    batch, height = collate(samples)
    with torch.no_grad():
        logp, ent = _dist_terms(_net(), batch, height)
    np.testing.assert_allclose(logp.numpy(), batch["logp"].numpy(), atol=1e-4)
    assert (ent >= 0).all()


def test_discounted_returns_and_the_rollout_baseline() -> None:
    times = np.array([0.0, 10.0, 10.0, 30.0], np.float32)
    rewards = np.array([-1.0, -2.0, -3.0, -4.0], np.float32)
    g = discounted_returns(times, rewards, beta=0.1)
    assert g[3] == pytest.approx(-4.0)
    assert g[2] == pytest.approx(-3.0 - 4.0 * np.exp(-2.0))
    assert g[1] == pytest.approx(-2.0 + g[2])
    assert g[0] == pytest.approx(-1.0 + np.exp(-1.0) * g[1])
    cfg = EnvConfig("kairos", 5, 3, 25.0, None)
    arrays = dict(load_decima().tensors)
    group = [rollout((arrays, cfg, 4, a)) for a in (1, 2)]
    adv = advantages(group, 5e-3)
    assert [a.shape[0] for a in adv] == [t.rewards.shape[0] for t in group]
    # two rollouts: the baseline is their mean, so the advantages at t = 0 are opposite
    assert adv[0][0] == pytest.approx(-adv[1][0], abs=1e-6)


@pytest.mark.slow
def test_an_update_moves_the_policy_within_the_kl_stop() -> None:
    net = _net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    cfg = EnvConfig("kairos", 5, 3, 25.0, None)
    traj = rollout((net.numpy_weights(), cfg, 1, 0))
    adv = np.random.default_rng(0).standard_normal(len(traj.samples))
    args = build_parser().parse_args(["--out", "unused", "--minibatches", "2"])
    stats = ppo_update(
        net,
        torch.optim.Adam(net.parameters(), lr=1e-3),
        traj.samples,
        adv,
        args,
        np.random.default_rng(0),
    )
    assert stats["minibatches"] >= 1
    assert any(not torch.equal(before[k], v) for k, v in net.state_dict().items())


@pytest.mark.slow
def test_a_short_run_writes_a_loadable_model(tmp_path: Path) -> None:
    out = tmp_path / "dag-test" / "1"
    code = main(
        [
            "--out", str(out), "--iterations", "1", "--sequences", "1", "--rollouts", "2",
            "--jobs", "4", "--executors", "5", "--val-seeds", "900", "--workers", "1",
            "--train-seed-base", "1000", "--max-samples", "200",
        ]
    )  # fmt: skip
    assert code == 0
    card = json.loads((out / "card.json").read_text())
    assert card["training"]["iterations_run"] == 1
    assert card["seeds"]["training_sequences"] == [1000, 1000]
    assert card["training"]["hyperparameters"]["init"] == "data/dag/spark_sched_sim_decima.npz"
    model = read_dag_model(out)
    assert model.mode == "sample"
    assert model.name == "dag-test"


def test_validation_seeds_inside_the_training_range_are_refused(tmp_path: Path) -> None:
    code = main(
        [
            "--out", str(tmp_path / "m" / "1"), "--iterations", "2", "--sequences", "2",
            "--train-seed-base", "10", "--val-seeds", "12",
        ]
    )  # fmt: skip
    assert code == 2


@pytest.mark.slow
def test_the_checkpoint_holds_the_exported_best_weights(tmp_path: Path) -> None:
    """From scratch the warm start has no validation, so iteration 1 is the best so far: the
    ``--checkpoint`` file is written then and holds the weights the exported graph carries."""
    out = tmp_path / "dag-test" / "1"
    ckpt = tmp_path / "best.npz"
    code = main(
        [
            "--out", str(out), "--iterations", "1", "--sequences", "1", "--rollouts", "2",
            "--jobs", "4", "--executors", "5", "--val-seeds", "900", "--workers", "1",
            "--train-seed-base", "1000", "--max-samples", "200", "--from-scratch",
            "--val-every", "1", "--checkpoint", str(ckpt), "--update-threads", "1",
        ]
    )  # fmt: skip
    assert code == 0
    card = json.loads((out / "card.json").read_text())
    assert card["training"]["selected_iteration"] == 1
    saved = _load_init(ckpt)
    exported = weights_from_onnx(onnx.load(str(out / "policy.onnx")))
    assert set(saved) == set(exported)
    for k, v in saved.items():
        np.testing.assert_allclose(exported[k], v, atol=1e-7)


def test_the_tpch_library_is_parsed_once_per_process() -> None:
    assert _tpch() is _tpch()
