"""The training twin follows the service's decision core and encoder step by step.

At every step of every round, the twin's observation rows, mask and row->candidate index must equal
``encode_view(DecisionRun.view())`` for the same cluster state, and applying the same pick to both
must keep them in lock-step (same starts, same reservation, same end of round).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.domains.hpc.decision import DecisionConfig, DecisionRun, decide
from app.domains.hpc.encoding import encode_view
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.types import Backfill, ClusterState, Job, Node, Placement, RunningJob
from training.hpc_env import HpcEpisode, JobTable, run_sequence

TRACE = Path(__file__).resolve().parents[3] / "data" / "lublin_256.swf.gz"


def _jid(j: int) -> str:
    return f"{j:07d}"  # zero-padded: string order == trace order, as the twin breaks ties


@pytest.fixture(scope="module")
def table() -> JobTable:
    if not TRACE.exists():
        pytest.skip(f"{TRACE} missing")
    return JobTable.from_swf(str(TRACE))


def _job(t: JobTable, j: int) -> Job:
    return Job(
        id=_jid(j),
        per_task={"cpu": 1.0},
        walltime_s=float(t.walltime[j]),
        submit_time=float(t.submit[j]),
        tasks=int(t.procs[j]),
    )


def cluster_state(ep: HpcEpisode) -> ClusterState:
    """The snapshot the service would receive at the start of the twin's current round."""
    t = ep.t
    running: list[RunningJob] = []
    used = 0
    for j, start in sorted(ep.running.items()):
        n = int(t.procs[j])
        placements = tuple(Placement(node_id=f"n{used + k:03d}", tasks=1) for k in range(n))
        running.append(RunningJob(job=_job(t, j), placements=placements, start_time=start))
        used += n
    nodes = tuple(
        Node(id=f"n{i:03d}", capacity={"cpu": 1.0}, allocated={"cpu": 1.0} if i < used else {})
        for i in range(int(t.capacity))
    )
    pending = tuple(_job(t, j) for j in ep.queue)
    return ClusterState(now=ep.now, nodes=nodes, running=tuple(running), pending=pending)


def _config(backfill: bool) -> DecisionConfig:
    return DecisionConfig(backfill=Backfill.EASY if backfill else Backfill.NONE)


@pytest.mark.parametrize(
    ("start", "backfill", "seed"), [(300, True, 0), (6400, True, 1), (500, False, 2)]
)
def test_twin_matches_decision_run_and_encoder_step_by_step(
    table: JobTable, start: int, backfill: bool, seed: int
) -> None:
    assert _lockstep(table, start, 120, backfill, seed) > 100


