"""First come, first served: score ``s``."""

from __future__ import annotations

from app.domains.hpc.heuristics.base import ScoreHeuristic
from app.domains.hpc.types import Job

NAME = "fcfs"
DESCRIPTION = "First come, first served: earliest submit time first."


class Fcfs(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def static_score(self, job: Job) -> float:
        return job.submit_time
