"""Smallest first: score ``n`` (job size), ties by submit time then id."""

from __future__ import annotations

from app.domains.hpc.heuristics.base import ScoreHeuristic
from app.domains.hpc.types import Job

NAME = "smallest"
DESCRIPTION = "Smallest first: fewest requested units of the size resource (cpu) first, then FCFS."


class Smallest(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def static_score(self, job: Job) -> float:
        return self.size(job)