def _lockstep(table: JobTable, start: int, length: int, backfill: bool, seed: int) -> int:
    """Drive the twin and ``DecisionRun`` with the same random picks, checking every step;
    returns the number of steps."""
    rng = np.random.default_rng(seed)
    ep = HpcEpisode(table, backfill=backfill, auto_forced=False)
    ep.reset(start, length)
    run: DecisionRun | None = None
    round_id = -1
    started_in_round: list[str] = []
    steps = 0
    while not ep.done:
        if ep.rounds != round_id:
            if run is not None:  # the previous round ended in both (or could start nothing)
                assert run.done or not any(run.view().fits_now)
                assert sorted(a.job_id for a in run.allocations) == sorted(started_in_round)
            round_id, started_in_round = ep.rounds, []
            run = DecisionRun(cluster_state(ep), _config(backfill))
        assert run is not None
        view = run.view()
        expected = encode_view(view)
        mine = ep.observe()
        np.testing.assert_allclose(mine.obs, expected.obs, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(mine.mask, expected.mask)
        np.testing.assert_array_equal(mine.index, expected.index)
        row = int(rng.choice(np.flatnonzero(mine.mask)))
        job_id = _jid(ep.queue[int(mine.index[row])])
        before = ep.started
        run.apply(int(expected.index[row]))
        ep.step_queue(int(mine.index[row]))
        if ep.started > before:
            started_in_round.append(job_id)
        if run.reservation is not None and ep.rounds == round_id:
            assert run.reservation.job_id == _jid(ep.res_idx)
            assert run.reservation.start_at == pytest.approx(ep.res_start)
        steps += 1
    return steps


def _overrun_swf(path: Path) -> Path:
    """A trace where many jobs run longer than they requested (as 1.7% of KTH-SP2 do): while
    such a job overruns, its requested end is in the past and the core releases it at ``now``."""
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


@pytest.fixture(scope="module")
def overrun(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, JobTable]:
    path = _overrun_swf(tmp_path_factory.mktemp("overrun") / "overrun.swf")
    table = JobTable.from_swf(str(path))
    assert (table.run > table.walltime).mean() > 0.2  # the trace does exercise overruns
    return path, table


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_twin_matches_decision_run_when_jobs_overrun_their_requests(
    overrun: tuple[Path, JobTable], seed: int
) -> None:
    # overdue running jobs (requested end already past) all release together at now in the
    # core's shadow time; the twin must reserve at the same time with the same spare processors
    _, table = overrun
    assert _lockstep(table, 10, 300, True, seed) > 200


@pytest.mark.parametrize("heuristic", ["fcfs", "f1", "sjf"])
def test_twin_replays_like_the_kairos_simulator_when_jobs_overrun(
    overrun: tuple[Path, JobTable], heuristic: str
) -> None:
    from app.domains.hpc.simulate import simulate_kairos
    from app.domains.hpc.swf import load_swf

    path, table = overrun
    start, length = 10, 300
    result = simulate_kairos(
        load_swf(path), start, length, get_heuristic(heuristic), config=_config(True), pooled=True
    )
    ep = run_sequence(table, start, length, lambda e: e.teacher_pos(heuristic), backfill=True)
    np.testing.assert_array_equal(ep.start_time, result.start)


@pytest.mark.parametrize("heuristic", ["sjf", "f1", "fcfs", "wfp3", "unicep"])
def test_teacher_rounds_equal_the_services_heuristic_rounds(
    table: JobTable, heuristic: str
) -> None:
    policy = get_heuristic(heuristic)
    ep = HpcEpisode(table, backfill=True, auto_forced=False)
    ep.reset(7000, 150)
    checked = 0
    while not ep.done:
        decision = decide(cluster_state(ep), policy, _config(True))
        round_id, started = ep.rounds, []
        while ep.rounds == round_id and not ep.done:
            pos = ep.teacher_pos(heuristic)
            j, before = ep.queue[pos], ep.started
            ep.step_queue(pos)
            if ep.started > before:
                started.append(_jid(j))
        assert sorted(a.job_id for a in decision.allocations) == sorted(started)
        checked += 1
    assert checked > 20


def test_episode_accounting(table: JobTable) -> None:
    rewards = []
    ep = HpcEpisode(table)
    rewards.append(ep.reset(100, 200))
    while not ep.done:
        rewards.append(ep.step_queue(ep.teacher_pos("sjf")))
    assert not np.isnan(ep.start_time).any()
    submit = table.submit[100:300]
    assert (ep.start_time >= submit).all()
    # the dense rewards add up to RLScheduler's terminal reward, -avg bsld
    assert sum(rewards) == pytest.approx(-ep.avg_bsld())
    assert ep.avg_bsld() >= 1.0


def test_fcfs_without_backfilling_reproduces_the_published_lublin1_cell(table: JobTable) -> None:
    # Without backfilling FCFS never reorders, so Kairos and RLScheduler semantics coincide:
    # hpc-reproduction.md A.10, Lublin-1 FCFS no BF = 7273.77 (seed-1 windows, 10 x 1024).
    starts = [1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085]
    values = [
        run_sequence(table, s, 1024, lambda e: e.teacher_pos("fcfs"), backfill=False).avg_bsld()
        for s in starts
    ]
    assert float(np.mean(values)) == pytest.approx(7273.77, abs=0.005)


@pytest.mark.parametrize("backfill", [True, False])
def test_window_of_a_long_queue_matches_the_encoder(table: JobTable, backfill: bool) -> None:
    ep = HpcEpisode(table, backfill=backfill, auto_forced=False)
    ep.reset(7762, 1024)
    while len(ep.queue) <= 140:  # largest-first lets the queue grow past the 128-row window
        pickable = np.flatnonzero(ep._masks()[1])
        sizes = table.procs[np.asarray(ep.queue)[pickable]]
        ep.step_queue(int(pickable[np.argmax(sizes)]))
    run = DecisionRun(cluster_state(ep), _config(backfill))
    for _ in range(3):  # the first step of the round, then two more
        expected = encode_view(run.view())
        mine = ep.observe()
        assert len(mine.index) == 128
        np.testing.assert_allclose(mine.obs, expected.obs, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(mine.mask, expected.mask)
        np.testing.assert_array_equal(mine.index, expected.index)
        row = int(np.flatnonzero(mine.mask)[-1])
        round_id = ep.rounds
        run.apply(int(expected.index[row]))
        ep.step_queue(int(mine.index[row]))
        if ep.rounds != round_id:
            break


@pytest.mark.parametrize(("heuristic", "backfill"), [("sjf", True), ("f1", True), ("wfp3", False)])
def test_twin_replays_like_the_kairos_simulator(
    table: JobTable, heuristic: str, backfill: bool
) -> None:
    from app.domains.hpc.simulate import simulate_kairos
    from app.domains.hpc.swf import load_swf

    trace = load_swf(TRACE)
    start, length = 2756, 200
    result = simulate_kairos(
        trace,
        start,
        length,
        get_heuristic(heuristic),
        config=_config(backfill),
        pooled=True,
    )
    ep = run_sequence(table, start, length, lambda e: e.teacher_pos(heuristic), backfill=backfill)
    np.testing.assert_array_equal(ep.start_time, result.start)
