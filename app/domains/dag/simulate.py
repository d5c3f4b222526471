"""Event simulator of a Spark-like cluster running DAG jobs (spec section 2), three semantics on the
same :class:`~app.domains.dag.policy.DagPolicy` decision functions.

* ``decima-compat``: decima-sim's environment: jobs from a legacy ``RandomState`` (initial
  jobs draw query then size, streamed jobs size then query, gaps ``int(Exponential)``), executor
  keys from the same generator, duration indices from a second one (decima-sim's global RNG,
  which its ``test.py`` leaves unseeded; here ``RandomState(42 + seed)`` as in the spec's
  driver), both drawn as block uniforms (same distributions, not the same streams); the fair share
  counts jobs with an unsaturated stage; the duration estimate is the stage's rough mean.
* ``spark-sched-sim-compat``: spark-sched-sim's environment: the first job at t = 0, then gaps
  ``Exponential`` (not truncated) from one ``Generator`` (``default_rng(seed)``) that also draws
  every key and duration; a job whose supply already equals the cluster is not selectable (except
  the source job); the fair share counts active jobs; the estimate is the duration sampled at the
  stage's latest launch.
* ``kairos``: spark-sched-sim's rules with the estimate that a live cluster can know: the duration
  of the stage's latest *finished* task (the rough mean before any finished), and one more round:
  a job's completion starts a round over the global pool (which then holds the job's idle
  executors and the one that ran its last task, unless a commitment took it) when another job is
  active.  The two repositories leave those executors idle until the next arrival, so with no
  arrival left the remaining jobs never get them back.

Shared rules: executors are never preempted; an executor that finishes a task keeps working on
its stage while it has unlaunched tasks; otherwise it fulfils a commitment of its stage, or starts
a round (its job's free executors when the stage's completion unlocked stages, else the stage's
executors); a job arrival starts a round over the global pool when it is not empty.  A committed
executor of another job moves (``moving_delay_ms``) and starts on arrival; one that finds its
target saturated takes a backup stage.  Simultaneous events are handled first in, first out.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, cast

import numpy as np

from app.domains.dag.policy import Action, DagPolicy, FairCount, JobView, RoundView, StageView
from app.domains.dag.tpch import (
    NUM_QUERIES,
    QUERY_SIZES,
    StageRecord,
    TpchDag,
    TpchLibrary,
    sample_executor_key,
    sample_task_duration,
)
from app.kernel.errors import InvalidPickError

__all__ = [
    "SEMANTICS",
    "Episode",
    "EpisodeResult",
    "JobArrival",
    "Semantics",
    "SimConfig",
    "decima_jobs",
    "run_episode",
    "run_jobs",
    "spark_jobs",
]

Semantics = Literal["decima-compat", "spark-sched-sim-compat", "kairos"]
SEMANTICS: Final[tuple[Semantics, ...]] = ("decima-compat", "spark-sched-sim-compat", "kairos")
MOVING_DELAY_MS: Final = 2000.0
#: decima-sim's test seeds: ``env.seed(DECIMA_ENV_SEED_BASE + k)``
DECIMA_ENV_SEED_BASE: Final = 10_000_000
DECIMA_DURATION_SEED_BASE: Final = 42


@dataclass(frozen=True, slots=True)
class JobArrival:
    arrival_ms: float
    dag: TpchDag


@dataclass(frozen=True, slots=True)
class SimConfig:
    semantics: Semantics
    num_executors: int
    moving_delay_ms: float = MOVING_DELAY_MS


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    arrival_ms: np.ndarray
    completion_ms: np.ndarray  # NaN for a job that did not finish
    busy_ms: float
    num_executors: int
    decisions: int
    end_ms: float

    @property
    def jct_ms(self) -> np.ndarray:
        out: np.ndarray = self.completion_ms - self.arrival_ms
        return out


def decima_jobs(
    lib: TpchLibrary, rs: np.random.RandomState, num_init: int, num_stream: int, interval_ms: float
) -> list[JobArrival]:
    """decima-sim's ``generate_tpch_jobs`` draw order."""
    out: list[JobArrival] = []
    for _ in range(num_init):
        query = int(rs.randint(NUM_QUERIES)) + 1
        size = QUERY_SIZES[int(rs.randint(len(QUERY_SIZES)))]
        out.append(JobArrival(0.0, lib.get(size, query)))
    t = 0
    for _ in range(num_stream):
        t += int(rs.exponential(interval_ms))
        size = QUERY_SIZES[int(rs.randint(len(QUERY_SIZES)))]
        query = int(rs.randint(NUM_QUERIES)) + 1
        out.append(JobArrival(float(t), lib.get(size, query)))
    return out


