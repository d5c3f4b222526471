"""``kairos evaluate --domain gpu --policies`` with learned GPU policies: a model directory
path beside heuristic names, the shipped ``gpu-v1`` by name, and a refused model named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from app.domains.gpu.simulate import Semantics, simulate  # noqa: E402
from app.policy.gpu_onnx import load_gpu_policy  # noqa: E402
from kairos.cli import main as kairos_main  # noqa: E402
from sim.gpu_data import pollux_workload, rigid_pollux_workload, write_rigid  # noqa: E402
from training.gpu_ppo import Agent, build_onnx  # noqa: E402


def _model(tmp: Path, **card: object) -> Path:
    torch.manual_seed(0)
    d = tmp / "model"
    d.mkdir()
    (d / "policy.onnx").write_bytes(build_onnx(Agent()).SerializeToString())
    base = {
        "name": "gpu-probe",
        "version": "7",
        "domain": "gpu",
        "feature_schema_version": "kairos-gpu-v1",
        "encoding": {},
        "window": 64,
    }
    (d / "card.json").write_text(json.dumps({**base, **card}))
    return d


def _workload(tmp: Path) -> Path:
    path = tmp / "w1.csv"
    write_rigid(rigid_pollux_workload(1)[:20], path)
    return path


def _evaluate(tmp: Path, semantics: str, workload: Path, policies: str) -> int:
    return kairos_main(
        [
            "evaluate",
            "--domain",
            "gpu",
            "--semantics",
            semantics,
            "--workload",
            str(workload),
            "--nodes",
            "16",
            "--gpus-per-node",
            "4",
            "--policies",
            policies,
            "--json",
            str(tmp / "rows.json"),
        ]
    )


def test_a_model_directory_beside_heuristics(tmp_path: Path) -> None:
    model, wl = _model(tmp_path), _workload(tmp_path)
    assert _evaluate(tmp_path, "kairos", wl, f"tiresias-2dlas,{model}") == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["policy"] for r in rows] == ["tiresias-2dlas", str(model)]
    # the row is the simulator's run of the same learned policy
    want = simulate(
        rigid_pollux_workload(1)[:20],
        load_gpu_policy(model),
        Semantics.KAIROS,
        nodes=16,
        gpus_per_node=4,
    )
    assert rows[1]["jcts_s"] == pytest.approx(want.jcts)


@pytest.mark.slow
def test_the_shipped_model_by_name_under_pollux_compat(tmp_path: Path) -> None:
    assert _evaluate(tmp_path, "pollux-compat", pollux_workload(3), "gpu-v1") == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert rows[0]["policy"] == "gpu-v1"
    assert len(rows[0]["jcts_s"]) == 160


def test_a_refused_model_is_an_error_naming_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, wl = _model(tmp_path, feature_schema_version="kairos-gpu-v0"), _workload(tmp_path)
    with pytest.raises(SystemExit) as info:
        _evaluate(tmp_path, "kairos", wl, str(model))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "schema_version_mismatch" in err
    assert str(model) in err
    with pytest.raises(SystemExit):
        _evaluate(tmp_path, "kairos", wl, "no-such-gpu-model")
    assert "unknown under kairos: no-such-gpu-model" in capsys.readouterr().err
