"""``kairos evaluate --policies`` takes a model directory path (``policy.onnx`` + ``card.json``)
beside names, validated as the service validates a model, and ``--start-job`` with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kairos.cli import main
from kairos.policy_loader import load_policy
from sim import evaluate as ev
from tests.fixtures.onnx_models import card, kernel_model, write_model

ROOT = Path(__file__).resolve().parents[3]
LUBLIN1 = ROOT / "data" / "lublin_256.swf.gz"
SHIPPED = ROOT / "models" / "hpc-kernel" / "3"
LENGTH = 64


@pytest.fixture
def models_dir(tmp_path, monkeypatch):
    directory = tmp_path / "models"
    write_model(directory, "hpc-kernel", "1", kernel_model(seed=1))
    write_model(directory, "hpc-kernel", "2", kernel_model(seed=2))
    monkeypatch.setenv("KAIROS_MODELS_DIR", str(directory))
    monkeypatch.setattr(ev, "_loaders", [])  # only what kairos.cli registers
    return directory


def _evaluate(
    tmp_path: Path, policies: str, *extra: str, sequences: int = 2
) -> tuple[int, list[dict[str, object]]]:
    out = tmp_path / "rows.json"
    out.unlink(missing_ok=True)
    code = main(
        ["evaluate", "--trace", str(LUBLIN1), "--policies", policies, "--sequences",
         str(sequences), "--length", str(LENGTH), "--backfill", "easy", "--seed", "2",
         "--json", str(out), *extra]
    )  # fmt: skip
    return code, json.loads(out.read_text()) if out.exists() else []


def _bslds(rows: list[dict[str, object]]) -> list[object]:
    return [r["per_sequence_bsld"] for r in rows]


def test_a_model_directory_gives_the_results_of_its_name(models_dir, tmp_path, capsys):
    path = models_dir / "hpc-kernel" / "1"
    code, rows = _evaluate(tmp_path, f"hpc-kernel@1,{path},hpc-kernel@2")
    assert code == 0, capsys.readouterr().err
    assert [r["policy"] for r in rows] == ["hpc-kernel@1", str(path), "hpc-kernel@2"]
    assert rows[1]["per_sequence_bsld"] == rows[0]["per_sequence_bsld"]
    assert rows[1]["per_sequence_bsld"] != rows[2]["per_sequence_bsld"]


def test_a_model_directory_anywhere_is_named_by_its_card(models_dir, tmp_path, monkeypatch):
    # a directory outside the models tree, as `kairos tune --out DIR` writes one
    tuned = tmp_path / "site" / "tuned"
    shutil.copytree(models_dir / "hpc-kernel" / "2", tuned)
    policy = load_policy(str(tuned))
    assert policy is not None
    assert (policy.ref.name, policy.ref.version) == ("hpc-kernel", "2")
    assert load_policy(str(tuned)) is policy  # one session per process and directory
    code, rows = _evaluate(tmp_path, f"hpc-kernel@2,{tuned}", "--start-job", "5000")
    assert code == 0
    assert rows[1]["per_sequence_bsld"] == rows[0]["per_sequence_bsld"]
    assert {r["start_job"] for r in rows} == {5000}
    # a bare relative directory that names no model is a path too
    monkeypatch.chdir(tmp_path / "site")
    code, relative = _evaluate(tmp_path, "tuned", "--start-job", "5000")
    assert code == 0
    assert _bslds(relative) == [rows[1]["per_sequence_bsld"]]


def test_the_shipped_model_directory_matches_its_name(tmp_path, monkeypatch):
    monkeypatch.delenv("KAIROS_MODELS_DIR", raising=False)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(ev, "_loaders", [])
    code, rows = _evaluate(
        tmp_path, f"hpc-kernel@3,{SHIPPED},models/hpc-kernel/3", "--workers", "2", sequences=1
    )
    assert code == 0
    assert _bslds(rows)[0] == _bslds(rows)[1] == _bslds(rows)[2]


@pytest.mark.parametrize("missing", ["policy.onnx", "card.json", "directory"])
def test_a_path_that_is_no_model_directory_is_a_clear_error(models_dir, tmp_path, capsys, missing):
    path = tmp_path / "candidate"
    if missing != "directory":
        shutil.copytree(models_dir / "hpc-kernel" / "1", path)
        (path / missing).unlink()
    code, rows = _evaluate(tmp_path, f"fcfs,{path}")
    assert code == 2
    assert rows == []
    err = capsys.readouterr().err
    assert str(path) in err
    assert "Traceback" not in err
    if missing == "directory":
        assert "no such model directory" in err
    else:
        assert f"lacks {missing}" in err


def test_a_refused_model_directory_names_the_path_and_the_reason(models_dir, tmp_path, capsys):
    body = card(name="broken", version="1", feature_schema_version="0-not-this-encoder")
    path = write_model(tmp_path / "elsewhere", "broken", "1", kernel_model(seed=3), body)
    code, _ = _evaluate(tmp_path, f"fcfs,{path}")
    assert code == 2
    err = capsys.readouterr().err
    assert str(path) in err
    assert "schema_version_mismatch" in err
    # a card nested deeper than the service accepts is refused as an upload would be
    deep = tmp_path / "deep"
    shutil.copytree(models_dir / "hpc-kernel" / "1", deep)
    nested: object = 1
    for _ in range(40):
        nested = [nested]
    (deep / "card.json").write_text(json.dumps({**card(), "metrics": nested}))
    code, _ = _evaluate(tmp_path, f"fcfs,{deep}")
    assert code == 2
    err = capsys.readouterr().err
    assert str(deep) in err
    assert "invalid_card" in err
