"""WfCommons workflows as DAG jobs: the adapter (read with wfcommons, converted exactly), the
seeded arrival stream, refused instances, episodes and ``kairos evaluate --workflows``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.domains.dag.heuristics import get_heuristic
from app.domains.dag.simulate import SEMANTICS, Semantics, SimConfig
from app.domains.dag.workflow import (
    WorkflowError,
    WorkflowTask,
    run_workflow_episode,
    workflow_arrivals,
    workflow_dag,
)
from sim.dag_evaluate import main as dag_main
from sim.dag_workflows import RECIPES, WORKFLOW_DIR, WorkflowFileError, read_workflow

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


Task = tuple[str, list[str], float | None]


def instance(tasks: list[Task], *, version: str = "1.6") -> dict[str, Any]:
    """A WfFormat instance of (id, parents, runtime or None for no execution entry) tasks, each
    writing one file its children read."""
    children: dict[str, list[str]] = {t: [] for t, _, _ in tasks}
    for t, parents, _ in tasks:
        for p in parents:
            children.setdefault(p, []).append(t)
    spec_tasks = [
        {
            "name": t.split("_")[0],
            "id": t,
            "parents": parents,
            "children": children[t],
            "inputFiles": [f"{p}.out" for p in parents],
            "outputFiles": [f"{t}.out"],
        }
        for t, parents, _ in tasks
    ]
    return {
        "name": "tiny",
        "schemaVersion": version,
        "workflow": {
            "specification": {
                "tasks": spec_tasks,
                "files": [{"id": f"{t}.out", "sizeInBytes": 10} for t, _, _ in tasks],
            },
            "execution": {
                "makespanInSeconds": 1.0,
                "executedAt": "2024-01-01T00:00:00+00:00",
                "tasks": [
                    {"id": t, "runtimeInSeconds": r, "coreCount": 1}
                    for t, _, r in tasks
                    if r is not None
                ],
            },
        },
    }


def write(tmp_path: Path, name: str, data: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# a diamond listed child-first: the stages come out in a topological order, ties by file order
DIAMOND: list[Task] = [
    ("join_4", ["left_2", "right_3"], 4.0),
    ("left_2", ["split_1"], 2.5),
    ("split_1", [], 1.2344),
    ("right_3", ["split_1"], 0.0),
]


def test_adapter_maps_a_small_instance_exactly(tmp_path: Path) -> None:
    dag = read_workflow(write(tmp_path, "diamond", instance(DIAMOND)))
    assert dag.name == "diamond"
    assert dag.task_ids == ("split_1", "left_2", "right_3", "join_4")
    assert [s.num_tasks for s in dag.stages] == [1, 1, 1, 1]
    assert [s.rough_duration_ms for s in dag.stages] == [1234.0, 2500.0, 0.0, 4000.0]
    for s in dag.stages:  # every draw of a stage is its runtime: no warm-up, no other sample
        assert {
            v for d in (s.first_wave, s.rest_wave, s.fresh) for vs in d.values() for v in vs
        } == {int(s.rough_duration_ms)}
    assert sorted(dag.edges) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    assert dag.parents() == ((), (0,), (0,), (1, 2))


@pytest.mark.parametrize("stem", list(RECIPES))
def test_committed_instances_map_every_task_runtime_and_parent(stem: str) -> None:
    path = WORKFLOW_DIR / f"{stem}.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    runtime = {t["id"]: t["runtimeInSeconds"] for t in raw["workflow"]["execution"]["tasks"]}
    parents = {t["id"]: set(t["parents"]) for t in raw["workflow"]["specification"]["tasks"]}
    dag = read_workflow(path)
    assert sorted(dag.task_ids) == sorted(parents)
    assert 30 <= len(dag.stages) <= 300
    pos = {t: i for i, t in enumerate(dag.task_ids)}
    for i, t in enumerate(dag.task_ids):
        assert dag.stages[i].rough_duration_ms == round(runtime[t] * 1000.0)
        assert {dag.task_ids[p] for p in dag.parents()[i]} == parents[t]
        assert all(pos[p] < i for p in parents[t])


def test_committed_instances_are_small() -> None:
    total = sum(p.stat().st_size for p in WORKFLOW_DIR.rglob("*") if p.is_file())
    assert total < 2 * 1024 * 1024


def test_arrivals_are_a_seeded_poisson_stream() -> None:
    dags = [read_workflow(WORKFLOW_DIR / f"{stem}.json") for stem in RECIPES]
    a = workflow_arrivals(dags, 7, 600_000.0)
    b = workflow_arrivals(dags, 7, 600_000.0)
    assert [(x.arrival_ms, x.dag.name) for x in a] == [(x.arrival_ms, x.dag.name) for x in b]
    assert a[0].arrival_ms == 0.0
    assert sorted(x.dag.name for x in a) == sorted(RECIPES)
    times = [x.arrival_ms for x in a]
    assert times == sorted(times)
    assert len(set(times)) == len(times)
    c = workflow_arrivals(dags, 8, 600_000.0)
    assert [x.arrival_ms for x in c] != times
    assert all(x.arrival_ms == 0.0 for x in workflow_arrivals(dags, 7, 0.0))
    # the gaps are exponential of the given mean (over many seeds)
    gaps = np.concatenate(
        [np.diff([x.arrival_ms for x in workflow_arrivals(dags, s, 1000.0)]) for s in range(400)]
    )
    assert abs(float(np.mean(gaps)) - 1000.0) < 60.0


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_a_chain_on_one_executor_takes_the_move_then_every_runtime(semantics: Semantics) -> None:
    chain = [WorkflowTask("a", 3.0), WorkflowTask("b", 5.5, ("a",)), WorkflowTask("c", 1.0, ("b",))]
    res = run_workflow_episode(
        [workflow_dag("chain", chain)],
        SimConfig(semantics, 1),
        get_heuristic("fair"),
        seed=0,
        interval_ms=0.0,
    )
    # the executor leaves the global pool once (the 2 s moving delay), then runs a, b, c
    assert res.jct_ms.tolist() == [2000.0 + 9500.0]
    assert res.busy_ms == 9500.0


def test_parallel_tasks_share_the_executors(tmp_path: Path) -> None:
    fan: list[Task] = [("src_1", [], 1.0)] + [(f"w_{k}", ["src_1"], 10.0) for k in range(4)]
    dag = read_workflow(write(tmp_path, "fan", instance(fan)))
    for executors, expected_ms in ((4, 2000.0 + 1000.0 + 10_000.0), (2, 23_000.0)):
        res = run_workflow_episode(
            [dag], SimConfig("kairos", executors), get_heuristic("fifo"), seed=0, interval_ms=0.0
        )
        assert res.jct_ms.tolist() == [expected_ms]


@pytest.mark.parametrize(
    ("tasks", "said"),
    [
        ([WorkflowTask("a", 1.0, ("b",)), WorkflowTask("b", 1.0, ("a",))], "cyclic: task 'a'"),
        ([WorkflowTask("a", 1.0, ("x",))], "task 'a' has unknown parent 'x'"),
        ([WorkflowTask("a", 1.0, ("a",))], "task 'a' is its own parent"),
        ([WorkflowTask("a", 1.0), WorkflowTask("a", 2.0)], "task id 'a' appears twice"),
        ([WorkflowTask("a", -1.0)], "task 'a' needs a finite runtime >= 0"),
        ([WorkflowTask("a", float("nan"))], "task 'a' needs a finite runtime >= 0"),
        ([], "has no task"),
    ],
)
def test_conversion_refuses_what_is_no_dag(tasks: list[WorkflowTask], said: str) -> None:
    with pytest.raises(WorkflowError, match=said):
        workflow_dag("w", tasks)


@pytest.mark.parametrize(
    ("tasks", "version", "said"),
    [
        ([("a_1", ["b_2"], 1.0), ("b_2", ["a_1"], 1.0)], "1.6", r"cycle.*\"a_1\", \"b_2\""),
        ([("a_1", ["ghost_9"], 1.0)], "1.6", r"\"ghost_9\" is not declared"),
        ([("a_1", [], 1.0), ("b_2", ["a_1"], None)], "1.6", r"task 'b_2' has no runtime"),
        ([("a_1", [], 1.0)], "1.4", r"schemaVersion.*'1.4' is not one of"),
    ],
)
def test_a_bad_instance_is_exit_2_naming_the_file_and_task(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tasks: list[Task],
    version: str,
    said: str,
) -> None:
    bad = write(tmp_path, "bad", instance(tasks, version=version))
    good = WORKFLOW_DIR / "blast-s4.json"
    with pytest.raises(WorkflowFileError, match=said):
        read_workflow(bad)
    out = tmp_path / "rows.json"
    argv = ["--domain", "dag", "--workflows", str(good), str(bad), "--executors", "4"]
    argv += ["--policies", "fair", "--seeds", "0", "--json", str(out)]
    assert dag_main(argv) == 2
    err = capsys.readouterr().err
    assert f"kairos evaluate: error: {bad}: " in err
    assert re.search(said, err)
    assert not out.exists()


def test_not_json_and_missing_files_are_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text("{not json", encoding="utf-8")
    with pytest.raises(WorkflowFileError, match=r"junk\.json: not JSON"):
        read_workflow(junk)
    with pytest.raises(WorkflowFileError, match=r"nothere\.json: no such file"):
        read_workflow(tmp_path / "nothere.json")


def test_tpch_and_workflows_are_one_or_the_other(tmp_path: Path) -> None:
    argv = ["--domain", "dag", "--tpch", "--workflows", str(WORKFLOW_DIR / "blast-s4.json")]
    argv += ["--executors", "4", "--policies", "fair", "--json", str(tmp_path / "r.json")]
    with pytest.raises(SystemExit) as exc:
        dag_main(argv)
    assert exc.value.code == 2


def test_cli_writes_the_rows(tmp_path: Path) -> None:
    files = [str(WORKFLOW_DIR / "seismology-s5.json"), str(WORKFLOW_DIR / "genome-s6.json")]
    out = tmp_path / "rows.json"
    argv = ["evaluate", "--domain", "dag", "--semantics", "spark-sched-sim-compat"]
    argv += ["--workflows", *files, "--arrival-interval-s", "60", "--executors", "8"]
    argv += ["--policies", "fair,sjf_cp", "--seeds", "3-4", "--json", str(out)]
    argv += ["--report", str(tmp_path / "report")]
    assert dag_main(argv) == 0
    rows = json.loads(out.read_text(encoding="utf-8"))
    assert [r["policy"] for r in rows] == ["fair", "sjf_cp"]
    for r in rows:
        assert set(r) >= ROW_KEYS
        assert r["semantics"] == "spark-sched-sim-compat"
        assert (r["seed"], r["executors"], r["jobs"]) == ("3-4", 8, 2)
        assert r["workflows"] == ["seismology-s5.json", "genome-s6.json"]
        assert len(r["per_seed_avg_jct_s"]) == 2
        assert r["avg_jct_s"] == pytest.approx(float(np.mean(r["per_seed_avg_jct_s"])))
        assert r["finished_jobs"] == 4
        assert 0 < r["executor_utilization"] <= 1
    # the same seeds give the same rows
    again = tmp_path / "again.json"
    assert dag_main([*argv[:-3], str(again)]) == 0
    assert json.loads(again.read_text(encoding="utf-8")) == rows
    report = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "2 WfCommons workflows (seismology-s5.json, genome-s6.json)" in report


@pytest.mark.slow
def test_the_committed_instances_are_what_the_recipes_generate(tmp_path: Path) -> None:
    from sim.dag_workflows import generate

    for path in generate(tmp_path):
        fresh = read_workflow(path)
        kept = read_workflow(WORKFLOW_DIR / path.name)
        assert fresh.task_ids == kept.task_ids
        assert fresh.edges == kept.edges
        assert fresh.stages == kept.stages