def spark_jobs(
    lib: TpchLibrary, rng: np.random.Generator, num_jobs: int, interval_ms: float
) -> list[JobArrival]:
    """spark-sched-sim's ``job_sequence``: a job at t = 0, then exponential gaps."""
    out: list[JobArrival] = []
    t = 0.0
    for _ in range(num_jobs):
        query = 1 + int(rng.integers(NUM_QUERIES))
        size = str(rng.choice(QUERY_SIZES))
        out.append(JobArrival(t, lib.get(size, query)))
        t += float(rng.exponential(interval_ms))
    return out


class _Stage:
    __slots__ = (
        "children",
        "committed",
        "done",
        "executors",
        "finished",
        "idx",
        "job",
        "last_finished_ms",
        "moving",
        "next_task",
        "num_tasks",
        "parents",
        "recent_ms",
        "record",
    )

    def __init__(self, job: _Job, idx: int, record: StageRecord) -> None:
        self.job = job
        self.idx = idx
        self.record = record
        self.num_tasks = record.num_tasks
        self.next_task = 0
        self.finished = 0
        self.committed = 0
        self.moving = 0
        self.done = False
        self.parents: list[_Stage] = []
        self.children: list[_Stage] = []
        self.executors: dict[_Exec, None] = {}
        self.recent_ms = record.rough_duration_ms
        self.last_finished_ms = record.rough_duration_ms

    @property
    def no_more_tasks(self) -> bool:
        return self.next_task >= self.num_tasks

    def demand(self) -> int:
        return self.num_tasks - self.next_task - self.committed - self.moving

    def saturated(self) -> bool:
        return self.demand() <= 0


class _Job:
    __slots__ = (
        "arrival_ms",
        "completion_ms",
        "executors",
        "frontier",
        "id",
        "index",
        "num_done",
        "stages",
    )

    def __init__(self, index: int, arrival: JobArrival) -> None:
        self.index = index
        self.id = f"{index}:{arrival.dag.name}"
        self.arrival_ms = arrival.arrival_ms
        self.completion_ms = math.nan
        self.stages = [_Stage(self, i, r) for i, r in enumerate(arrival.dag.stages)]
        for p, c in arrival.dag.edges:
            self.stages[p].children.append(self.stages[c])
            self.stages[c].parents.append(self.stages[p])
        self.executors: dict[_Exec, None] = {}
        self.frontier: dict[_Stage, None] = {s: None for s in self.stages if not s.parents}
        self.num_done = 0


class _Exec:
    __slots__ = ("id", "job", "stage")

    def __init__(self, i: int) -> None:
        self.id = i
        self.job: _Job | None = None
        #: the stage of the task it last ran, cleared when parked or moved (decima's ``task``)
        self.stage: _Stage | None = None

    def __hash__(self) -> int:
        return self.id

    def detach_node(self) -> None:
        if self.stage is not None:
            self.stage.executors.pop(self, None)
            self.stage = None

    def detach_job(self) -> None:
        self.detach_node()
        if self.job is not None:
            self.job.executors.pop(self, None)
            self.job = None


_Source = _Job | _Stage | None
_TASK: Final = 0
_JOB: Final = 1
_EXEC: Final = 2


