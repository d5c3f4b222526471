"""``kairos tune``: the command line over :func:`app.tuning.procedure.tune`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kairos.cli import COMMANDS
from kairos.cli import main as kairos_main

TRACE = str(Path(__file__).resolve().parents[3] / "data" / "lublin_256.swf.gz")


def test_tune_is_a_kairos_command() -> None:
    assert COMMANDS["tune"][0] == "kairos.tune"


@pytest.mark.parametrize(
    ("until", "message"),
    [("20000", "--until-job must be in [1, 10000]"), ("1500", "too little history: 1500 jobs")],
)
def test_a_history_it_cannot_tune_is_an_error_naming_why(
    until: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["tune", "--trace", TRACE, "--until-job", until, "--backfill", "easy", "--out", str(out)]
    assert kairos_main(argv) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_tune_prints_the_table_and_records_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "site"
    argv = ["tune", "--trace", TRACE, "--until-job", "3000", "--backfill", "none"]
    argv += ["--window-length", "256", "--time-budget-s", "120", "--workers", "1"]
    argv += ["--out", str(out)]
    assert kairos_main(argv) == 0
    printed = capsys.readouterr().out
    assert "candidate" in printed
    assert "sjf" in printed
    assert f"written to {out}" in printed
    card = json.loads((out / "card.json").read_text())
    assert card["tuning"]["command"].startswith("kairos tune --trace")
    assert card["tuning"]["validation_job_range"] == [2100, 3000]
    assert card["tuning"]["winner"] in printed
