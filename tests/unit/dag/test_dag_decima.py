"""V5: Decima's shipped weights in the dense numpy forward pass and its ONNX export, against the
port's per-generation reference (torch), and the learned policy in the simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from app.domains.dag.decima import (
    MASKED_LOGIT,
    DecimaObs,
    DecimaPolicy,
    DecimaWeights,
    decima_forward,
    encode,
)
from app.domains.dag.heuristics import get_heuristic
from app.domains.dag.policy import Action, RoundView
from app.domains.dag.simulate import SimConfig, run_episode
from app.domains.dag.tpch import TpchLibrary
from sim.dag_data import DEFAULT_DECIMA, load_decima, load_tpch
from training.dag_export import build_onnx, convert, load_state_dict, reference_forward

MODEL_PT = DEFAULT_DECIMA.parent / "spark_sched_sim_decima_model.pt"


@pytest.fixture(scope="module")
def lib() -> TpchLibrary:
    return load_tpch()


@pytest.fixture(scope="module")
def weights() -> DecimaWeights:
    return load_decima()


class Recorder:
    name = "recorder"

    def __init__(self, inner: DecimaPolicy) -> None:
        self.inner = inner
        self.obs: list[DecimaObs] = []

    def reset(self) -> None:
        self.inner.reset()

    def choose(self, view: RoundView) -> Action | None:
        self.obs.append(encode(view))
        return self.inner.choose(view)


@pytest.fixture(scope="module")
def recorded(lib: TpchLibrary, weights: DecimaWeights) -> list[DecimaObs]:
    rec = Recorder(DecimaPolicy(weights, mode="sample", seed=7))
    run_episode(
        lib,
        SimConfig("spark-sched-sim-compat", 10),
        rec,
        seed=1234,
        num_init=3,
        num_stream=5,
        interval_ms=25_000,
    )
    # every 5th observation keeps the test short; heights and sizes vary along the episode
    obs = rec.obs[::8][:40]
    assert max(o.height for o in obs) >= 4
    assert max(o.stage_mask.shape[0] for o in obs) >= 3
    return obs


def test_shipped_npz_is_the_converted_state_dict(tmp_path: Path, weights: DecimaWeights) -> None:
    arrays = convert(MODEL_PT, tmp_path / "w.npz")
    assert len(arrays) == 42
    assert sum(a.size for a in arrays.values()) == 20_802
    for k, a in arrays.items():
        np.testing.assert_array_equal(weights.tensors[k], a)


def test_dense_forward_equals_the_ports_reference(
    recorded: list[DecimaObs], weights: DecimaWeights
) -> None:
    sd = load_state_dict(MODEL_PT)
    for obs in recorded:
        s1, e1 = decima_forward(weights, obs)
        s2, e2 = reference_forward(sd, obs)
        np.testing.assert_allclose(s1, s2, atol=1e-5, rtol=0)
        np.testing.assert_allclose(e1, e2, atol=1e-5, rtol=0)


def test_onnx_export_equals_the_dense_forward(
    recorded: list[DecimaObs], weights: DecimaWeights
) -> None:
    model = build_onnx(dict(weights.tensors), k=12)
    sess = ort.InferenceSession(model.SerializeToString())
    for obs in recorded:
        feeds = {
            "x": obs.x,
            "adj": obs.adj,
            "stage_mask": obs.stage_mask,
            "select_mask": obs.select_mask,
            "job_mask": obs.job_mask,
            "exec_mask": obs.exec_mask,
        }
        stage_logits, exec_logits = sess.run(None, feeds)
        s, e = decima_forward(weights, obs)
        np.testing.assert_allclose(stage_logits, s, atol=1e-5, rtol=0)
        np.testing.assert_allclose(exec_logits, e, atol=1e-5, rtol=0)


def test_iterations_must_cover_the_height(
    recorded: list[DecimaObs], weights: DecimaWeights
) -> None:
    obs = max(recorded, key=lambda o: o.height)
    exact, _ = decima_forward(weights, obs)
    more, _ = decima_forward(weights, obs, iterations=obs.height + 4)
    none, _ = decima_forward(weights, obs, iterations=0)
    sel = obs.select_mask
    np.testing.assert_allclose(more[sel], exact[sel], atol=1e-6)
    assert np.abs(none[sel] - exact[sel]).max() > 1e-3


def test_masks(recorded: list[DecimaObs], weights: DecimaWeights) -> None:
    for obs in recorded:
        s, e = decima_forward(weights, obs)
        assert np.all(s[~obs.select_mask] == np.float32(MASKED_LOGIT))
        assert np.all(e[~obs.exec_mask] == np.float32(MASKED_LOGIT))
        assert np.all(s[obs.select_mask] > -10)


def test_argmax_decima_beats_fair_under_overload(lib: TpchLibrary, weights: DecimaWeights) -> None:
    cfg = SimConfig("spark-sched-sim-compat", 10)
    kw = {"seed": 1234, "num_init": 1, "num_stream": 14, "interval_ms": 25_000.0}
    argmax = run_episode(lib, cfg, DecimaPolicy(weights, mode="argmax"), **kw)  # type: ignore[arg-type]
    fair = run_episode(lib, cfg, get_heuristic("fair"), **kw)  # type: ignore[arg-type]
    assert float(np.mean(argmax.jct_ms)) < 0.9 * float(np.mean(fair.jct_ms))


@pytest.mark.slow
def test_argmax_decima_reproduces_the_shipped_models_figure(
    lib: TpchLibrary, weights: DecimaWeights
) -> None:
    """Spec 5.2(b): 10 executors, 50 jobs, seed 1234: argmax 546.4 s, Fair 988.4 s."""
    cfg = SimConfig("spark-sched-sim-compat", 10)
    kw = {"seed": 1234, "num_init": 1, "num_stream": 49, "interval_ms": 25_000.0}
    argmax = run_episode(lib, cfg, DecimaPolicy(weights, mode="argmax"), **kw)  # type: ignore[arg-type]
    fair = run_episode(lib, cfg, get_heuristic("fair"), **kw)  # type: ignore[arg-type]
    jct = float(np.mean(argmax.jct_ms)) / 1000
    assert jct == pytest.approx(546.4, rel=0.1)
    assert jct < 0.7 * float(np.mean(fair.jct_ms)) / 1000


def test_sampling_is_seeded(lib: TpchLibrary, weights: DecimaWeights) -> None:
    cfg = SimConfig("kairos", 10)
    kw = {"seed": 3, "num_init": 2, "num_stream": 3, "interval_ms": 20_000.0}
    a = run_episode(lib, cfg, DecimaPolicy(weights, seed=1), **kw)  # type: ignore[arg-type]
    b = run_episode(lib, cfg, DecimaPolicy(weights, seed=1), **kw)  # type: ignore[arg-type]
    np.testing.assert_array_equal(a.completion_ms, b.completion_ms)
    assert not np.isnan(a.completion_ms).any()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("executors", "jobs", "seeds", "mode", "target", "half"),
    [
        (10, 50, range(1234, 1244), "argmax", 475.7, 82),
        (10, 50, range(1234, 1244), "sample", 550.6, 120),
        (50, 200, range(10), "sample", 53.8, 5.1),
    ],
)
def test_v5_decima_inside_the_published_interval(
    lib: TpchLibrary,
    weights: DecimaWeights,
    executors: int,
    jobs: int,
    seeds: range,
    mode: str,
    target: float,
    half: float,
) -> None:
    vals = []
    for k in seeds:
        pol = DecimaPolicy(weights, mode=mode, seed=k)  # type: ignore[arg-type]
        res = run_episode(
            lib,
            SimConfig("spark-sched-sim-compat", executors),
            pol,
            seed=k,
            num_init=1,
            num_stream=jobs - 1,
            interval_ms=25_000,
        )
        vals.append(float(np.mean(res.jct_ms)) / 1000)
    assert target - half <= float(np.mean(vals)) <= target + half
