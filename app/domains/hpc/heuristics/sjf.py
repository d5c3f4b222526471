"""Shortest job first: score ``r`` (requested walltime), ties by submit time then id."""

from __future__ import annotations

from app.domains.hpc.heuristics.base import ScoreHeuristic
from app.domains.hpc.types import Job

NAME = "sjf"
DESCRIPTION = "Shortest job first: smallest requested walltime first, then FCFS."


class Sjf(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def static_score(self, job: Job) -> float:
        return job.walltime_s