class _Engine:
    def __init__(
        self,
        cfg: SimConfig,
        jobs: Sequence[JobArrival],
        point: Callable[[int], int],
        pick: Callable[[int], int],
    ) -> None:
        self.cfg = cfg
        self.n = cfg.num_executors
        self.spark_rules = cfg.semantics != "decima-compat"
        self.fair_count: FairCount = "active" if self.spark_rules else "unsaturated"
        self.point = point
        self.pick = pick
        self.now = 0.0
        self.heap: list[tuple[float, int, int, object]] = []
        self.counter = itertools.count()
        self.executors = [_Exec(i) for i in range(self.n)]
        self.free: dict[_Job | None, dict[_Exec, None]] = {None: dict.fromkeys(self.executors)}
        self.commits: dict[object, dict[_Stage | None, int]] = {}
        self.moving: dict[_Exec, _Stage | None] = {}
        self.selected: set[_Stage] = set()
        self.active: dict[_Job, None] = {}
        self.all_jobs: list[_Job] = []
        self.busy_ms = 0.0
        self.decisions = 0
        for i, arrival in enumerate(jobs):
            job = _Job(i, arrival)
            self.all_jobs.append(job)
            if arrival.arrival_ms <= 0.0:
                self._add_job(job)
            else:
                self._push(arrival.arrival_ms, _JOB, job)
        self.exec_to_schedule: dict[_Exec, None] = dict.fromkeys(self.executors)
        self.source_job: _Job | None = None
        self.num_source = self.n

    # -- bookkeeping -----------------------------------------------------------------------

    def _push(self, t: float, kind: int, obj: object) -> None:
        heapq.heappush(self.heap, (t, next(self.counter), kind, obj))

    def _add_job(self, job: _Job) -> None:
        self.active[job] = None
        self.free[job] = {}

    def _free_add(self, job: _Job | None, ex: _Exec) -> None:
        if job is None:
            ex.detach_job()
        else:
            ex.detach_node()
        self.free[job][ex] = None

    def _free_remove(self, ex: _Exec) -> None:
        pool = self.free.get(ex.job)
        if pool is not None:
            pool.pop(ex, None)

    def _commit_add(self, source: _Source, stage: _Stage | None, k: int) -> None:
        targets = self.commits.setdefault(source, {})
        targets[stage] = targets.get(stage, 0) + k
        if stage is not None:
            stage.committed += k

    def _commit_pop(self, source: _Source) -> _Stage | None:
        targets = self.commits[source]
        stage = next(iter(targets))
        targets[stage] -= 1
        if targets[stage] == 0:
            del targets[stage]
        if not targets:
            del self.commits[source]
        if stage is not None:
            stage.committed -= 1
        return stage

    def _has_commit(self, source: _Source) -> bool:
        return source in self.commits

    def _move(self, ex: _Exec, stage: _Stage) -> None:
        ex.detach_job()
        self.moving[ex] = stage
        stage.moving += 1
        self._push(self.now + self.cfg.moving_delay_ms, _EXEC, ex)

    def _start_task(self, ex: _Exec, stage: _Stage) -> None:
        job = stage.job
        fresh = ex.stage is None or ex.stage.job is not job
        same = ex.stage is stage
        key = sample_executor_key(stage.record, len(job.executors), self.point)
        dur = sample_task_duration(
            stage.record, key, fresh_to_job=fresh, same_stage=same, pick=self.pick
        )
        ex.detach_node()
        stage.executors[ex] = None
        ex.stage = stage
        stage.next_task += 1
        stage.recent_ms = float(dur)
        if stage.no_more_tasks:
            job.frontier.pop(stage, None)
        self.busy_ms += dur
        self._push(self.now + dur, _TASK, (ex, stage, float(dur)))

    def _source_of(self, ex: _Exec) -> _Source:
        return ex.job if ex.stage is None else ex.stage

    # -- decima-sim's round machinery --------------------------------------------------------

    def _schedule(self) -> None:
        ex = next(iter(self.exec_to_schedule))
        source = self._source_of(ex)
        while self._has_commit(source) and self.exec_to_schedule:
            stage = self._commit_pop(source)
            ex, _ = self.exec_to_schedule.popitem()
            self._free_remove(ex)
            if stage is None:
                job = ex.job
                if job is not None and any(not s.no_more_tasks for s in job.stages):
                    self._free_add(job, ex)
                else:
                    self._free_add(None, ex)
            elif not stage.no_more_tasks:
                if ex.job is stage.job:
                    if stage in stage.job.frontier:
                        self._start_task(ex, stage)
                    else:
                        self._free_add(ex.job, ex)
                else:
                    self._move(ex, stage)
            else:
                self._backup(ex)

    def _backup(self, ex: _Exec) -> None:
        job = ex.job
        if job is not None:
            for stage in job.frontier:
                if not stage.saturated():
                    self._start_task(ex, stage)
                    return
        for other in self.active:
            for stage in other.stages:
                if self._selectable(stage, None):
                    self._move(ex, stage)
                    return
        self._free_add(ex.job, ex)

    def _selectable(self, stage: _Stage, supply: dict[_Job, int] | None) -> bool:
        if stage in self.selected or stage.saturated():
            return False
        if any(not p.saturated() for p in stage.parents):
            return False
        if supply is not None and self.spark_rules:
            job = stage.job
            return job is self.source_job or supply[job] < self.n
        return True

    def _assign(self, ex: _Exec, frontier_changed: bool) -> None:
        stage = ex.stage
        if stage is not None and not stage.no_more_tasks:
            self._start_task(ex, stage)
            return
        if frontier_changed:
            source_job = ex.job
            if self._has_commit(stage):
                self.exec_to_schedule = {ex: None}
                self._schedule()
            else:
                self._free_add(source_job, ex)
            self.exec_to_schedule = dict(self.free[source_job])
            self.source_job = source_job
            self.num_source = len(self.free[source_job])
        else:
            self.exec_to_schedule = {ex: None}
            if self._has_commit(stage):
                self._schedule()
            else:
                self.source_job = ex.job
                self.num_source = len(stage.executors) if stage is not None else 1

    def _remove_job(self, job: _Job) -> None:
        for ex in list(job.executors):
            ex.detach_job()
        for source in [s for s in self.commits if _job_of(s) is job]:
            for stage, k in self.commits.pop(source).items():
                if stage is not None:
                    stage.committed -= k
        for ex in self.free.pop(job):
            ex.detach_job()
            self.free[None][ex] = None
        for ex, stage in self.moving.items():
            if stage is not None and stage.job is job:
                self.moving[ex] = None
        del self.active[job]

    # -- the policy's view -------------------------------------------------------------------

    def supply(self) -> dict[_Job, int]:
        out = {job: len(job.executors) for job in self.active}
        for stage in self.moving.values():
            if stage is not None and stage.job in out:
                out[stage.job] += 1
        for source, targets in self.commits.items():
            src_job = _job_of(source)
            for stage, k in targets.items():
                if stage is not None and stage.job is not src_job and stage.job in out:
                    out[stage.job] += k
        return out

    def view(self) -> tuple[RoundView, list[_Job]]:
        supply = self.supply()
        jobs = list(self.active)
        estimate = self.cfg.semantics
        views: list[JobView] = []
        source_idx: int | None = None
        for j, job in enumerate(jobs):
            if job is self.source_job:
                source_idx = j
            stages = []
            for st in job.stages:
                selectable = self._selectable(st, supply)
                if estimate == "decima-compat":
                    d = st.record.rough_duration_ms
                elif estimate == "kairos":
                    d = st.last_finished_ms
                else:
                    d = st.recent_ms
                stages.append(
                    StageView(
                        index=st.idx,
                        unlaunched=st.num_tasks - st.next_task,
                        demand=st.demand(),
                        selectable=selectable,
                        runnable=selectable and st in job.frontier,
                        finished=st.done,
                        duration_ms=d,
                        children=tuple(c.idx for c in st.children),
                    )
                )
            views.append(JobView(job.id, job.arrival_ms, supply[job], tuple(stages)))
        view = RoundView(
            jobs=tuple(views),
            source_job=source_idx,
            num_source=self.num_source,
            num_executors=self.n,
            fair_count=self.fair_count,
        )
        return view, jobs

    # -- one decision and the simulation up to the next one ----------------------------------

    def step(self, action: Action | None, jobs: list[_Job]) -> bool:
        self.decisions += 1
        stage: _Stage | None = None
        if action is None:
            use = self.num_source
        else:
            if not 0 <= action.job < len(jobs):
                raise InvalidPickError(f"job index {action.job} out of range")
            job = jobs[action.job]
            if not 0 <= action.stage < len(job.stages):
                raise InvalidPickError(f"stage index {action.stage} out of range")
            stage = job.stages[action.stage]
            if not self._selectable(stage, self.supply()):
                raise InvalidPickError(f"stage {job.id}/{stage.idx} is not selectable")
            use = min(stage.demand(), action.executors, self.num_source)
            if use <= 0:
                raise InvalidPickError("an action must commit at least one executor")
            self.selected.add(stage)
        ex = next(iter(self.exec_to_schedule))
        self._commit_add(self._source_of(ex), stage, use)
        self.num_source -= use
        if self.num_source == 0:
            self.selected.clear()
            self._schedule()
        while self.heap and self.num_source == 0:
            self._advance()
        return self.num_source == 0 and not self.heap

    def _advance(self) -> None:
        t, _, kind, obj = heapq.heappop(self.heap)
        self.now = t
        if kind == _TASK:
            ex, stage, dur = cast(tuple[_Exec, _Stage, float], obj)
            self._task_done(ex, stage, dur)
        elif kind == _JOB:
            self._add_job(cast(_Job, obj))
            if self.free[None]:
                self.exec_to_schedule = dict(self.free[None])
                self.source_job = None
                self.num_source = len(self.free[None])
        else:
            self._exec_arrived(cast(_Exec, obj))

    def _task_done(self, ex: _Exec, stage: _Stage, dur: float) -> None:
        stage.finished += 1
        stage.last_finished_ms = dur
        job = stage.job
        changed = False
        if stage.finished == stage.num_tasks:
            stage.done = True
            job.num_done += 1
            for child in stage.children:
                if (
                    not child.no_more_tasks
                    and not child.done
                    and all(p.done for p in child.parents)
                    and child not in job.frontier
                ):
                    job.frontier[child] = None
                    changed = True
        self._assign(ex, changed)
        if job.num_done == len(job.stages):
            job.completion_ms = self.now
            self._remove_job(job)
            if self.cfg.semantics == "kairos":
                self._offer_global_pool(job, ex)

    def _offer_global_pool(self, done: _Job, ex: _Exec) -> None:
        """The ``kairos`` round at ``done``'s completion: the round ``_assign`` left pending at
        ``done``'s last stage (if any) becomes a round over the whole global pool."""
        if self.num_source > 0 and self.source_job is done:
            # ``ex`` was detached by ``_remove_job``: it joins the pool it now belongs to
            self._free_add(None, ex)
            self.num_source = 0
        if self.num_source == 0 and self.free[None] and self.active:
            self.exec_to_schedule = dict(self.free[None])
            self.source_job = None
            self.num_source = len(self.free[None])

    def _exec_arrived(self, ex: _Exec) -> None:
        target = self.moving.pop(ex)
        if target is None:
            self._backup(ex)
            return
        target.moving -= 1
        job = target.job
        ex.job = job
        job.executors[ex] = None
        if target.no_more_tasks:
            self._backup(ex)
        elif target in job.frontier:
            self._start_task(ex, target)
        else:
            self._free_add(job, ex)


