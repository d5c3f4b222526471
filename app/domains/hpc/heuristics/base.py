"""Shared machinery of the queue-order heuristics.

A heuristic scores each job; :meth:`ScoreHeuristic.order` sorts ascending by
``(score, submit_time, id)`` so ties are fully deterministic.  Scores are made NaN-free
(:func:`finite_key`) so the sort order is total for any input.

Symbols (RLScheduler's, A.7 of the HPC reproduction spec): ``s`` submit time, ``r`` requested
walltime, ``n`` job size (:func:`job_size`), ``w = now - s`` the wait so far (textbook WFP3/UNICEP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from app.domains.hpc.types import Job, PolicyRef

HEURISTIC_VERSION = "1"
HEURISTIC_KIND = "heuristic"
DEFAULT_SIZE_RESOURCE = "cpu"
#: substitute for a non-positive (or NaN) ``r`` or ``s`` before a log/sqrt/division (F1's guard)
GUARD = 0.1


def job_size(job: Job, size_resource: str = DEFAULT_SIZE_RESOURCE) -> float:
    """``n = tasks * per_task[size_resource]``, or ``tasks`` when the job has no such resource."""
    if size_resource in job.per_task:
        n = job.tasks * float(job.per_task[size_resource])
    else:
        n = float(job.tasks)
    return n if n > 0.0 else 0.0  # negative / NaN sizes count as 0


def guarded(x: float) -> float:
    """``x`` when it is a positive number, else :data:`GUARD` (0.1)."""
    return x if x > 0.0 else GUARD


def finite_key(x: float) -> float:
    """NaN sorts last (``+inf``); infinities are kept (they sort correctly)."""
    return math.inf if math.isnan(x) else x


class ScoreHeuristic:
    """Base class: subclasses set ``name``/``description`` and implement a score method."""

    name: str = ""
    description: str = ""

    def __init__(self, size_resource: str = DEFAULT_SIZE_RESOURCE) -> None:
        self.size_resource = size_resource
        self._ref = PolicyRef(self.name, HEURISTIC_VERSION, HEURISTIC_KIND)

    @property
    def ref(self) -> PolicyRef:
        return self._ref

    def score(self, job: Job, now: float) -> float:
        """The job's score at ``now`` (lower is scheduled first); never NaN."""
        return finite_key(self.raw_score(job, now))

    def raw_score(self, job: Job, now: float) -> float:
        del now  # most heuristics do not depend on time; WFP3/UNICEP override raw_score()
        return self.static_score(job)

    def static_score(self, job: Job) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement a score method")

    def size(self, job: Job) -> float:
        return job_size(job, self.size_resource)

    def order(self, jobs: Sequence[Job], now: float) -> list[Job]:
        """``jobs`` best-first: ascending score, then submit time, then id."""
        score = self.score
        return sorted(jobs, key=lambda j: (score(j, now), finite_key(j.submit_time), j.id))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size_resource={self.size_resource!r})"
