"""Decima's TPC-H DAGs: parsing, the duration pre-processing and the task-duration sampler.

Invariants (spec section 1.4):

* a stage's task count is ``len(first_wave[k0]) + len(rest_wave[k0])`` with ``k0`` the first key of
  the record in insertion order (always 2 in the shipped data), not the smallest or any key;
* the cleaned first wave of key ``e`` is the multiset difference ``first_wave[e] - fresh[e]``; a key
  whose cleaned list is empty inherits the list of the next smaller key (ascending walk);
* ``rough_duration_ms`` is the mean of every sample of the three dicts after cleaning;
* the executor key for ``n`` executors at the job is 5 for ``n <= 5``, 100 for ``n >= 100``,
  ``n`` on a data point, else ``L`` with probability ``(n - L) / (R - L)`` and ``R`` otherwise,
  replaced by the record's largest key when the record lacks it.

Parsing takes the already-decoded JSON (``sim/dag_data.py`` reads the file): no I/O here.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

__all__ = [
    "EXECUTOR_LEVELS",
    "QUERY_SIZES",
    "WARMUP_DELAY_MS",
    "StageRecord",
    "TpchDag",
    "TpchLibrary",
    "executor_interval",
    "parse_tpch",
    "sample_executor_key",
    "sample_task_duration",
]

QUERY_SIZES: Final = ("2g", "5g", "10g", "20g", "50g", "80g", "100g")
NUM_QUERIES: Final = 22
#: the profiled executor counts the key interpolation walks between
EXECUTOR_LEVELS: Final = (5, 10, 20, 40, 50, 60, 80, 100)
#: added to a first-wave draw when a fresh executor's stage has no fresh sample
WARMUP_DELAY_MS: Final = 1000

Durations = Mapping[int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One stage of a TPC-H DAG, durations in integer ms keyed by profiled executor count."""

    num_tasks: int
    first_wave: Durations  # cleaned (fresh samples removed, gaps filled)
    rest_wave: Durations
    fresh: Durations
    rough_duration_ms: float
    #: mean of every sample as stored (fresh samples still inside the first wave)
    raw_mean_ms: float = 0.0

    def largest_key(self) -> int:
        return max(self.first_wave)


@dataclass(frozen=True, slots=True)
class TpchDag:
    query: int
    size: str
    stages: tuple[StageRecord, ...]
    #: (parent, child) node-index pairs; node indices are a topological order
    edges: tuple[tuple[int, int], ...]

    @property
    def name(self) -> str:
        return f"tpch-{self.size}-q{self.query}"

    def parents(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in self.stages]
        for p, c in self.edges:
            out[c].append(p)
        return tuple(tuple(sorted(ps)) for ps in out)

    def total_tasks(self) -> int:
        return sum(s.num_tasks for s in self.stages)

    def work_ms(self) -> float:
        """The spec's "work" (Appendix A): sum over stages of tasks x the mean of the stored
        samples (ms)."""
        return sum(s.num_tasks * s.raw_mean_ms for s in self.stages)


@dataclass(frozen=True, slots=True)
class TpchLibrary:
    """All DAGs, by (size, query)."""

    dags: Mapping[tuple[str, int], TpchDag]

    def get(self, size: str, query: int) -> TpchDag:
        return self.dags[(size, query)]

    def __len__(self) -> int:
        return len(self.dags)


def _keyed(raw: Mapping[str, Sequence[int]]) -> dict[int, list[int]]:
    return {int(k): [int(v) for v in vals] for k, vals in raw.items()}


def clean_record(
    first: Mapping[int, Sequence[int]],
    rest: Mapping[int, Sequence[int]],
    fresh: Mapping[int, Sequence[int]],
) -> tuple[dict[int, tuple[int, ...]], float]:
    """The cleaned first wave and the rough duration (mean of all samples after cleaning)."""
    cleaned: dict[int, list[int]] = {}
    for key, values in first.items():
        pending = Counter(fresh.get(key, ()))
        kept: list[int] = []
        for v in values:
            if pending[v] > 0:
                pending[v] -= 1
            else:
                kept.append(v)
        cleaned[key] = kept
    previous: list[int] = []
    for key in sorted(cleaned):
        if not cleaned[key]:
            cleaned[key] = previous
        previous = cleaned[key]
    samples = [v for vs in cleaned.values() for v in vs]
    samples += [v for vs in rest.values() for v in vs]
    samples += [v for vs in fresh.values() for v in vs]
    rough = float(np.mean(samples)) if samples else 0.0
    return {k: tuple(v) for k, v in cleaned.items()}, rough