class _Uniforms:
    """Uniform [0, 1) draws of one generator, fetched in blocks (the same distribution as one
    call per draw; a different stream from the repositories' per-call draws)."""

    __slots__ = ("buf", "draw", "i")

    def __init__(self, draw: Callable[[int], np.ndarray]) -> None:
        self.draw = draw
        self.buf: list[float] = []
        self.i = 0

    def next(self) -> float:
        if self.i >= len(self.buf):
            self.buf = self.draw(4096).tolist()
            self.i = 0
        u = self.buf[self.i]
        self.i += 1
        return u


def _job_of(source: object) -> _Job | None:
    if isinstance(source, _Job):
        return source
    if isinstance(source, _Stage):
        return source.job
    return None


class Episode:
    """One episode stepped by its caller: :meth:`view` the round, :meth:`step` an action, until
    :meth:`step` returns true.  decima-compat: ``num_init`` jobs at t = 0 then ``num_stream``
    streamed; the other semantics: ``num_init + num_stream`` jobs, the first at t = 0 and the rest
    streamed (a batch when ``interval_ms`` is 0).  The job sequence, keys and durations depend only
    on ``seed`` (and the semantics), never on the policy's actions."""

    def __init__(
        self,
        lib: TpchLibrary,
        cfg: SimConfig,
        *,
        seed: int,
        num_init: int,
        num_stream: int,
        interval_ms: float,
    ) -> None:
        if cfg.num_executors < 1:
            raise ValueError("num_executors must be >= 1")
        if cfg.semantics == "decima-compat":
            env = np.random.RandomState(DECIMA_ENV_SEED_BASE + seed)
            jobs = decima_jobs(lib, env, num_init, num_stream, interval_ms)
            keys = _Uniforms(env.random_sample)
            durations = _Uniforms(
                np.random.RandomState(DECIMA_DURATION_SEED_BASE + seed).random_sample
            )
        else:
            gen = np.random.default_rng(seed)
            jobs = spark_jobs(lib, gen, num_init + num_stream, interval_ms)
            keys = durations = _Uniforms(gen.random)

        def point(w: int) -> int:
            return 1 + int(keys.next() * w)

        def pick(n: int) -> int:
            return int(durations.next() * n)

        self.cfg = cfg
        self._engine = _Engine(cfg, jobs, point, pick)
        self._arrival = np.array([j.arrival_ms for j in self._engine.all_jobs], dtype=np.float64)
        self._active: list[_Job] = []

    @property
    def now_ms(self) -> float:
        return self._engine.now

    @property
    def decisions(self) -> int:
        return self._engine.decisions

    def view(self) -> RoundView:
        """The current round (the policy's input); the next :meth:`step` acts on it."""
        view, self._active = self._engine.view()
        return view

    def step(self, action: Action | None) -> bool:
        """Apply one action of the last :meth:`view`'s round and simulate to the next decision;
        true when the episode is over (no executor to schedule and no event left)."""
        return self._engine.step(action, self._active)

    def job_time_ms(self) -> float:
        """Sum over jobs arrived by now of their time in the system up to now (ms)."""
        now = self._engine.now
        arrived = self._arrival[self._arrival <= now]
        total = float(np.sum(now - arrived))
        for job in self._engine.all_jobs[: arrived.size]:
            if job.completion_ms <= now:  # NaN (not finished) compares false
                total -= now - job.completion_ms
        return total

    def result(self) -> EpisodeResult:
        engine = self._engine
        completion = np.array([j.completion_ms for j in engine.all_jobs], dtype=np.float64)
        return EpisodeResult(
            arrival_ms=self._arrival.copy(),
            completion_ms=completion,
            busy_ms=engine.busy_ms,
            num_executors=self.cfg.num_executors,
            decisions=engine.decisions,
            end_ms=engine.now,
        )


