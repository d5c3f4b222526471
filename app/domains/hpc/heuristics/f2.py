"""F2 (Carastan-Santos & de Camargo, SC'17): ``sqrt(r) * n + 25600 * log10(s)``.

Guards (as F1): ``r <= 0`` and ``s <= 0`` become 0.1.
"""

from __future__ import annotations

import math

from app.domains.hpc.heuristics.base import ScoreHeuristic, guarded
from app.domains.hpc.types import Job

NAME = "f2"
DESCRIPTION = "F2 (learned priority, SC'17): sqrt(r)*n + 25600*log10(s)."


class F2(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def static_score(self, job: Job) -> float:
        r = guarded(job.walltime_s)
        s = guarded(job.submit_time)
        return math.sqrt(r) * self.size(job) + 25600.0 * math.log10(s)
