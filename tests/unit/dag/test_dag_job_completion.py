"""A job's completion under the ``kairos`` semantics starts a round over the global pool, so the
executors it frees reach the jobs still running (the compat semantics keep the repositories'
rule: they wait for the next arrival); the public runner; ``--jobs`` with ``--workflows``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.domains.dag.heuristics import get_heuristic
from app.domains.dag.simulate import JobArrival, Semantics, SimConfig, run_jobs
from app.domains.dag.workflow import (
    WorkflowDag,
    WorkflowTask,
    run_workflow_episode,
    workflow_arrivals,
    workflow_dag,
)
from sim.dag_evaluate import main as dag_main
from sim.dag_workflows import WORKFLOW_DIR


def two_jobs() -> list[WorkflowDag]:
    """ "short": two parallel 1 s tasks then a 1 s sink; "wide": eight independent 10 s tasks."""
    short = workflow_dag(
        "short",
        [WorkflowTask("a1", 1.0), WorkflowTask("a2", 1.0), WorkflowTask("s", 1.0, ("a1", "a2"))],
    )
    wide = workflow_dag("wide", [WorkflowTask(f"w{k}", 10.0) for k in range(8)])
    return [short, wide]


def jct_s(semantics: Semantics, policy: str) -> dict[str, float]:
    """Both jobs at t = 0 on 4 executors: the JCT of each, by name."""
    dags = two_jobs()
    res = run_workflow_episode(
        dags, SimConfig(semantics, 4), get_heuristic(policy), seed=0, interval_ms=0.0
    )
    names = [a.dag.name for a in workflow_arrivals(dags, 0, 0.0)]
    return {n: float(j) / 1000.0 for n, j in zip(names, res.jct_ms.tolist(), strict=True)}


@pytest.mark.parametrize("policy", ["fair", "weighted_fair(-1)", "fifo", "sjf_cp"])
def test_the_executors_freed_by_a_finished_job_go_to_the_job_left(policy: str) -> None:
    # "short" runs a1, a2 on two executors (2-3 s, after the 2 s move) and s (3-4 s); its idle
    # executor sits in the global pool from 3 s.  At its completion (4 s) both of its executors
    # go to "wide" (arrive at 6 s): wide's eight tasks start at 2, 2, 6, 6, 12, 12, 16, 16 s
    jct = jct_s("kairos", policy)
    assert jct["short"] == pytest.approx(4.0)
    assert jct["wide"] == pytest.approx(26.0)


@pytest.mark.parametrize(("policy", "wide_s"), [("fair", 32.0), ("weighted_fair(-1)", 46.0)])
def test_spark_sched_sim_compat_leaves_them_in_the_global_pool(policy: str, wide_s: float) -> None:
    # spark-sched-sim starts no round over the common pool at a job's completion: with no arrival
    # left only the executor of short's last task (its own round) reaches "wide"
    jct = jct_s("spark-sched-sim-compat", policy)
    assert jct["short"] == pytest.approx(4.0)
    assert jct["wide"] == pytest.approx(wide_s)


def test_run_jobs_takes_any_arrivals_and_reports_them_in_order() -> None:
    short, wide = two_jobs()
    jobs = [JobArrival(0.0, wide), JobArrival(50_000.0, short)]
    res = run_jobs(
        SimConfig("kairos", 4), jobs, get_heuristic("fair"), rng=np.random.default_rng(0)
    )
    # wide alone takes the four executors (2 s move, then two 10 s tasks each); short arrives
    # after it is done: 2 s move, a1 and a2 in parallel, then s
    assert res.arrival_ms.tolist() == [0.0, 50_000.0]
    assert res.jct_ms.tolist() == [22_000.0, 4_000.0]
    assert res.busy_ms == 83_000.0
    with pytest.raises(ValueError, match="num_executors"):
        run_jobs(SimConfig("kairos", 0), jobs, get_heuristic("fair"), rng=np.random.default_rng(0))


def test_jobs_with_workflows_is_a_usage_error_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows.json"
    argv = ["--domain", "dag", "--workflows", str(WORKFLOW_DIR / "blast-s4.json"), "--jobs", "3"]
    argv += ["--executors", "4", "--policies", "fair", "--seeds", "0", "--json", str(out)]
    with pytest.raises(SystemExit) as exc:
        dag_main(argv)
    assert exc.value.code == 2
    assert "--jobs conflicts with --workflows" in capsys.readouterr().err
    assert not out.exists()
