"""``kairos evaluate --domain dag --policies`` with learned DAG models: by name (the shipped
``dag-v1``), ``name@version`` and model directory; a bad directory is an error naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kairos.cli import main

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "models" / "dag-v1" / "1"
SMALL = [
    "evaluate", "--domain", "dag", "--semantics", "kairos", "--tpch", "--jobs", "4",
    "--arrival-interval-s", "25", "--executors", "5", "--seeds", "3-4",
]  # fmt: skip


def test_named_model_and_model_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows.json"
    code = main([*SMALL, "--policies", f"fair,dag-v1,dag-v1@1,{SHIPPED}", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    rows = {r["policy"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"fair", "dag-v1", "dag-v1@1", str(SHIPPED)}
    # the same model, the same episodes (sampling seeded by the episode seed)
    assert rows["dag-v1"]["per_seed_avg_jct_s"] == rows[str(SHIPPED)]["per_seed_avg_jct_s"]
    assert rows["dag-v1"]["per_seed_avg_jct_s"] == rows["dag-v1@1"]["per_seed_avg_jct_s"]
    assert "ratio_to_fair" in rows["dag-v1"]


def test_a_refused_directory_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(SHIPPED, bad)
    card = json.loads((bad / "card.json").read_text())
    card["decoding"] = {"mode": "beam"}
    (bad / "card.json").write_text(json.dumps(card))
    code = main([*SMALL, "--policies", f"fair,{bad}", "--json", str(tmp_path / "r.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "invalid_card" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*SMALL, "--policies", str(empty), "--json", str(tmp_path / "r.json")]) == 2
    assert str(empty) in capsys.readouterr().err


def test_an_unknown_name_is_still_an_unknown_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*SMALL, "--policies", "fair,no-such-model", "--json", str(tmp_path / "r.json")])
    assert code == 2
    assert "no-such-model" in capsys.readouterr().err
