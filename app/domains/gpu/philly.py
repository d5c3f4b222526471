"""Workloads from the Philly job table (spec sections 1.1, 1.2, 8.1), pure: rows in, jobs out.

* **Weeks**: week ``w`` holds the jobs submitted in ``[origin + 7w days, origin + 7(w+1) days)``,
  ``origin`` = the first submission of the table. The learned policy trains on weeks
  :data:`TRAIN_WEEKS` only, is validated on :data:`VALIDATION_WEEKS`, and weeks
  :data:`TEST_WEEKS` are never read for either (:func:`split_weeks` refuses overlapping sets).
* **Pollux-style workloads** (:func:`generate_pollux_workload`), the artifact's generator
  semantics: keep jobs with ``duration >= 60 s`` and ``gpu_time < 1000 GPU-h``; shift
  timestamps back 2 h and keep those whose shifted hour of day is < 8; sample ``n`` of them (a
  seeded ``random.Random``); arrival = seconds since midnight of the shifted timestamp;
  application from the GPU-time bucket (< 1 GPU-h: cifar10 or ncf, < 10: deepspeech2 or bert,
  < 100: yolov3, else imagenet); ``(num_replicas, batch_size)`` drawn uniformly from the
  application's configurations :data:`TUNED_CONFIGS` (the replica counts and batch sizes spec
  section 1.2 lists per application; the Philly GPU count is not used, as in the artifact).
  Names are ``<app>-<rank by arrival>``, rows sorted by arrival.
* **Rigid jobs of Pollux rows** (:func:`rigid_jobs`): each job rigid at its ``num_replicas`` with
  the duration the ``pollux-compat`` heuristics see as its oracle estimate at arrival (iterations
  to its completion epoch x seconds per iteration on the consolidated placement).
"""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from app.domains.gpu.compat import make_jobs
from app.domains.gpu.pollux import Application
from app.domains.gpu.simulate import SimJob

__all__ = [
    "TEST_WEEKS",
    "TRAIN_WEEKS",
    "TUNED_CONFIGS",
    "VALIDATION_WEEKS",
    "PhillyJob",
    "generate_pollux_workload",
    "parse_philly",
    "rigid_jobs",
    "split_weeks",
    "week_of",
]

TRAIN_WEEKS: Final = tuple(range(10))
VALIDATION_WEEKS: Final = (10, 11)
TEST_WEEKS: Final = (12, 13, 14, 15)
WEEK_S: Final = 7 * 86_400.0
TIME_FORMAT: Final = "%Y-%m-%d %H:%M:%S"

#: per application: (replica counts, global batch sizes) its generated jobs draw from
TUNED_CONFIGS: Final[Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]]] = {
    "cifar10": ((6, 8, 12, 16), (2048, 4096)),
    "ncf": ((1,), (32768,)),
    "deepspeech2": ((6, 8, 12), (320, 640)),
    "bert": ((6, 8, 12, 16), (384,)),
    "yolov3": ((4,), (64,)),
    "imagenet": ((24, 32, 48), (3200, 6400)),
}


@dataclass(frozen=True, slots=True)
class PhillyJob:
    """One row of the Philly table; ``index`` is its row number (0-based, header excluded)."""

    index: int
    timestamp: datetime
    duration_s: float
    num_gpus: int
    cluster: str

    @property
    def gpu_time_s(self) -> float:
        return self.duration_s * self.num_gpus


