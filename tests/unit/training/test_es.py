"""The ES trainer's pieces: the scorer's start, its ONNX export, the gradient estimate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.domains.hpc.encoding import NUM_FEATURES
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.simulate import simulate_workload as simulate_workload_fast
from app.domains.hpc.simulate import workload_from_trace
from app.domains.hpc.swf import load_swf
from app.domains.hpc.types import Backfill
from app.policy.onnx_policy import OnnxPolicy, OnnxRankingPolicy
from tests.fixtures.onnx_models import card
from training.es import (
    EsArgs,
    NumpyRanker,
    ReferenceSampler,
    Shapes,
    Windows,
    build_onnx,
    covered,
    es_gradient,
    initial_theta,
    load_init_params,
    relative_cost,
    shrink_toward_sjf,
    split_holdout,
    split_segments,
)

MODELS = Path(__file__).resolve().parents[3] / "models"

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


def test_parameters_read_back_from_an_exported_model_are_the_exported_ones(tmp_path: Path) -> None:
    theta = initial_theta(SHAPES, 5) + np.random.default_rng(5).normal(0.0, 0.3, SHAPES.size)
    model = tmp_path / "m"
    model.mkdir()
    (model / "policy.onnx").write_bytes(build_onnx(SHAPES, theta, {"name": "t", "version": "1"}))
    np.savez(tmp_path / "best.npz", theta=theta)
    expected = theta.astype(np.float32).astype(np.float64)  # the graph stores float32
    assert np.array_equal(load_init_params(SHAPES, str(model)), expected)
    assert np.array_equal(load_init_params(SHAPES, str(model / "policy.onnx")), expected)
    assert np.array_equal(load_init_params(SHAPES, str(tmp_path / "best.npz")), theta)
    with pytest.raises(ValueError, match="expected"):
        load_init_params(Shapes(NUM_FEATURES, (4, 4)), str(model))


def test_fine_tuning_starts_from_the_shipped_default_exactly() -> None:
    """``--init-params models/hpc-kernel/2`` ranks as the served model does."""
    theta = load_init_params(SHAPES, str(MODELS / "hpc-kernel" / "2"))
    served = OnnxPolicy.load(MODELS / "hpc-kernel" / "2")
    rng = np.random.default_rng(11)
    obs = rng.random((2, 40, NUM_FEATURES), dtype=np.float32)
    mask = np.ones((2, 40), dtype=np.bool_)
    trained = NumpyRanker(SHAPES, theta).score(obs, mask)
    assert np.abs(served.score(obs, mask) - trained).max() < 1e-5
    with pytest.raises(ValueError, match="not an ES ranking model"):
        load_init_params(SHAPES, str(MODELS / "hpc-kernel" / "1"))


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


def test_the_window_loss_term_prices_only_the_windows_a_candidate_loses() -> None:
    reference = [10.0, 10.0, 10.0, 10.0]
    traces = [0, 0, 1, 1]
    # trace 0: one window 4x worse, one 4x better; trace 1: exactly the reference
    values = [40.0, 2.5, 10.0, 10.0]
    plain = relative_cost(values, reference, traces)
    assert plain == pytest.approx(0.5 * np.log(42.5 / 20.0))
    priced = relative_cost(values, reference, traces, window_loss_weight=2.0)
    assert priced == pytest.approx(plain + 2.0 * np.log(4.0) / 4)
    # a candidate that never loses a window pays nothing extra
    better = [5.0, 5.0, 10.0, 10.0]
    assert relative_cost(better, reference, traces, window_loss_weight=2.0) == pytest.approx(
        relative_cost(better, reference, traces)
    )


def test_importance_sampled_windows_estimate_the_ratio_of_sums() -> None:
    # windows drawn in proportion to the reference: the mean per-window ratio estimates the
    # ratio of sums over all windows, which the uniform cost computes when it sees them all
    reference = np.array([1.0, 1.0, 8.0])
    values = np.array([3.0, 1.0, 4.0])
    sampler = ReferenceSampler([[0, 64, 128]], [reference], {0: "sjf"})
    batch, ref = sampler.sample(np.random.default_rng(0), 20_000)
    drawn = np.array([s for _, s in batch]) // 64
    assert np.bincount(drawn, minlength=3) / len(drawn) == pytest.approx([0.1, 0.1, 0.8], abs=0.01)
    assert ref == [float(reference[i]) for i in drawn]  # each window comes with its reference
    estimate = relative_cost(list(values[drawn]), ref, [0] * len(ref), importance=True)
    exact = relative_cost(list(values), list(reference), [0, 0, 0])
    assert exact == pytest.approx(np.log(8.0 / 10.0))
    assert estimate == pytest.approx(exact, abs=0.01)
    # the estimate is the log of the mean per-window ratio of the windows it is given
    assert relative_cost([3.0, 4.0], [1.0, 8.0], [0, 0], importance=True) == pytest.approx(
        np.log((3.0 + 0.5) / 2)
    )


def test_the_reference_grid_holds_only_training_starts() -> None:
    args = EsArgs(
        trace=(str(DATA / "lublin_256.swf.gz"),),
        eval_slices=(0,),
        workers=1,
        episode_length=256,
        val_holdout=0.3,
    )
    windows = Windows.load(args)
    # a stub evaluator: the reference of a window is its start (every heuristic alike)

    class Starts:
        def run(self, tasks: list[tuple[object, int, int, int, str]]) -> list[float]:
            return [float(start + 1) for _, _, start, _, _ in tasks]

    sampler = ReferenceSampler.build(Starts(), windows, 97, 256, "easy/kairos")  # type: ignore[arg-type]
    assert sampler.grid[0] == [int(s) for s in windows.starts[0][::97]]
    assert set(sampler.grid[0]) <= set(windows.starts[0].tolist())  # never a validation start
    assert sampler.reference[0].tolist() == [s + 1.0 for s in sampler.grid[0]]


def test_held_out_validation_windows_share_no_job_with_training_windows() -> None:
    allowed = np.concatenate([np.arange(0, 900), np.arange(3000, 9000)]).astype(np.int64)
    train, val = split_holdout(allowed, 1024, 0.3)
    assert len(train) > 0
    assert len(val) > 0
    assert train.max() + 1024 <= val.min()  # every training window ends before validation starts
    assert set(val) <= set(allowed)
    assert set(train) <= set(allowed)
    assert len(val) == len(allowed[allowed >= val.min()])  # the tail of the allowed starts
    # no hold-out, or a trace too short to split: the same starts (and the caller knows)
    assert split_holdout(allowed, 1024, 0.0)[1] is allowed
    short = np.arange(0, 958, dtype=np.int64)
    got_train, got_val = split_holdout(short, 1024, 0.3)
    assert got_train is short
    assert got_val is short


def test_segment_hold_out_validates_in_every_stretch_long_enough_and_shares_no_job() -> None:
    # three stretches between evaluation windows: jobs [0, 3000), [4000, 5500), [6000, 21000)
    allowed = np.concatenate(
        [np.arange(0, 3000 - 1023), np.arange(4000, 5500 - 1023), np.arange(6000, 21000 - 1023)]
    ).astype(np.int64)
    train, val = split_segments(allowed, 1024, 0.3)
    train_jobs, val_jobs = covered(train, 1024), covered(val, 1024)
    for a, b in train_jobs:
        assert all(b <= c or d <= a for c, d in val_jobs)  # no job in both
    # the first stretch gives its last 1024 jobs (one window), the third its last 30 %
    assert val_jobs == [(1976, 3000), (16500, 21000)]
    # the middle stretch (1500 jobs) cannot hold two windows: it only trains
    assert (4000, 5500) in train_jobs
    assert train_jobs == [(0, 1976), (4000, 5500), (6000, 16500)]
    assert set(train) | set(val) <= set(allowed)
    assert split_segments(allowed, 1024, 0.0)[1] is allowed
    short = np.arange(0, 958, dtype=np.int64)
    assert split_segments(short, 1024, 0.3)[1] is short


def test_a_segment_held_out_card_lists_the_training_and_validation_jobs() -> None:
    allowed = np.concatenate([np.arange(0, 3000 - 1023), np.arange(4000, 21000 - 1023)])
    train, val = split_segments(allowed.astype(np.int64), 1024, 0.3)
    windows = Windows(["t.swf"], [21_000], [[(3000, 4000)]], [train], [val], [True])
    (row,) = windows.describe()
    assert row["training_job_ranges"] == [[0, 1976], [4000, 15900]]
    assert row["validation_job_ranges"] == [[1976, 3000], [15900, 21000]]
    assert row["excluded_job_ranges"] == [[3000, 4000]]


def test_without_a_hold_out_validation_draws_what_training_would() -> None:
    args = EsArgs(trace=(str(DATA / "lublin_256.swf.gz"),))
    windows = Windows.load(args)
    a = windows.sample(np.random.default_rng(3), 5)
    b = windows.sample_validation(np.random.default_rng(3), 5)
    assert a == b


def test_blending_with_sjf_spans_the_model_and_sjf() -> None:
    theta = initial_theta(SHAPES, 4) + np.random.default_rng(4).normal(0.0, 0.4, SHAPES.size)
    obs = np.random.default_rng(5).random((2, 30, NUM_FEATURES), dtype=np.float32)
    mask = np.ones((2, 30), dtype=np.bool_)
    model = NumpyRanker(SHAPES, theta).score(obs, mask)
    sjf = -obs[..., 1]  # the walltime feature, as SJF orders
    for alpha in (0.0, 0.3, 1.0):
        got = NumpyRanker(SHAPES, shrink_toward_sjf(SHAPES, theta, alpha)).score(obs, mask)
        assert np.allclose(got, alpha * model + (1.0 - alpha) * sjf, atol=1e-5)
    with pytest.raises(ValueError, match="alpha"):
        shrink_toward_sjf(SHAPES, theta, 1.5)


def test_a_held_out_card_lists_only_jobs_before_the_validation_part() -> None:
    allowed = np.arange(0, 20_000 - 1024 + 1, dtype=np.int64)
    allowed = allowed[(allowed + 1024 <= 3000) | (allowed >= 5000)]  # [3000, 5000) is evaluation
    train, val = split_holdout(allowed, 1024, 0.3)
    windows = Windows(["t.swf"], [20_000], [[(3000, 5000)]], [train], [val], [True])
    (row,) = windows.describe()
    assert row["validation_first_start"] == int(val[0])
    assert row["training_job_ranges"] == [[0, 3000], [5000, int(val[0])]]
    assert row["excluded_job_ranges"] == [[3000, 5000]]
