"""philly-rigid / kairos event semantics and ``kairos evaluate --domain gpu``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.domains.gpu.metrics import summary
from app.domains.gpu.simulate import Semantics, SimJob, simulate
from sim.cli import main as cli_main
from sim.gpu_data import pollux_workload


def _heavy_tail() -> list[SimJob]:
    jobs = [SimJob("big", 0.0, 8, 8, duration_s=50_000.0)]
    jobs += [SimJob(f"s{i}", 10.0 + i, 1, 1, duration_s=600.0) for i in range(20)]
    return jobs


def test_philly_rigid_2dlas_beats_fifo_on_a_heavy_tail() -> None:
    fifo = summary(
        simulate(_heavy_tail(), "fifo", Semantics.PHILLY_RIGID, nodes=1, gpus_per_node=8)
    )
    las = summary(
        simulate(_heavy_tail(), "tiresias-2dlas", Semantics.PHILLY_RIGID, nodes=1, gpus_per_node=8)
    )
    assert las["avg_jct_s"] < fifo["avg_jct_s"] / 3
    assert las["preemptions"] >= 1
    assert fifo["preemptions"] == 0


def test_philly_rigid_single_job_runs_its_duration_plus_restart() -> None:
    res = simulate([SimJob("a", 5.0, 2, 2, duration_s=100.0)], "fifo", Semantics.PHILLY_RIGID)
    assert res.jcts == [130.0]
    assert summary(res)["makespan_s"] == 130.0


def test_kairos_charges_locality_for_a_spread_gang() -> None:
    # 2 nodes x 4: a and b hold 3 GPUs of one node each, so c's 2 GPUs span 2 nodes (k_min 1)
    jobs = [
        SimJob("a", 0.0, 3, 3, duration_s=10_000.0),
        SimJob("b", 0.0, 3, 3, duration_s=10_000.0),
        SimJob("c", 1.0, 2, 2, duration_s=1000.0),
    ]
    k = simulate(jobs, "fifo", Semantics.KAIROS, nodes=2, gpus_per_node=4)
    p = simulate(jobs, "fifo", Semantics.PHILLY_RIGID, nodes=2, gpus_per_node=4)
    assert p.jcts[2] == 30.0 + 1000.0  # starts at its arrival: restart, then its duration
    assert k.jcts[2] == pytest.approx(30.0 + 1000.0 * 1.1)  # rate 1 / (1 + 0.1)


def test_artifact_policies_are_pollux_compat_only() -> None:
    with pytest.raises(ValueError, match="pollux-compat"):
        simulate(_heavy_tail(), "tiresias", Semantics.PHILLY_RIGID)


def test_cli_rigid_rows_and_report(tmp_path: Path) -> None:
    wl = tmp_path / "week.csv"
    wl.write_text(
        "name,time,num_gpus,duration,user\n"
        + "\n".join(f"j{i},{i * 30},{1 + i % 4},{300 + 97 * i},u{i % 2}" for i in range(30))
        + "\n"
    )
    out = tmp_path / "rows.json"
    rc = cli_main(
        [
            "evaluate",
            "--domain",
            "gpu",
            "--semantics",
            "philly-rigid",
            "--workload",
            str(wl),
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--policies",
            "fifo,drf,tiresias-2dlas",
            "--json",
            str(out),
            "--report",
            str(tmp_path / "rep"),
        ]
    )
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [r["policy"] for r in rows] == ["fifo", "drf", "tiresias-2dlas"]
    keys = {
        "workload",
        "semantics",
        "policy",
        "avg_jct_s",
        "p50_jct_s",
        "p99_jct_s",
        "makespan_s",
        "gpu_utilization",
        "preemptions",
        "jcts_s",
    }
    assert all(set(r) == keys for r in rows)
    assert all(len(r["jcts_s"]) == 30 and r["workload"] == "week" for r in rows)
    assert abs(sum(rows[0]["jcts_s"]) / 30 - rows[0]["avg_jct_s"]) < 1e-9
    assert "week" in (tmp_path / "rep" / "report.md").read_text()


def test_cli_pollux_workload_under_pollux_compat(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    rc = cli_main(
        [
            "evaluate",
            "--domain",
            "gpu",
            "--semantics",
            "pollux-compat",
            "--workload",
            str(pollux_workload(5)),
            "--policies",
            "tiresias",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    (row,) = json.loads(out.read_text())
    assert round(row["avg_jct_s"], 5) == 3501.0125


def test_cli_rejects_a_format_mismatch_and_unknown_policy(tmp_path: Path) -> None:
    rc = cli_main(
        [
            "evaluate",
            "--domain",
            "gpu",
            "--semantics",
            "philly-rigid",
            "--workload",
            str(pollux_workload(1)),
            "--policies",
            "fifo",
            "--json",
            str(tmp_path / "x.json"),
        ]
    )
    assert rc == 2
    with pytest.raises(SystemExit):
        cli_main(
            [
                "evaluate",
                "--domain",
                "gpu",
                "--semantics",
                "philly-rigid",
                "--workload",
                str(pollux_workload(1)),
                "--policies",
                "tiresias",
                "--json",
                str(tmp_path / "x.json"),
            ]
        )


def test_a_job_larger_than_the_cluster_is_refused_instead_of_never_ending() -> None:
    big = SimJob(id="big", arrival=0.0, min_gpus=65, max_gpus=65, duration_s=10.0)
    with pytest.raises(ValueError, match="'big' needs 65 GPUs; the cluster has 64"):
        simulate([big], "fifo", Semantics.PHILLY_RIGID, nodes=8, gpus_per_node=8)
