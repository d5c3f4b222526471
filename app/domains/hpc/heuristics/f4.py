"""F4 (Carastan-Santos & de Camargo, SC'17): ``r * sqrt(n) + 530000 * log10(s)``.

Guards (as F1): ``r <= 0`` and ``s <= 0`` become 0.1.
"""

from __future__ import annotations

import math

from app.domains.hpc.heuristics.base import ScoreHeuristic, guarded
from app.domains.hpc.types import Job

NAME = "f4"
DESCRIPTION = "F4 (learned priority, SC'17): r*sqrt(n) + 530000*log10(s)."


class F4(ScoreHeuristic):
    name = NAME
    description = DESCRIPTION

    def static_score(self, job: Job) -> float:
        r = guarded(job.walltime_s)
        s = guarded(job.submit_time)
        return r * math.sqrt(self.size(job)) + 530_000.0 * math.log10(s)
