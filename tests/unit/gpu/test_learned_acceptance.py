"""Issue 20's learned-policy gates for the shipped ``gpu-v1`` (the registry's highest version),
through ``kairos evaluate`` as ``scripts/gpu_learned_results.sh`` runs it:

* ``pollux-compat`` on the 8 Pollux evaluation workloads, greedy: average JCT below the
  artifact's Tiresias's on at least 6 of 8, the mean of the 8 below Tiresias's 4,038.18 s, and
  every workload's p99 at most 1.25 x Tiresias's;
* ``philly-rigid`` on 8 workloads generated from the Philly test weeks 12-15 (never read in
  training or selection): mean average JCT below the best of fifo-skip, tiresias-2dlas, las,
  drf and smallest-first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.domains.gpu.philly import TEST_WEEKS, generate_pollux_workload, rigid_jobs, split_weeks
from kairos.cli import main as kairos_main
from sim.gpu_data import POLLUX_DIR, load_applications, load_philly, write_rigid

pytestmark = pytest.mark.slow

TIRESIAS_MEAN_S = 4038.18
BASELINES = ("fifo-skip", "tiresias-2dlas", "las", "drf", "smallest-first")


def _evaluate(out: Path, *args: str) -> dict[tuple[str, str], dict[str, Any]]:
    code = kairos_main(["evaluate", "--domain", "gpu", *args, "--json", str(out)])
    assert code == 0
    return {(r["policy"], r["workload"]): r for r in json.loads(out.read_text())}


def test_gpu_v1_beats_the_artifacts_tiresias_under_pollux_compat(tmp_path: Path) -> None:
    files = [str(POLLUX_DIR / "workloads" / f"workload-{i}.csv") for i in range(1, 9)]
    cell = _evaluate(
        tmp_path / "rows.json",
        "--semantics",
        "pollux-compat",
        "--workload",
        *files,
        "--policies",
        "gpu-v1,tiresias",
    )
    names = [f"workload-{i}" for i in range(1, 9)]
    learned = [cell[("gpu-v1", w)] for w in names]
    tiresias = [cell[("tiresias", w)] for w in names]
    wins = sum(a["avg_jct_s"] < b["avg_jct_s"] for a, b in zip(learned, tiresias, strict=True))
    assert wins >= 6
    assert sum(r["avg_jct_s"] for r in tiresias) / 8 == pytest.approx(TIRESIAS_MEAN_S, abs=0.01)
    assert sum(r["avg_jct_s"] for r in learned) / 8 < TIRESIAS_MEAN_S
    for a, b in zip(learned, tiresias, strict=True):
        assert a["p99_jct_s"] <= 1.25 * b["p99_jct_s"], a["workload"]


def test_gpu_v1_beats_the_information_agnostic_baselines_on_the_test_weeks(
    tmp_path: Path,
) -> None:
    (rows,) = split_weeks(load_philly(), TEST_WEEKS)
    apps = load_applications()
    files = []
    for i in range(8):
        path = tmp_path / f"workload-{i + 1}.csv"
        write_rigid(rigid_jobs(generate_pollux_workload(rows, 1_200_000 + i, 160), apps), path)
        files.append(str(path))
    cell = _evaluate(
        tmp_path / "rows.json",
        "--semantics",
        "philly-rigid",
        "--workload",
        *files,
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--policies",
        "gpu-v1," + ",".join(BASELINES),
    )

    def mean(policy: str) -> float:
        return sum(cell[(policy, f"workload-{i}")]["avg_jct_s"] for i in range(1, 9)) / 8

    best = min(BASELINES, key=mean)
    assert mean("gpu-v1") < mean(best), (mean("gpu-v1"), best, mean(best))
