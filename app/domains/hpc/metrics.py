"""Per-sequence scheduling metrics (spec A.6 plus the usual makespan and fairness figures).

All functions take a :class:`app.domains.hpc.rlscheduler.SequenceResult` (both semantics produce
one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.domains.hpc.rlscheduler import SequenceResult

#: bounded-slowdown threshold in seconds
BSLD_TAU_S = 10.0


def _wait(res: SequenceResult) -> npt.NDArray[np.float64]:
    return res.start.astype(np.float64) - res.submit.astype(np.float64)


def bounded_slowdowns(res: SequenceResult, tau_s: float = BSLD_TAU_S) -> npt.NDArray[np.float64]:
    """``max(1, (wait + run) / max(run, tau))`` per job."""
    run = res.run.astype(np.float64)
    return np.maximum(1.0, (_wait(res) + run) / np.maximum(run, tau_s))


def avg_bounded_slowdown(res: SequenceResult, tau_s: float = BSLD_TAU_S) -> float:
    return float(np.mean(bounded_slowdowns(res, tau_s)))


def avg_wait(res: SequenceResult) -> float:
    return float(np.mean(_wait(res)))


def max_wait(res: SequenceResult) -> float:
    return float(np.max(_wait(res)))


def avg_turnaround(res: SequenceResult) -> float:
    return float(np.mean(_wait(res) + res.run.astype(np.float64)))


def utilization_rlscheduler(res: SequenceResult) -> float:
    """RLScheduler's score_type 3: ``sum(run * procs) / ((t_end - s_first) * MaxProcs)``.

    ``t_end`` is the episode end (the last *start* in rlscheduler semantics).
    """
    span = res.end_time - float(res.submit[0])
    if span <= 0:
        return 0.0
    work = float(np.sum(res.run.astype(np.float64) * res.procs.astype(np.float64)))
    return work / (span * res.max_procs)


def utilization_makespan(res: SequenceResult) -> float:
    """Usual utilisation: work over ``(last completion - first submit) * MaxProcs``."""
    end = float(np.max(res.start.astype(np.float64) + res.run.astype(np.float64)))
    span = end - float(res.submit[0])
    if span <= 0:
        return 0.0
    work = float(np.sum(res.run.astype(np.float64) * res.procs.astype(np.float64)))
    return work / (span * res.max_procs)


def jain_index(values: npt.NDArray[np.float64]) -> float:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)``; 1.0 for an empty or all-zero vector."""
    if values.size == 0:
        return 1.0
    denom = float(values.size) * float(np.sum(values * values))
    if denom == 0.0:
        return 1.0
    return float(np.sum(values)) ** 2 / denom


def user_fairness(res: SequenceResult, tau_s: float = BSLD_TAU_S) -> float:
    """Jain index over users of each user's mean bounded slowdown (unknown user = one group)."""
    bsld = bounded_slowdowns(res, tau_s)
    users = res.user if res.user is not None else np.zeros(bsld.shape[0], dtype=np.int64)
    uniq, inverse = np.unique(users, return_inverse=True)
    sums = np.bincount(inverse, weights=bsld, minlength=uniq.size)
    counts = np.bincount(inverse, minlength=uniq.size)
    return jain_index(sums / counts)


@dataclass(frozen=True, slots=True)
class SequenceMetrics:
    bsld: float
    wait_s: float
    max_wait_s: float
    turnaround_s: float
    utilization: float
    utilization_makespan: float
    fairness: float


def summarize(res: SequenceResult) -> SequenceMetrics:
    return SequenceMetrics(
        bsld=avg_bounded_slowdown(res),
        wait_s=avg_wait(res),
        max_wait_s=max_wait(res),
        turnaround_s=avg_turnaround(res),
        utilization=utilization_rlscheduler(res),
        utilization_makespan=utilization_makespan(res),
        fairness=user_fairness(res),
    )
