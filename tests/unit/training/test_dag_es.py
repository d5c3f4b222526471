"""training/dag_es.py: only the two heads' output layers move, the flat vector round-trips, and a
short run writes a loadable model whose exported weights are the kept checkpoint's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

from app.policy.dag_onnx import read_dag_model
from sim.dag_data import DEFAULT_DECIMA
from training.dag_es import TUNED, flatten, main, with_flat
from training.dag_export import weights_from_onnx
from training.dag_ppo import _load_init


def test_the_flat_vector_is_the_two_output_layers_and_round_trips() -> None:
    base = _load_init(DEFAULT_DECIMA)
    flat = flatten(base)
    assert flat.size == sum(base[k].size for k in TUNED) == 130
    moved = with_flat(base, flat + 1.0)
    for k, v in base.items():
        if k in TUNED:
            np.testing.assert_allclose(moved[k], v + 1.0, rtol=1e-6)
        else:
            assert moved[k] is v
    np.testing.assert_allclose(flatten(with_flat(base, flat)), flat, rtol=1e-7)


def test_a_short_run_writes_a_loadable_model(tmp_path: Path) -> None:
    out = tmp_path / "dag-es-test" / "1"
    code = main(
        [
            "--out", str(out), "--generations", "2", "--pairs", "1", "--batch", "1",
            "--jobs", "4", "--executors", "5", "--val-seeds", "900", "--val-every", "1",
            "--workers", "1", "--train-seed-base", "1000", "--sigma", "0.5", "--lr", "0.5",
        ]
    )  # fmt: skip
    assert code == 0
    card = json.loads((out / "card.json").read_text())
    training = card["training"]
    assert training["algorithm"].startswith("OpenAI-ES (training/dag_es.py)")
    assert training["command"].startswith("python -m training.dag_es ")
    assert training["iterations_run"] == 2
    assert [e["iteration"] for e in training["log"]] == [0, 1, 2]
    assert card["seeds"]["training_sequences"] == [1000, 1001]
    assert card["validation"]["ratio_to_fair"] == min(e["val_ratio"] for e in training["log"])
    model = read_dag_model(out)
    assert model.mode == "sample"
    exported = weights_from_onnx(onnx.load(str(out / "policy.onnx")))
    base = _load_init(DEFAULT_DECIMA)
    for k, v in base.items():
        if k not in TUNED:
            np.testing.assert_allclose(exported[k], v, atol=1e-7)


def test_validation_seeds_inside_the_training_range_are_refused(tmp_path: Path) -> None:
    code = main(
        [
            "--out", str(tmp_path / "m" / "1"), "--generations", "2", "--batch", "2",
            "--train-seed-base", "10", "--val-seeds", "12",
        ]
    )  # fmt: skip
    assert code == 2
