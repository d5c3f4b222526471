"""``kairos evaluate`` runs ONNX policies from the models directory next to the heuristics.

A tiny kernel model (tests/fixtures/onnx_models.py) is written to a temporary models directory
named by ``KAIROS_MODELS_DIR``; the ``kairos`` dispatcher registers its policy loader, so the
simulator (kairos semantics) drives the service's ``OnnxPolicy``
through ``app.domains.hpc.decision``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.metrics import avg_bounded_slowdown
from app.domains.hpc.rlscheduler import sample_starts
from app.domains.hpc.simulate import simulate_kairos
from app.domains.hpc.swf import load_swf
from app.domains.hpc.types import Backfill, ClusterState, Decision
from app.policy.onnx_policy import OnnxPolicy
from kairos.cli import main
from kairos.policy_loader import load_policy
from sim import evaluate as ev
from tests.fixtures.onnx_models import card, kernel_model, write_model

DATA = Path(__file__).resolve().parents[3] / "data"
LUBLIN1 = DATA / "lublin_256.swf.gz"
LENGTH = 64


@pytest.fixture
def models_dir(tmp_path, monkeypatch):
    directory = tmp_path / "models"
    write_model(directory, "hpc-kernel", "1", kernel_model(seed=1))
    write_model(directory, "hpc-kernel", "2", kernel_model(seed=2))
    broken = card(name="broken", version="1", feature_schema_version="0-not-this-encoder")
    write_model(directory, "broken", "1", kernel_model(seed=3), broken)
    monkeypatch.setenv("KAIROS_MODELS_DIR", str(directory))
    monkeypatch.setattr(ev, "_loaders", [])  # only what kairos.cli registers
    return directory


def _evaluate(tmp_path: Path, policies: str, *extra: str) -> tuple[int, list[dict[str, object]]]:
    out = tmp_path / "rows.json"
    code = main(
        ["evaluate", "--trace", str(LUBLIN1), "--policies", policies, "--sequences", "1",
         "--length", str(LENGTH), "--backfill", "easy", "--seed", "1", "--json", str(out),
         *extra]
    )  # fmt: skip
    rows = json.loads(out.read_text()) if out.exists() else []
    return code, rows


def test_evaluate_runs_heuristics_and_an_onnx_policy(models_dir, tmp_path, capsys):
    code, rows = _evaluate(tmp_path, "fcfs,hpc-kernel,hpc-kernel@1")
    assert code == 0, capsys.readouterr().err
    assert [r["policy"] for r in rows] == ["fcfs", "hpc-kernel", "hpc-kernel@1"]
    for row in rows:
        assert row["semantics"] == "kairos"
        assert row["backfill"] == "easy"
        assert row["length"] == LENGTH
        assert len(row["per_sequence_bsld"]) == 1
        assert math.isfinite(row["bsld"])
        assert row["bsld"] >= 1.0

    # the rows are what the service's OnnxPolicy decides in the simulator: every decision that
    # started something names the model (newest version for a bare name), and the bsld agrees
    trace = load_swf(LUBLIN1)
    (start,) = sample_starts(trace.n_jobs, LENGTH, 1, seed=1)
    for row, version in ((rows[1], "2"), (rows[2], "1")):
        policy = OnnxPolicy.load(models_dir / "hpc-kernel" / version)
        refs: set[tuple[str, str, str]] = set()

        def seen(_: ClusterState, decision: Decision, into: set[tuple[str, str, str]] = refs):
            if decision.allocations:
                into.add((decision.policy.name, decision.policy.version, decision.policy.kind))

        res = simulate_kairos(
            trace, start, LENGTH, policy, config=DecisionConfig(backfill=Backfill.EASY),
            pooled=True, on_decision=seen,
        )  # fmt: skip
        assert refs == {("hpc-kernel", version, "onnx")}
        assert row["per_sequence_bsld"] == [avg_bounded_slowdown(res)]


def test_loader_resolves_versions_and_misses(models_dir):
    newest = load_policy("hpc-kernel")
    assert newest is not None
    assert newest.ref.version == "2"
    first = load_policy("hpc-kernel@1")
    assert first is not None
    assert first.ref.version == "1"
    assert load_policy("hpc-kernel") is newest  # one session per process and model
    assert load_policy("hpc-kernel@9") is None
    assert load_policy("no-such-model") is None


def test_a_refused_model_is_a_clear_error(models_dir, tmp_path, capsys):
    code, rows = _evaluate(tmp_path, "fcfs,broken")
    assert code == 2
    assert rows == []
    err = capsys.readouterr().err
    assert "broken@1" in err
    assert "schema_version_mismatch" in err


def test_an_unknown_name_names_the_registered_loader(models_dir, tmp_path, capsys):
    code, _ = _evaluate(tmp_path, "fcfs,no-such-model")
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown policy 'no-such-model'" in err
    assert "no registered policy loader knows it" in err
