"""WFP3 (Tang et al.): score ``-(w / r)^3 * n`` with ``w = now - s`` (textbook, not RLScheduler's).

``w`` is clamped at 0 (a job submitted "in the future" has not waited); ``r <= 0`` becomes 0.1.
"""

from __future__ import annotations

from app.domains.hpc.heuristics.base import ScoreHeuristic, guarded
from app.domains.hpc.types import Job

NAME = "wfp3"
DESCRIPTION = (
    "WFP3: favours long-waiting jobs relative to their walltime, scaled by size: -(w/r)^3*n."
)


class Wfp3(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def raw_score(self, job: Job, now: float) -> float:
        w = now - job.submit_time
        w = w if w > 0.0 else 0.0
        x = w / guarded(job.walltime_s)
        return -(x * x * x) * self.size(job)
