"""Every shipped model's card says truthfully that it never trained or validated on the jobs of
the evaluation protocol (issue 5: "train on sequences disjoint from the evaluation sequences, and
say how in the card").

The protocol windows are computed here the way ``kairos evaluate`` draws them (seed 1, 10
windows of 1024 jobs over the whole trace), from the trace files in ``data/``, independently of
the training code that wrote the cards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.domains.hpc.rlscheduler import sample_starts
from app.domains.hpc.swf import load_swf

ROOT = Path(__file__).resolve().parents[2]
CARDS = sorted((ROOT / "models").glob("*/*/card.json"))


def _trace_rows() -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for path in CARDS:
        card = json.loads(path.read_text())
        if card.get("domain", "hpc") != "hpc":  # trained on generated jobs, not on SWF traces
            continue
        for row in card["training"]["traces"]:
            rows.append((f"{path.parent.parent.name}@{path.parent.name}", row))
    return rows


def _overlaps(ranges: list[list[int]], start: int, end: int) -> bool:
    return any(lo < end and start < hi for lo, hi in ranges)


_jobs: dict[str, int] = {}


def _n_jobs(trace: str) -> int:
    name = Path(trace).name  # cards name "data/...", "<swf>/..." or an older "../shared/..." path
    if name not in _jobs:
        _jobs[name] = load_swf(ROOT / "data" / name).n_jobs
    return _jobs[name]


def test_every_model_card_is_checked() -> None:
    assert {p.parent.parent.name for p in CARDS} >= {
        "hpc-kernel",
        "hpc-kernel-none",
        "hpc-kernel-alcf-mira",
        "hpc-kernel-kth-sp2",
        "hpc-rls-easy",
        "hpc-rls-none",
    }


@pytest.mark.parametrize(
    ("model", "row"),
    _trace_rows(),
    ids=lambda v: v if isinstance(v, str) else Path(v["trace"]).name,
)
def test_training_and_validation_jobs_are_disjoint_from_the_protocol(
    model: str, row: dict[str, Any]
) -> None:
    n = _n_jobs(row["trace"])
    assert row["jobs"] == n, f"{model}: the card's job count is not the trace's"
    windows = [(s, s + 1024) for s in sample_starts(n, 1024, 10, seed=1)]
    used = row["training_job_ranges"] + row.get("validation_job_ranges", [])
    assert used, f"{model}: no training ranges stated"
    for start, end in windows:
        assert not _overlaps(used, start, end), f"{model}: trains on protocol jobs {start}-{end}"
        assert any(lo <= start and end <= hi for lo, hi in row["excluded_job_ranges"]), (
            f"{model}: the card does not list protocol window {start}-{end} as excluded"
        )
