"""training/gpu_es.py: the linear keys it starts from are their heuristics exactly (every JCT of
a pollux-compat run equal), the exported network scores ``s . x``, and a short run writes a model
directory the service loads, whose card names what it was selected on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tyro")

from app.domains.gpu.encoding import NUM_FEATURES, EncodingConstants
from app.domains.gpu.simulate import Semantics, simulate, simulate_pollux
from app.policy.gpu_onnx import load_gpu_policy
from sim.gpu_data import load_applications
from training.gpu_es import EsArgs, linear_policy, train
from training.gpu_ppo import INITIAL_KEYS, Args, agent_of, build_onnx, initial_weights, load_data


@pytest.mark.parametrize("key", sorted(INITIAL_KEYS))
def test_initial_key_is_its_heuristic(key: str) -> None:
    data = load_data(
        Args(semantics="pollux-compat", train_workloads=1, val_workloads=1, jobs_per_workload=80)
    )
    apps = load_applications()
    rows = data.train[0]
    pol = linear_policy(initial_weights(key), EncodingConstants(las_threshold_gpu_s=57600.0))
    got = simulate_pollux(rows, apps, pol).jcts
    want = simulate(rows, key, Semantics.POLLUX_COMPAT, apps=apps).jcts
    assert got == pytest.approx(want, abs=0.0)


def test_exported_network_scores_the_linear_term() -> None:
    import onnxruntime as ort

    w = np.random.default_rng(0).normal(size=NUM_FEATURES)
    sess = ort.InferenceSession(build_onnx(agent_of(w)).SerializeToString())
    obs = np.random.default_rng(1).random((2, 5, NUM_FEATURES)).astype(np.float32)
    mask = np.ones((2, 5), dtype=np.bool_)
    (logits,) = sess.run(["logits"], {"obs": obs, "mask": mask})
    np.testing.assert_allclose(logits, obs @ w.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_short_run_writes_a_loadable_model(tmp_path: Path) -> None:
    out = tmp_path / "gpu-v1" / "9"
    args = EsArgs(
        generations=2,
        train_workloads=3,
        batch=2,
        pairs=1,
        val_workloads=2,
        val_every=1,
        jobs_per_workload=30,
        workers=1,
        out=out,
        version="9",
    )
    train(args, "test")
    card = json.loads((out / "card.json").read_text())
    assert (card["name"], card["version"]) == ("gpu-v1", "9")
    assert card["encoding"]["las_threshold_gpu_s"] == 57600.0
    assert card["training"]["best_update"] in (0, 1, 2)
    assert card["training"]["validation"]["policy_per_workload"]
    assert set(card["architecture"]["weights"]) == set(card["features"])
    pol = load_gpu_policy(out)
    data = load_data(
        Args(semantics="pollux-compat", train_workloads=1, val_workloads=2, jobs_per_workload=30)
    )
    jcts = [float(np.mean(simulate_pollux(w, load_applications(), pol).jcts)) for w in data.val]
    assert jcts == pytest.approx(card["training"]["validation"]["policy_per_workload"])
