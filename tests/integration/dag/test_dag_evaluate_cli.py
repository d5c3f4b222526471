"""``kairos evaluate --domain dag``: the JSON rows of issue 22 and the option errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kairos.cli import main as kairos_main
from sim.dag_evaluate import parse_seeds

ROW_KEYS = {
    "semantics",
    "policy",
    "seed",
    "executors",
    "jobs",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "makespan_s",
    "executor_utilization",
    "per_seed_avg_jct_s",
}


def test_rows_for_each_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rows.json"
    rc = kairos_main(
        [
            "evaluate",
            "--domain",
            "dag",
            "--semantics",
            "kairos",
            "--tpch",
            "--jobs",
            "4",
            "--arrival-interval-s",
            "10",
            "--executors",
            "10",
            "--policies",
            "fair,sjf_cp,weighted_fair(-1)",
            "--seeds",
            "0-1",
            "--json",
            str(out),
            "--report",
            str(tmp_path / "rep"),
        ]
    )
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [r["policy"] for r in rows] == ["fair", "sjf_cp", "weighted_fair(-1)"]
    for r in rows:
        assert set(r) >= ROW_KEYS
        assert r["semantics"] == "kairos"
        assert (r["executors"], r["jobs"], r["seed"]) == (10, 4, "0-1")
        assert len(r["per_seed_avg_jct_s"]) == 2
        assert r["avg_jct_s"] == pytest.approx(sum(r["per_seed_avg_jct_s"]) / 2)
        assert 0 < r["executor_utilization"] <= 1
        assert r["p50_jct_s"] <= r["p95_jct_s"] <= r["makespan_s"] + 1e-9
    assert rows[0]["ratio_to_fair"] == pytest.approx(1.0)
    assert "| fair |" in (tmp_path / "rep" / "report.md").read_text()
    assert "sjf_cp" in capsys.readouterr().out


def test_batch_mode_puts_every_job_at_zero(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    argv = [
        "evaluate",
        "--domain=dag",
        "--semantics",
        "decima-compat",
        "--tpch",
        "--jobs",
        "3",
        "--arrival-interval-s",
        "0",
        "--executors",
        "20",
        "--policies",
        "fifo_static",
        "--seeds",
        "0",
        "--json",
        str(out),
    ]
    assert kairos_main(argv) == 0
    row = json.loads(out.read_text())[0]
    # all three jobs arrive at t = 0, so the makespan is the last completion
    assert row["makespan_s"] == pytest.approx(row["p95_jct_s"], rel=0.2)


def test_unknown_policy_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "evaluate",
        "--domain",
        "dag",
        "--tpch",
        "--executors",
        "5",
        "--policies",
        "fair,nope",
        "--json",
        str(tmp_path / "x.json"),
    ]
    assert kairos_main(argv) == 2
    assert "unknown heuristic 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra",
    [
        ["--executors", "0"],
        ["--executors", "5", "--seeds", "3-1"],
        ["--executors", "5", "--jobs", "0"],
    ],
)
def test_bad_options_are_usage_errors(tmp_path: Path, extra: list[str]) -> None:
    argv = ["evaluate", "--domain", "dag", "--tpch", "--policies", "fair", *extra]
    argv += ["--json", str(tmp_path / "x.json")]
    with pytest.raises(SystemExit) as exc:
        kairos_main(argv)
    assert exc.value.code == 2


def test_workload_is_required(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        kairos_main(["evaluate", "--domain", "dag", "--executors", "5", "--policies", "fair"])


def test_parse_seeds() -> None:
    assert parse_seeds("0-3") == (0, 1, 2, 3)
    assert parse_seeds("5") == (5,)
    assert parse_seeds("1,4,7") == (1, 4, 7)
    with pytest.raises(ValueError, match="empty"):
        parse_seeds("4-2")
