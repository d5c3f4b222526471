"""``python -m training.select``: choose among a shipped model and its blends with SJF on
validation windows, export the choice, and load it through the service's registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tyro")

from app.domains.hpc.encoding import NUM_FEATURES
from app.policy.onnx_policy import OnnxRankingPolicy
from app.policy.registry import PolicyRegistry
from training.es import NumpyRanker, Shapes, load_init_params, shrink_toward_sjf

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "data" / "lublin_256.swf.gz"
BASE = ROOT / "models" / "hpc-kernel" / "2"


@pytest.mark.slow
def test_select_chooses_by_the_rule_and_exports_a_loadable_model(tmp_path: Path) -> None:
    out = tmp_path / "models" / "hpc-pick" / "1"
    table = tmp_path / "select.json"
    args = [
        sys.executable, "-m", "training.select", "--runs", str(BASE), "--trace", str(TRACE),
        "--backfill", "easy", "--windows", "3", "--shrink", "0.0", "0.5", "--workers", "1",
        "--json-out", str(table), "--export", str(out), "--name", "hpc-pick", "--version", "1",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(table.read_text())
    candidates = result["ratio_to_best_heuristic"]
    assert set(candidates) == {str(BASE), f"{BASE}~a0", f"{BASE}~a0.5"}

    def worst(name: str) -> float:
        return max(candidates[name].values())

    assert worst(result["chosen"]) == min(worst(c) for c in candidates)  # the declared rule
    # alpha 0 is SJF exactly: its ratio is SJF's bsld over the best heuristic's
    sjf = result["bsld"]["sjf"][str(TRACE)]
    best = min(result["bsld"][h][str(TRACE)] for h in ("fcfs", "sjf", "wfp3", "unicep", "f1"))
    assert candidates[f"{BASE}~a0"][str(TRACE)] == pytest.approx(sjf / best)

    card = json.loads((out / "card.json").read_text())
    assert card["decision_mode"] == "rank"
    assert card["training"]["selection"]["chosen"] == result["chosen"]
    registry = PolicyRegistry(tmp_path / "models")
    registry.discover()
    entry = registry.find("hpc-pick")
    assert entry is not None
    assert isinstance(entry.policy, OnnxRankingPolicy)
    # the exported scores are the chosen candidate's
    shapes = Shapes(NUM_FEATURES, (8, 8))
    base, _, alpha = result["chosen"].partition("~a")
    theta = load_init_params(shapes, base)
    if alpha:
        theta = shrink_toward_sjf(shapes, theta, float(alpha))
    obs = np.random.default_rng(0).random((1, 20, NUM_FEATURES), dtype=np.float32)
    mask = np.ones((1, 20), dtype=np.bool_)
    served = entry.policy.score(obs, mask)
    assert np.abs(served - NumpyRanker(shapes, theta).score(obs, mask)).max() < 1e-4
