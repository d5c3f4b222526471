"""F1 (Carastan-Santos & de Camargo, SC'17): ``log10(r) * n + 870 * log10(s)``.

Guards: ``r <= 0`` and ``s <= 0`` become 0.1 before the log.
"""

from __future__ import annotations

import math

from app.domains.hpc.heuristics.base import ScoreHeuristic, guarded
from app.domains.hpc.types import Job

NAME = "f1"
DESCRIPTION = "F1 (learned priority, SC'17): log10(r)*n + 870*log10(s)."


class F1(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def static_score(self, job: Job) -> float:
        r = guarded(job.walltime_s)
        s = guarded(job.submit_time)
        return math.log10(r) * self.size(job) + 870.0 * math.log10(s)
