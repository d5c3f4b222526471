"""F3 (Carastan-Santos & de Camargo, SC'17): ``r * n + 6860000 * log10(s)``.

Guards (as F1): ``r <= 0`` and ``s <= 0`` become 0.1.
"""

from __future__ import annotations

import math

from app.domains.hpc.heuristics.base import ScoreHeuristic, guarded
from app.domains.hpc.types import Job

NAME = "f3"
DESCRIPTION = "F3 (learned priority, SC'17): r*n + 6860000*log10(s)."


class F3(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def static_score(self, job: Job) -> float:
        r = guarded(job.walltime_s)
        s = guarded(job.submit_time)
        return r * self.size(job) + 6_860_000.0 * math.log10(s)
