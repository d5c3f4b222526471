from __future__ import annotations

import numpy as np
import pytest

from app.domains.hpc.metrics import (
    avg_bounded_slowdown,
    avg_turnaround,
    avg_wait,
    bounded_slowdowns,
    jain_index,
    max_wait,
    summarize,
    user_fairness,
    utilization_makespan,
    utilization_rlscheduler,
)
from app.domains.hpc.rlscheduler import SequenceResult


def _result(submit, run, procs, start, end_time, max_procs=4, user=None):
    return SequenceResult(
        submit=np.asarray(submit, dtype=np.float64),
        run=np.asarray(run, dtype=np.float64),
        procs=np.asarray(procs, dtype=np.int64),
        start=np.asarray(start, dtype=np.float64),
        end_time=end_time,
        max_procs=max_procs,
        user=None if user is None else np.asarray(user, dtype=np.int64),
    )


# submit, run, procs, start: waits 0, 10, 95; job 2 is short (run 5 < tau)
RES = _result([0, 0, 5], [100, 20, 5], [2, 4, 1], [0, 10, 100], end_time=100.0, user=[1, 2, 2])


def test_bounded_slowdown_uses_tau_10_and_floor_1():
    assert bounded_slowdowns(RES).tolist() == [1.0, 1.5, 10.0]  # (95 + 5) / max(5, 10) = 10
    assert avg_bounded_slowdown(RES) == pytest.approx(12.5 / 3)


def test_wait_turnaround_max_wait():
    assert avg_wait(RES) == pytest.approx(105 / 3)
    assert max_wait(RES) == 95.0
    assert avg_turnaround(RES) == pytest.approx((100 + 30 + 100) / 3)


def test_utilisation_definitions():
    work = 100 * 2 + 20 * 4 + 5 * 1
    # rlscheduler: to the last *start* (100) from the first submit (0)
    assert utilization_rlscheduler(RES) == pytest.approx(work / (100 * 4))
    # makespan: to the last completion (105)
    assert utilization_makespan(RES) == pytest.approx(work / (105 * 4))


def test_jain_index():
    assert jain_index(np.array([2.0, 2.0, 2.0])) == pytest.approx(1.0)
    assert jain_index(np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert jain_index(np.array([])) == 1.0
    # users: 1 -> [1.0], 2 -> [1.5, 10.0] mean 5.75
    x = np.array([1.0, 5.75])
    assert user_fairness(RES) == pytest.approx(x.sum() ** 2 / (2 * (x * x).sum()))


def test_summarize_collects_everything():
    m = summarize(RES)
    assert m.bsld == avg_bounded_slowdown(RES)
    assert m.utilization == utilization_rlscheduler(RES)
    assert m.utilization_makespan == utilization_makespan(RES)
    assert m.max_wait_s == 95.0