def parse_philly(text: str) -> list[PhillyJob]:
    """The rows of ``philly_jobs.csv`` (``timestamp,duration,num_gpus,gpu_time,cluster``)."""
    reader = csv.DictReader(io.StringIO(text))
    out: list[PhillyJob] = []
    for i, row in enumerate(reader):
        try:
            out.append(
                PhillyJob(
                    index=i,
                    timestamp=datetime.strptime(row["timestamp"], TIME_FORMAT),  # noqa: DTZ007
                    duration_s=float(row["duration"]),
                    num_gpus=int(row["num_gpus"]),
                    cluster=row["cluster"],
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"philly row {i + 1}: {exc}") from None
    return out


def week_of(job: PhillyJob, origin: datetime) -> int:
    """The week of ``job`` counted from ``origin`` (the table's first submission)."""
    return int((job.timestamp - origin).total_seconds() // WEEK_S)


def split_weeks(
    jobs: Sequence[PhillyJob], *week_sets: Iterable[int]
) -> tuple[list[PhillyJob], ...]:
    """The jobs of each set of weeks (disjoint sets; a week in two of them is refused)."""
    sets = [frozenset(ws) for ws in week_sets]
    for i, a in enumerate(sets):
        for b in sets[i + 1 :]:
            if a & b:
                raise ValueError(f"week sets overlap on {sorted(a & b)}")
    if not jobs:
        return tuple([] for _ in sets)
    origin = min(j.timestamp for j in jobs)
    out: list[list[PhillyJob]] = [[] for _ in sets]
    for j in jobs:
        w = week_of(j, origin)
        for k, ws in enumerate(sets):
            if w in ws:
                out[k].append(j)
    return tuple(out)


def _application(gpu_h: float, rng: random.Random, rng2: random.Random) -> str:
    if gpu_h < 1:
        return rng.choice(("cifar10", "ncf"))
    if gpu_h < 10:
        return "bert" if rng2.random() < 0.5 else "deepspeech2"
    if gpu_h < 100:
        return "yolov3"
    return "imagenet"


def generate_pollux_workload(
    jobs: Sequence[PhillyJob],
    seed: int,
    n: int = 160,
    *,
    start_h: int = 2,
    hours: int = 8,
) -> list[SimJob]:
    """``n`` Pollux-format jobs (``app``, ``batch_size``, rigid ``num_replicas``) from ``jobs``."""
    eligible = [
        j
        for j in jobs
        if j.duration_s >= 60
        and j.gpu_time_s < 1000 * 3600
        and (j.timestamp - timedelta(hours=start_h)).hour < hours
    ]
    if len(eligible) < n:
        raise ValueError(f"{len(eligible)} eligible Philly jobs, {n} asked for")
    rng = random.Random(seed)
    rng2 = random.Random(seed + 1)
    picked = rng.sample(eligible, n)
    rows: list[tuple[float, int, str, int, int]] = []
    for j in picked:
        shifted = j.timestamp - timedelta(hours=start_h)
        t = shifted.hour * 3600 + shifted.minute * 60 + shifted.second
        app = _application(j.gpu_time_s / 3600, rng, rng2)
        replicas, batches = TUNED_CONFIGS[app]
        rows.append((float(t), j.index, app, rng.choice(replicas), rng.choice(batches)))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [
        SimJob(
            id=f"{app}-{rank}",
            arrival=t,
            min_gpus=g,
            max_gpus=g,
            app=app,
            batch_size=b,
        )
        for rank, (t, _, app, g, b) in enumerate(rows)
    ]


def rigid_jobs(rows: Sequence[SimJob], apps: Mapping[str, Application]) -> list[SimJob]:
    """Pollux rows as rigid jobs with their consolidated run time as duration (no estimate)."""
    compat = make_jobs(
        [(r.id, int(r.arrival), str(r.app), r.min_gpus, int(r.batch_size or 0)) for r in rows],
        apps,
    )
    out: list[SimJob] = []
    for r, j in zip(rows, compat, strict=True):
        seconds = j.remaining_iterations() * j.app.iteration_time(
            j.replicas, j.batch_size, optimus=False
        )
        out.append(
            SimJob(
                id=r.id,
                arrival=r.arrival,
                min_gpus=r.min_gpus,
                max_gpus=r.max_gpus,
                duration_s=float(seconds),
                tenant=r.tenant,
                app=r.app,
                batch_size=r.batch_size,
            )
        )
    return out
