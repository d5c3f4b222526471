"""UNICEP (Tang et al.): score ``-w / (log2(n) * r)`` with ``w = now - s`` (textbook form).

Guards: ``w`` clamped at 0; ``r <= 0`` becomes 0.1; ``n`` below 1 counts as 1 (so ``log2`` is never
negative); like the reference code, ``1e-15`` is added to the denominator, so jobs of size 1 have a
near-zero denominator and go first once they have waited at all.
"""

from __future__ import annotations

import math

from app.domains.hpc.heuristics.base import ScoreHeuristic, guarded
from app.domains.hpc.types import Job

NAME = "unicep"
DESCRIPTION = "UNICEP: favours long-waiting small short jobs: -w/(log2(n)*r)."
DENOMINATOR_EPS = 1e-15


class Unicep(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def raw_score(self, job: Job, now: float) -> float:
        w = now - job.submit_time
        w = w if w > 0.0 else 0.0
        n = self.size(job)
        n = n if n > 1.0 else 1.0
        return -w / (math.log2(n) * guarded(job.walltime_s) + DENOMINATOR_EPS)