def _stage(raw: Mapping[str, Any]) -> StageRecord:
    first = _keyed(raw["first_wave"])
    rest = _keyed(raw["rest_wave"])
    fresh = _keyed(raw["fresh_durations"])
    k0 = next(iter(first))
    num_tasks = len(first[k0]) + len(rest.get(k0, []))
    cleaned, rough = clean_record(first, rest, fresh)
    stored = [v for d in (first, rest, fresh) for vs in d.values() for v in vs]
    return StageRecord(
        num_tasks=num_tasks,
        first_wave=cleaned,
        rest_wave={k: tuple(v) for k, v in rest.items()},
        fresh={k: tuple(v) for k, v in fresh.items()},
        rough_duration_ms=rough,
        raw_mean_ms=float(np.mean(stored)) if stored else 0.0,
    )


def parse_tpch(raw: Mapping[str, Any]) -> TpchLibrary:
    """The DAGs of the decoded ``tpch_decima_dags.json`` (``{size: {query: dag}}``)."""
    dags: dict[tuple[str, int], TpchDag] = {}
    for size, queries in raw.items():
        for query, dag in queries.items():
            stages = tuple(_stage(n) for n in dag["nodes"])
            edges = tuple((int(p), int(c)) for p, c in dag["edges"])
            dags[(str(size), int(query))] = TpchDag(int(query), str(size), stages, edges)
    return TpchLibrary(dags)


def _interval(n: int) -> tuple[int, int]:
    levels = EXECUTOR_LEVELS
    if n <= levels[0]:
        return levels[0], levels[0]
    if n >= levels[-1]:
        return levels[-1], levels[-1]
    for left, right in itertools.pairwise(levels):
        if n == right:
            return right, right
        if left < n < right:
            return left, right
    return levels[-1], levels[-1]  # pragma: no cover - the loop covers (5, 100)


_INTERVALS: Final = tuple(_interval(n) for n in range(EXECUTOR_LEVELS[-1] + 1))


def executor_interval(n: int) -> tuple[int, int]:
    """The neighbouring data points ``(L, R)`` of ``n`` executors (``L == R`` on a point)."""
    if 0 <= n < len(_INTERVALS):
        return _INTERVALS[n]
    return _interval(n)


def sample_executor_key(record: StageRecord, n: int, point: Callable[[int], int]) -> int:
    """The profiled executor count whose samples a task at a job holding ``n`` executors uses;
    ``point(w)`` draws uniformly from ``1..w``."""
    left, right = executor_interval(n)
    key = left if left == right or point(right - left) <= n - left else right
    if key not in record.first_wave:
        key = record.largest_key()
    return key


def sample_task_duration(
    record: StageRecord,
    key: int,
    *,
    fresh_to_job: bool,
    same_stage: bool,
    pick: Callable[[int], int],
) -> int:
    """A task duration (ms) per spec 1.4: an executor fresh to the job draws the fresh list (or
    the first wave plus the warm-up delay), one continuing its stage the rest wave, others the
    first wave (or the fresh list).  ``pick(n)`` draws an index uniformly from ``0..n-1``."""
    first = record.first_wave.get(key, ())
    fresh = record.fresh.get(key, ())
    if fresh_to_job:
        if fresh:
            return int(fresh[pick(len(fresh))])
        if first:
            return int(first[pick(len(first))]) + WARMUP_DELAY_MS
    elif same_stage:
        rest = record.rest_wave.get(key, ())
        if rest:
            return int(rest[pick(len(rest))])
    if first:
        return int(first[pick(len(first))])
    if fresh:
        return int(fresh[pick(len(fresh))])
    # no sample at this key at all (absent from the shipped data): the stage's mean
    return round(record.rough_duration_ms)
