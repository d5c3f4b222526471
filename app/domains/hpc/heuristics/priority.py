"""Priority: higher ``job.priority`` first, ties by submit time then id."""

from __future__ import annotations

from app.domains.hpc.heuristics.base import ScoreHeuristic
from app.domains.hpc.types import Job

NAME = "priority"
DESCRIPTION = "Priority: highest job priority first, then FCFS."


class Priority(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def static_score(self, job: Job) -> float:
        return -float(job.priority)
