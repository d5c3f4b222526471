"""GPU PPO smoke test: training/gpu_ppo.py for two updates on tiny generated workloads, export,
load through app/policy/gpu_onnx.py, and check that the simulator's run of the exported file
equals the trainer's own validation figure in the card."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tyro")
pytest.importorskip("torch")

from app.domains.gpu.simulate import Semantics, event_config, simulate_events
from app.policy.gpu_onnx import load_gpu_policy
from training.gpu_ppo import Args, load_data, train


@pytest.mark.slow
def test_two_updates_export_a_model_the_service_loads(tmp_path: Path) -> None:
    args = Args(
        seed=3,
        train_workloads=2,
        val_workloads=1,
        jobs_per_workload=24,
        num_envs=2,
        num_steps=16,
        num_minibatches=2,
        update_epochs=1,
        total_minutes=0.0,
        min_updates=2,
        val_every=1,
        bc_episodes=1,
        bc_epochs=1,
        out=tmp_path / "gpu-smoke" / "1",
        run_dir=tmp_path / "runs",
        name="gpu-smoke",
    )
    out = train(args, "smoke")
    card = json.loads((out / "card.json").read_text())
    assert card["domain"] == "gpu"
    assert card["training"]["updates_run"] == 2
    assert card["training"]["data"]["training_weeks"] == list(range(10))
    pol = load_gpu_policy(out)
    (val,) = load_data(args).val
    res = simulate_events(val, pol, event_config(Semantics.KAIROS, 16, 4))
    assert float(np.mean(res.jcts)) == pytest.approx(
        card["training"]["validation"]["policy_avg_jct_s"], rel=1e-6
    )


@pytest.mark.slow
def test_pollux_compat_training_validates_what_the_exported_model_runs(tmp_path: Path) -> None:
    from app.domains.gpu.simulate import simulate_pollux
    from sim.gpu_data import load_applications

    args = Args(
        seed=4,
        semantics="pollux-compat",
        train_workloads=2,
        val_workloads=1,
        jobs_per_workload=24,
        num_minibatches=2,
        update_epochs=1,
        total_minutes=0.0,
        min_updates=1,
        val_every=1,
        bc_episodes=1,
        bc_epochs=1,
        bc_coef=0.5,
        dagger_rounds=1,
        dagger_episodes=1,
        episodes_per_update=1,
        las_threshold_gpu_s=57600.0,
        out=tmp_path / "gpu-smoke" / "1",
        run_dir=tmp_path / "runs",
        name="gpu-smoke",
    )
    out = train(args, "smoke")
    card = json.loads((out / "card.json").read_text())
    v = card["training"]["validation"]
    assert card["encoding"]["las_threshold_gpu_s"] == 57600.0
    assert "tiresias" in v["heuristics_avg_jct_s"]
    assert "srsf" in v["oracle_heuristics"]
    pol = load_gpu_policy(out)
    (val,) = load_data(args).val
    res = simulate_pollux(val, load_applications(), pol)
    assert float(np.mean(res.jcts)) == pytest.approx(v["policy_avg_jct_s"], rel=1e-6)
    ratio = v["policy_avg_jct_s"] / v["heuristics_avg_jct_s"]["tiresias"]
    assert v["policy_ratio_to_tiresias"] == pytest.approx(ratio)
