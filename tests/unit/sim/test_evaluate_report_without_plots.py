"""``kairos evaluate --report`` in the environment ``make run`` builds (no ``sim`` extra, so no
matplotlib), and ``--report`` without ``--json`` (issue 24, item 2)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sim.cli import main

LUBLIN1 = str(Path(__file__).resolve().parents[3] / "data" / "lublin_256.swf.gz")
ARGS = ["evaluate", "--trace", LUBLIN1, "--policies", "fcfs,sjf", "--backfill", "easy",
        "--sequences", "1", "--length", "32", "--seed", "1"]  # fmt: skip


def test_a_report_without_matplotlib_is_the_tables_and_says_how_to_get_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    report = tmp_path / "report"
    assert main([*ARGS, "--json", str(tmp_path / "rows.json"), "--report", str(report)]) == 0
    text = (report / "report.md").read_text()
    assert "| fcfs |" in text
    assert "pip install -e '.[sim]'" in text
    assert ".png" not in text
    assert sorted(p.name for p in report.iterdir()) == ["report.md"]
    err = capsys.readouterr().err
    assert "plots skipped: matplotlib is not installed; install the sim extra" in err


def test_report_alone_needs_no_json(tmp_path: Path) -> None:
    report = tmp_path / "report"
    assert main([*ARGS, "--report", str(report)]) == 0
    assert (report / "report.md").is_file()
    assert list(tmp_path.iterdir()) == [report]


def test_neither_json_nor_report_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(ARGS)
    assert exited.value.code == 2
    assert "give --json FILE (the result rows), --report DIR" in capsys.readouterr().err