def run_episode(
    lib: TpchLibrary,
    cfg: SimConfig,
    policy: DagPolicy,
    *,
    seed: int,
    num_init: int,
    num_stream: int,
    interval_ms: float,
    max_decisions: int | None = None,
) -> EpisodeResult:
    """One episode of ``policy`` (jobs as :class:`Episode` draws them)."""
    episode = Episode(
        lib, cfg, seed=seed, num_init=num_init, num_stream=num_stream, interval_ms=interval_ms
    )
    policy.reset()
    done = False
    while not done:
        if max_decisions is not None and episode.decisions >= max_decisions:
            break
        done = episode.step(policy.choose(episode.view()))
    return episode.result()


def run_jobs(
    cfg: SimConfig,
    jobs: Sequence[JobArrival],
    policy: DagPolicy,
    *,
    rng: np.random.Generator,
    max_decisions: int | None = None,
) -> EpisodeResult:
    """One episode of ``policy`` on the given job arrivals; every executor-key and duration draw
    is one ``rng.random()`` (in the order the simulator needs them).  Results are in the order of
    ``jobs``."""
    if cfg.num_executors < 1:
        raise ValueError("num_executors must be >= 1")

    def point(w: int) -> int:
        return 1 + int(rng.random() * w)

    def pick(n: int) -> int:
        return int(rng.random() * n)

    engine = _Engine(cfg, jobs, point, pick)
    policy.reset()
    done = False
    while not done:
        if max_decisions is not None and engine.decisions >= max_decisions:
            break
        view, active = engine.view()
        done = engine.step(policy.choose(view), active)
    return EpisodeResult(
        arrival_ms=np.array([j.arrival_ms for j in engine.all_jobs], dtype=np.float64),
        completion_ms=np.array([j.completion_ms for j in engine.all_jobs], dtype=np.float64),
        busy_ms=engine.busy_ms,
        num_executors=cfg.num_executors,
        decisions=engine.decisions,
        end_ms=engine.now,
    )
