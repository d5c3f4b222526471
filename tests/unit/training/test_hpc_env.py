"""The training interface runs on the engine env and equals the frozen training twin.

``tests/unit/domain/reference/hpc_env.py`` is the array twin that training used before issue 19
(its own copy of the EASY rules and the features).  Driven with the same picks, the engine
adapter must give the same observation rows, masks, row->queue indices, rewards, teacher picks
and episode ends.  The twin broke ties in trace order, the engine by job id (the service's
order), so the comparison renumbers the jobs with ids of one width (then both orders agree).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.env import TraceJobs
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.simulate import simulate_kairos
from app.domains.hpc.swf import SwfTrace, load_swf
from app.domains.hpc.types import Backfill
from tests.unit.domain.reference import hpc_env as frozen
from training.hpc_env import HpcEpisode, JobTable, run_sequence

TRACE = Path(__file__).resolve().parents[3] / "data" / "lublin_256.swf.gz"


def _same_width_ids(trace: SwfTrace) -> SwfTrace:
    return dataclasses.replace(trace, job_id=np.arange(trace.n_jobs, dtype=np.int64) + 1_000_000)


def _tables(trace: SwfTrace) -> tuple[JobTable, frozen.JobTable]:
    trace = _same_width_ids(trace)
    old = frozen.JobTable(
        trace.name,
        trace.submit_time.astype(np.float64),
        trace.run_time.astype(np.float64),
        trace.request_time.astype(np.float64),
        trace.processors.astype(np.float64),
        float(trace.max_procs),
    )
    return JobTable(trace.name, TraceJobs.from_trace(trace)), old


@pytest.fixture(scope="module")
def lublin() -> SwfTrace:
    if not TRACE.exists():
        pytest.skip(f"{TRACE} missing")
    return load_swf(TRACE)


@pytest.fixture(scope="module")
def table(lublin: SwfTrace) -> JobTable:
    return JobTable(lublin.name, TraceJobs.from_trace(lublin))


def _lockstep(
    trace: SwfTrace,
    start: int,
    length: int,
    *,
    backfill: bool,
    seed: int,
    auto_forced: bool,
    teacher: str | None = None,
    max_candidates: int = 128,
) -> int:
    """Drive the adapter and the frozen twin with the same picks, checking every step."""
    new_table, old_table = _tables(trace)
    kw = {"backfill": backfill, "auto_forced": auto_forced, "max_candidates": max_candidates}
    old = frozen.HpcEpisode(old_table, **kw)  # type: ignore[arg-type]
    new = HpcEpisode(new_table, **kw)  # type: ignore[arg-type]
    assert new.reset(start, length) == old.reset(start, length)
    rng = np.random.default_rng(seed)
    steps = 0
    while not old.done:
        assert not new.done
        o_old, o_new = old.observe(pad_to=max_candidates), new.observe(pad_to=max_candidates)
        np.testing.assert_array_equal(o_new.obs, o_old.obs)
        np.testing.assert_array_equal(o_new.mask, o_old.mask)
        np.testing.assert_array_equal(o_new.index, o_old.index)
        assert new.queue == old.queue
        if teacher is not None:
            visible = o_old.index[o_old.index >= 0]
            pos = old.teacher_pos(teacher, visible=visible)
            assert new.teacher_pos(teacher, visible=visible) == pos
        else:
            pos = int(o_old.index[rng.choice(np.flatnonzero(o_old.mask))])
        assert new.step_queue(pos) == old.step_queue(pos)
        steps += 1
    assert new.done
    assert new.avg_bsld() == old.avg_bsld()
    np.testing.assert_array_equal(new.start_time, old.start_time)
    return steps


@pytest.mark.parametrize(
    ("start", "backfill", "seed", "auto_forced"),
    [(300, True, 0, False), (6400, True, 1, True), (500, False, 2, True), (7085, True, 4, False)],
)
def test_engine_adapter_equals_the_frozen_twin(
    lublin: SwfTrace, start: int, backfill: bool, seed: int, auto_forced: bool
) -> None:
    assert (
        _lockstep(lublin, start, 150, backfill=backfill, seed=seed, auto_forced=auto_forced) > 100
    )


@pytest.mark.parametrize("teacher", ["sjf", "f1", "wfp3", "unicep", "fcfs"])
def test_teacher_picks_equal_the_frozen_twin(lublin: SwfTrace, teacher: str) -> None:
    assert _lockstep(lublin, 7000, 150, backfill=True, seed=0, auto_forced=True, teacher=teacher)


def test_long_queue_window_equals_the_frozen_twin(lublin: SwfTrace) -> None:
    _lockstep(lublin, 2756, 96, backfill=True, seed=3, auto_forced=False, max_candidates=8)
    _lockstep(lublin, 2756, 96, backfill=False, seed=5, auto_forced=False, max_candidates=8)


def _overrun_swf(path: Path) -> Path:
    """Many jobs run longer than they requested: while such a job overruns, its requested end is
    in the past and the core releases it at ``now``."""
    lines = ["; MaxNodes: 8\n", "; MaxProcs: 8\n"]
    rng = np.random.default_rng(11)
    t = 0
    for i in range(1, 400):
        t += int(rng.choice([0, 3, 30, 200]))
        run = int(rng.integers(1, 2000))
        req = max(1, int(run * rng.choice([0.2, 0.5, 1, 3])))
        procs = int(rng.integers(1, 9))
        lines.append(f"{i} {t} -1 {run} {procs} -1 -1 -1 {req} -1 1 -1 -1 -1 0 -1 -1 -1\n")
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("seed", [3, 4])
def test_equals_the_frozen_twin_when_jobs_overrun(tmp_path: Path, seed: int) -> None:
    trace = load_swf(_overrun_swf(tmp_path / "overrun.swf"))
    assert (trace.run_time > trace.request_time).mean() > 0.2
    assert _lockstep(trace, 10, 300, backfill=True, seed=seed, auto_forced=False) > 200


@pytest.mark.parametrize(("heuristic", "backfill"), [("sjf", True), ("f1", True), ("wfp3", False)])
def test_teacher_replays_like_the_kairos_simulator(
    lublin: SwfTrace, table: JobTable, heuristic: str, backfill: bool
) -> None:
    start, length = 2756, 200
    config = DecisionConfig(backfill=Backfill.EASY if backfill else Backfill.NONE)
    result = simulate_kairos(
        lublin, start, length, get_heuristic(heuristic), config=config, pooled=True
    )
    ep = run_sequence(table, start, length, lambda e: e.teacher_pos(heuristic), backfill=backfill)
    np.testing.assert_array_equal(ep.start_time, result.start)


@pytest.mark.slow
def test_fcfs_without_backfilling_reproduces_the_published_lublin1_cell(table: JobTable) -> None:
    # Without backfilling FCFS never reorders, so Kairos and RLScheduler semantics coincide:
    # hpc-reproduction.md A.10, Lublin-1 FCFS no BF = 7273.77 (seed-1 windows, 10 x 1024).
    starts = [1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085]
    values = [
        run_sequence(table, s, 1024, lambda e: e.teacher_pos("fcfs"), backfill=False).avg_bsld()
        for s in starts
    ]
    assert float(np.mean(values)) == pytest.approx(7273.77, abs=0.005)


def test_episode_accounting(table: JobTable) -> None:
    rewards = []
    ep = HpcEpisode(table)
    rewards.append(ep.reset(100, 200))
    while not ep.done:
        rewards.append(ep.step_queue(ep.teacher_pos("sjf")))
    assert not np.isnan(ep.start_time).any()
    assert (ep.start_time >= table.jobs.submit[100:300]).all()
    # the dense rewards add up to RLScheduler's terminal reward, -avg bsld
    assert sum(rewards) == pytest.approx(-ep.avg_bsld())
    assert ep.avg_bsld() >= 1.0


def test_a_masked_position_is_refused(table: JobTable) -> None:
    ep = HpcEpisode(table, auto_forced=False)
    ep.reset(7085, 200)
    while ep.observe().mask.all():
        ep.step_queue(ep.teacher_pos("fcfs"))
    masked = int(ep.observe().index[np.flatnonzero(~ep.observe().mask)[0]])
    with pytest.raises(ValueError, match="masked out"):
        ep.step_queue(masked)


def test_the_training_twin_is_gone() -> None:
    import training.hpc_env as adapter

    assert not hasattr(adapter, "heuristic_scores")
    assert "_earliest" not in vars(adapter.HpcEpisode)
