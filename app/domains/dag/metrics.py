"""Per-episode DAG metrics (spec 7.5): JCT statistics, makespan and executor utilisation.

JCT = completion of the job's last stage - arrival; jobs that did not finish are left out of the
JCT statistics (every evaluated episode runs to completion, so none are).  Makespan = last
completion - first arrival.  Utilisation = executor-time spent running tasks / (executors x
makespan); moving and idle time count as unused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.domains.dag.simulate import EpisodeResult

__all__ = ["EpisodeMetrics", "episode_metrics"]


@dataclass(frozen=True, slots=True)
class EpisodeMetrics:
    jobs: int
    finished: int
    avg_jct_s: float
    p50_jct_s: float
    p95_jct_s: float
    makespan_s: float
    executor_utilization: float
    avg_jobs_in_system: float


def episode_metrics(res: EpisodeResult) -> EpisodeMetrics:
    done = ~np.isnan(res.completion_ms)
    jct = (res.completion_ms[done] - res.arrival_ms[done]) / 1000.0
    if jct.size == 0:
        nan = float("nan")
        return EpisodeMetrics(len(res.arrival_ms), 0, nan, nan, nan, nan, nan, nan)
    span_ms = float(np.max(res.completion_ms[done]) - np.min(res.arrival_ms))
    util = res.busy_ms / (res.num_executors * span_ms) if span_ms > 0 else 0.0
    return EpisodeMetrics(
        jobs=len(res.arrival_ms),
        finished=int(done.sum()),
        avg_jct_s=float(np.mean(jct)),
        p50_jct_s=float(np.percentile(jct, 50)),
        p95_jct_s=float(np.percentile(jct, 95)),
        makespan_s=span_ms / 1000.0,
        executor_utilization=float(util),
        avg_jobs_in_system=float(np.sum(jct) * 1000.0 / span_ms) if span_ms > 0 else 0.0,
    )
