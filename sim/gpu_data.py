"""Files of the GPU domain: the Pollux application tables shipped under ``data/gpu/pollux/``
(Apache-2.0, from the Pollux OSDI'21 artifact; see ``data/gpu/README.md``), the eight
evaluation workloads and the artifact's per-job results; the Philly job table under
``data/gpu/philly/`` (CC-BY-4.0) and the workloads generated from its weeks.

``python -m sim.gpu_data rigid-pollux OUT_DIR`` writes the eight evaluation workloads as rigid
workload files (``name,time,num_gpus,duration``; :func:`app.domains.gpu.philly.rigid_jobs`) for
``kairos evaluate --domain gpu --semantics philly-rigid|kairos``."""

from __future__ import annotations

import argparse
import csv
import gzip
import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from app.domains.gpu.philly import PhillyJob, generate_pollux_workload, parse_philly, rigid_jobs
from app.domains.gpu.pollux import APP_SETTINGS, Application, AppTables, DelaunayData, parse_csv
from app.domains.gpu.simulate import SimJob

__all__ = [
    "DATA_DIR",
    "PHILLY_CSV",
    "POLLUX_DIR",
    "generated_workloads",
    "load_applications",
    "load_philly",
    "load_tables",
    "pollux_results",
    "pollux_workload",
    "rigid_pollux_workload",
    "write_rigid",
]

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "gpu"
POLLUX_DIR = DATA_DIR / "pollux"
PHILLY_CSV = DATA_DIR / "philly" / "philly_jobs.csv.gz"
DELAUNAY_CSV = "delaunay.csv"


def load_tables(name: str, traces: Path | None = None) -> AppTables:
    """One application's tables from ``traces/<name>/`` (the shipped copy by default)."""
    d = (traces or POLLUX_DIR / "traces") / name
    validation = {
        int(p.stem.split("-")[-1]): parse_csv(p.read_text())
        for p in sorted(d.glob("validation-*.csv"))
    }
    tri = d / DELAUNAY_CSV
    delaunay = parse_delaunay(tri.read_text()) if tri.is_file() else None
    return AppTables(
        name=name,
        placements=parse_csv((d / "placements.csv").read_text()),
        scalability=parse_csv((d / "scalability.csv").read_text()),
        validation=validation,
        delaunay=delaunay,
    )


def parse_delaunay(text: str) -> DelaunayData:
    """``delaunay.csv`` as :mod:`sim.gpu_triangulate` writes it."""
    lines = text.splitlines()
    params = dict(kv.split("=") for kv in lines[0].lstrip("# ").split())
    simplices: list[list[int]] = []
    neighbors: list[list[int]] = []
    equations: list[list[float]] = []
    flat: list[bool] = []
    for line in lines[2:]:
        if not line.strip():
            continue
        cells = line.split(",")
        simplices.append([int(v) for v in cells[0:4]])
        neighbors.append([int(v) for v in cells[4:8]])
        equations.append([float(v) for v in cells[8:13]])
        flat.append(cells[13] == "1")
    return DelaunayData(
        simplices=simplices,
        neighbors=neighbors,
        equations=equations,
        flat=flat,
        paraboloid_scale=float(params["paraboloid_scale"]),
        paraboloid_shift=float(params["paraboloid_shift"]),
    )


@cache
def load_applications() -> dict[str, Application]:
    """The six applications of the shipped tables (read once per process)."""
    return {name: Application(load_tables(name)) for name in sorted(APP_SETTINGS)}


def pollux_workload(index: int) -> Path:
    """The shipped copy of the artifact's ``workloads/workload-<index>.csv`` (1..8)."""
    return POLLUX_DIR / "workloads" / f"workload-{index}.csv"


def pollux_results(policy: str) -> dict[str, Any]:
    """The artifact's ``results-jobload/<policy>-1.0/summary.json`` (jcts, avgs, mean)."""
    raw: dict[str, Any] = json.loads((POLLUX_DIR / "results" / f"{policy}-1.0.json").read_text())
    return raw


def load_philly(path: Path = PHILLY_CSV) -> list[PhillyJob]:
    """The Philly job table (``.csv`` or ``.csv.gz``), in file order."""
    raw = path.read_bytes()
    text = gzip.decompress(raw).decode() if path.suffix == ".gz" else raw.decode()
    return parse_philly(text)


def generated_workloads(
    jobs: Sequence[PhillyJob], seeds: Sequence[int], n: int = 160
) -> list[list[SimJob]]:
    """One rigid workload per seed (Pollux-style rows from ``jobs``, as rigid jobs)."""
    apps = load_applications()
    return [rigid_jobs(generate_pollux_workload(jobs, seed, n), apps) for seed in seeds]


def rigid_pollux_workload(index: int) -> list[SimJob]:
    """Evaluation workload ``index`` (1..8) as rigid jobs."""
    from sim.gpu_evaluate import read_workload

    _, rows = read_workload(pollux_workload(index))
    return rigid_jobs(rows, load_applications())


def write_rigid(jobs: Sequence[SimJob], path: Path) -> None:
    """``jobs`` as a rigid workload file (``name,time,num_gpus,duration``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "time", "num_gpus", "duration"])
        for j in jobs:
            w.writerow([j.id, f"{j.arrival:g}", j.min_gpus, repr(float(j.duration_s or 0.0))])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim.gpu_data")
    sub = p.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("rigid-pollux", help="the 8 evaluation workloads as rigid files")
    rp.add_argument("out", type=Path)
    args = p.parse_args(argv)
    for i in range(1, 9):
        write_rigid(rigid_pollux_workload(i), args.out / f"workload-{i}.csv")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
