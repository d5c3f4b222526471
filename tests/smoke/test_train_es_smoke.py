"""ES training smoke test: ``kairos train --algo es`` for two generations on a real trace, export,
load through the service's registry, decide through the batched pipeline, and check that the
simulator's evaluation of the exported file equals the trainer's own view of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tyro")

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION
from app.domains.hpc.metrics import avg_bounded_slowdown
from app.domains.hpc.swf import load_swf
from app.domains.hpc.types import Backfill, ClusterState, Job, Node
from app.outcomes import DecisionRequest
from app.policy.onnx_policy import OnnxRankingPolicy
from app.policy.registry import PolicyRegistry
from app.policy.selector import decide_many
from sim.engine import run_sequence
from training.es import NumpyRanker, Shapes

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "data" / "lublin_256.swf.gz"


@pytest.mark.slow
def test_es_train_export_load_decide(tmp_path: Path) -> None:
    out = tmp_path / "models" / "hpc-rank" / "0.0.1"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [
        sys.executable, "-m", "kairos.cli", "train", "--algo", "es",
        "--trace", str(TRACE), "--backfill", "none", "--seed", "5",
        "--episode-length", "128", "--generations", "2", "--pairs", "2",
        "--windows-per-trace", "1", "--val-windows-per-trace", "1", "--val-every", "1",
        "--workers", "1", "--run-dir", str(tmp_path / "runs"),
        "--out", str(out), "--version", "0.0.1",
    ]  # fmt: skip
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    card = json.loads((out / "card.json").read_text())
    assert card["decision_mode"] == "rank"
    assert card["feature_schema_version"] == FEATURE_SCHEMA_VERSION
    assert card["training"]["generations_run"] == 2
    assert card["training"]["seed"] == 5
    assert card["training"]["traces"][0]["excluded_job_ranges"]  # evaluation windows held out

    registry = PolicyRegistry(tmp_path / "models")
    registry.discover()
    entry = registry.find("hpc-rank")
    assert entry is not None
    assert isinstance(entry.policy, OnnxRankingPolicy)

    nodes = tuple(Node(id=f"n{i}", capacity={"cpu": 4.0}) for i in range(4))
    pending = tuple(
        Job(id=f"j{i}", per_task={"cpu": 1.0 + i % 3}, walltime_s=60.0 * (i + 1),
            submit_time=float(i), tasks=1 + i % 2)
        for i in range(9)
    )  # fmt: skip
    state = ClusterState(now=100.0, nodes=nodes, pending=pending)
    [outcome] = decide_many(
        [DecisionRequest("r", state, DecisionConfig(backfill=Backfill.NONE), policy="hpc-rank")],
        registry,
    )
    assert not outcome.fallback_used
    assert outcome.decision is not None
    assert outcome.decision.policy.kind == "onnx"
    assert outcome.decision.allocations

    # what the trainer saw (numpy scorer) is what the simulator replays with the exported file
    (run,) = (tmp_path / "runs").iterdir()
    theta = np.load(run / "best.npz")["theta"]
    trace = load_swf(TRACE)
    served = run_sequence(trace, entry.policy, start=300, length=200, backfill=Backfill.NONE)
    arch = card["architecture"]
    shapes = Shapes(arch["features"], (arch["hidden"][0], arch["hidden"][1]))
    trained = run_sequence(
        trace, NumpyRanker(shapes, theta), start=300, length=200, backfill=Backfill.NONE
    )
    assert avg_bounded_slowdown(served) == pytest.approx(avg_bounded_slowdown(trained))
