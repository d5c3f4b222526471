"""The ES trainer's pieces: the scorer's start, its ONNX export, the gradient estimate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.domain.encoding import NUM_FEATURES
from app.domain.heuristics import get_heuristic
from app.domain.types import Backfill
from app.policy.onnx_policy import OnnxPolicy, OnnxRankingPolicy
from sim.kairos import workload_from_trace
from sim.kairos_fast import simulate_workload_fast
from sim.traces.swf import load_swf
from tests.fixtures.onnx_models import card
from training.es import NumpyRanker, Shapes, build_onnx, es_gradient, initial_theta

DATA = Path(__file__).resolve().parents[3] / "data"
SHAPES = Shapes(NUM_FEATURES, (8, 8))


@pytest.mark.parametrize("backfill", [Backfill.EASY, Backfill.NONE])
def test_the_initial_scorer_is_sjf(backfill: Backfill) -> None:
    workload = workload_from_trace(load_swf(DATA / "lublin_256.swf.gz"), 4000, 300)
    ranker = NumpyRanker(SHAPES, initial_theta(SHAPES, seed=3))
    got = simulate_workload_fast(workload, ranker, backfill)
    sjf = simulate_workload_fast(workload, get_heuristic("sjf"), backfill)
    assert got.start.tolist() == sjf.start.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_scorer_and_exported_onnx_agree(seed: int) -> None:
    rng = np.random.default_rng(seed)
    theta = initial_theta(SHAPES, seed) + rng.normal(0.0, 0.5, SHAPES.size)
    model = build_onnx(SHAPES, theta, {"name": "es-test", "version": "1"})
    policy = OnnxPolicy.from_bytes(model, json.dumps(card(decision_mode="rank")).encode())
    assert isinstance(policy, OnnxRankingPolicy)
    obs = rng.random((3, 17, NUM_FEATURES), dtype=np.float32)
    mask = rng.random((3, 17)) < 0.8
    served = policy.score(obs, mask)
    trained = NumpyRanker(SHAPES, theta).score(obs, mask)
    assert np.abs(served[mask] - trained[mask]).max() < 1e-4
    assert (served[~mask] == trained[~mask]).all()  # both mark masked rows the same way


def test_descending_the_gradient_estimate_reduces_the_cost() -> None:
    rng = np.random.default_rng(0)
    target = rng.normal(size=20)
    theta = np.zeros(20)

    def cost(x: np.ndarray) -> float:
        return float(np.sum((x - target) ** 2))

    start = cost(theta)
    for _ in range(60):
        eps = rng.standard_normal((16, 20))
        plus = [cost(theta + 0.1 * e) for e in eps]
        costs = np.array(plus + [cost(theta - 0.1 * e) for e in eps])
        grad = es_gradient(eps, costs, 0.1)
        theta = theta - 0.1 * grad / (np.linalg.norm(grad) + 1e-12)
    assert cost(theta) < 0.25 * start
