"""Files of the GPU domain: the Pollux application tables shipped under ``data/gpu/pollux/``
(Apache-2.0, from the Pollux OSDI'21 artifact; see ``data/gpu/README.md``), the eight
evaluation workloads and the artifact's per-job results."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from app.domains.gpu.pollux import APP_SETTINGS, Application, AppTables, DelaunayData, parse_csv

__all__ = [
    "DATA_DIR",
    "POLLUX_DIR",
    "load_applications",
    "load_tables",
    "pollux_results",
    "pollux_workload",
]

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "gpu"
POLLUX_DIR = DATA_DIR / "pollux"
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
