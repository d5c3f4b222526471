"""Every shipped GPU model's card says truthfully what it trained and validated on (issue 20:
train only on workloads from Philly weeks 0-9, validate on 10-11, never on weeks 12-15 nor on
the 8 Pollux evaluation workloads), and names the feature schema the encoder makes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.domains.gpu.encoding import FEATURE_NAMES, FEATURE_SCHEMA_VERSION, EncodingConstants
from app.domains.gpu.philly import TEST_WEEKS

ROOT = Path(__file__).resolve().parents[2]
CARDS = [
    p
    for p in sorted((ROOT / "models").glob("*/*/card.json"))
    if json.loads(p.read_text()).get("domain") == "gpu"
]


def test_the_gpu_model_is_shipped() -> None:
    assert "gpu-v1" in {p.parent.parent.name for p in CARDS}


@pytest.mark.parametrize("path", CARDS, ids=lambda p: f"{p.parent.parent.name}@{p.parent.name}")
def test_card_states_disjoint_training_and_validation_weeks(path: Path) -> None:
    card: dict[str, Any] = json.loads(path.read_text())
    assert card["name"] == path.parent.parent.name
    assert card["version"] == path.parent.name
    assert card["feature_schema_version"] == FEATURE_SCHEMA_VERSION
    assert card["features"] == list(FEATURE_NAMES)
    EncodingConstants.from_dict(card["encoding"])
    data = card["training"]["data"]
    train, val = set(data["training_weeks"]), set(data["validation_weeks"])
    assert train <= set(range(10))
    assert val <= {10, 11}
    assert not train & val
    assert not (train | val) & set(TEST_WEEKS)
    v = card["training"]["validation"]
    assert v["best_heuristic"] in v["heuristics_avg_jct_s"]
    assert v["policy_avg_jct_s"] > 0
    ratio = v["policy_avg_jct_s"] / v["heuristics_avg_jct_s"][v["best_heuristic"]]
    assert v["ratio_to_best_heuristic"] == pytest.approx(ratio)
