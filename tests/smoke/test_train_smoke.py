"""Training smoke test: a few PPO updates on a real trace, export, load through the service's
ONNX runtime, decide on a small cluster with the mask honoured (cleanrl's tiny-budget test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tyro")

from app.domains.hpc.decision import DecisionConfig, DecisionRun, decide
from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION, encode_view
from app.domains.hpc.types import Backfill, ClusterState, Job, Node
from app.policy.onnx_policy import OnnxPolicy

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "data" / "lublin_256.swf.gz"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=110
    )


def _cluster() -> ClusterState:
    nodes = tuple(Node(id=f"n{i}", capacity={"cpu": 4.0}) for i in range(4))
    pending = (
        Job(id="big", per_task={"cpu": 4.0}, walltime_s=7200.0, submit_time=0.0, tasks=8),
        Job(id="a", per_task={"cpu": 1.0}, walltime_s=600.0, submit_time=10.0, tasks=2),
        Job(id="b", per_task={"cpu": 2.0}, walltime_s=60.0, submit_time=20.0, tasks=3),
        Job(id="c", per_task={"cpu": 1.0}, walltime_s=30.0, submit_time=30.0),
    )
    return ClusterState(now=100.0, nodes=nodes, pending=pending)


def test_train_export_load_decide(tmp_path: Path) -> None:
    if not TRACE.exists():
        pytest.skip(f"{TRACE} missing")
    runs = tmp_path / "runs"
    train = _run(
        [
            "-m",
            "training.ppo",
            "--trace",
            str(TRACE),
            "--seed",
            "3",
            "--episode-length",
            "64",
            "--total-timesteps",
            "384",
            "--num-envs",
            "2",
            "--num-steps",
            "64",
            "--num-minibatches",
            "2",
            "--update-epochs",
            "2",
            "--bc-teacher",
            "f1",
            "--bc-episodes",
            "2",
            "--bc-epochs",
            "2",
            "--val-sequences",
            "1",
            "--val-length",
            "96",
            "--val-every",
            "1",
            "--run-dir",
            str(runs),
        ],
        cwd=tmp_path,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    (run_dir,) = runs.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["updates"] == 3
    assert summary["global_step"] == 384
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    names = {json.loads(line)["name"] for line in lines}
    assert {"charts/SPS", "losses/policy_loss", "losses/value_loss", "eval/val_bsld"} <= names

    out = tmp_path / "models" / "hpc-kernel" / "0.0.1"
    export = _run(
        [
            "-m",
            "training.export_onnx",
            "--checkpoint",
            str(run_dir / "best.pt"),
            "--out",
            str(out),
            "--version",
            "0.0.1",
        ],
        cwd=tmp_path,
    )
    assert export.returncode == 0, export.stderr[-3000:]
    card = json.loads((out / "card.json").read_text())
    assert card["feature_schema_version"] == FEATURE_SCHEMA_VERSION
    assert card["training"]["seed"] == 3

    policy = OnnxPolicy.load(out)  # the service's validating loader
    assert policy.ref.kind == "onnx"
    assert policy.ref.version == "0.0.1"

    state = _cluster()
    for backfill in (Backfill.EASY, Backfill.NONE):
        decision = decide(state, policy, DecisionConfig(backfill=backfill))
        started = {a.job_id for a in decision.allocations}
        assert started, "a policy on an idle cluster starts something"
        assert started <= {"big", "a", "b", "c"}
        # never more cpu than the cluster has
        demand = {j.id: j.tasks * j.per_task["cpu"] for j in state.pending}
        assert sum(demand[j] for j in started) <= 16.0

    # the model itself honours the mask: masked rows never carry the largest logit
    run = DecisionRun(state, DecisionConfig(backfill=Backfill.EASY))
    rng = np.random.default_rng(0)
    while not run.done:
        view = run.view()
        encoded = encode_view(view)
        for _ in range(5):
            mask = encoded.mask & (rng.random(encoded.mask.shape) < 0.7)
            if not mask.any():
                continue
            logits = policy.score(encoded.obs[None], mask[None])[0]
            assert mask[int(np.argmax(logits))]
        run.apply(policy.pick(view))
