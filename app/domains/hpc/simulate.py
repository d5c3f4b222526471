"""``kairos`` semantics: replay a job sequence through the service's own decision code.

At every decision point (after all arrivals and completions at one simulated time) the simulator
builds a :class:`~app.domains.hpc.types.ClusterState` and calls
:func:`app.domains.hpc.decision.decide` with
the policy (a heuristic from :mod:`app.domains.hpc.heuristics` or any
:class:`~app.domains.hpc.policy.SteppingPolicy`, e.g. an ONNX policy); it starts exactly what the
decision allocates.  Textbook formulas and real EASY backfilling come from the core.

Events live in a heap of ``(time, seq, kind, job)`` with a sequence counter, so equal times are
processed in insertion order; all events at one time are applied before the decision.

The machine: ``MaxNodes`` nodes of ``procs_per_node`` cpus (node ids ``n0000``...).  A trace job
with ``p`` processors is a gang of ``ceil(p / ppn)`` tasks of ``ppn`` cpus, i.e. whole nodes,
like RLScheduler's allocation (A.2).  ``pooled=True`` models the machine as one node holding all
cpus instead: for homogeneous whole-node tasks every decision is the same (feasibility only
counts free nodes) and the core's matrices are 1 x 1.

:func:`simulate_workload` is the engine path for queue-order heuristics and ranking policies: the
same rules (:mod:`app.domains.hpc.easy`) on the pooled count model
(:class:`~app.domains.hpc.pooled.PooledMachine`), which the simulator mutates between decision
points instead of building a snapshot for each.  :class:`KairosSimulator` is the snapshot path
(``decide()`` at every decision point), for stepping policies and per-node machines.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from app.domains.hpc.decision import DecisionConfig, DecisionRun, decide
from app.domains.hpc.encoding import rank_rows
from app.domains.hpc.heuristics import ScoreHeuristic
from app.domains.hpc.heuristics.base import finite_key
from app.domains.hpc.policy import OrderingPolicy, RankingPolicy, SteppingPolicy
from app.domains.hpc.pooled import PooledMachine
from app.domains.hpc.ranking import HeadEncoder, ScoringRanker
from app.domains.hpc.rlscheduler import SequenceResult
from app.domains.hpc.swf import SwfTrace
from app.domains.hpc.types import (
    Backfill,
    ClusterState,
    Decision,
    Job,
    Node,
    Placement,
    PolicyRef,
    RunningJob,
)

#: policy reference of a round in which nothing could start
_NO_POLICY = PolicyRef("none", "0", "none")
_COMPLETION = 0
_ARRIVAL = 1
CPU = "cpu"


@dataclass(frozen=True, slots=True)
class Workload:
    """A job sequence ready for the kairos simulator (domain jobs plus their actual run times)."""

    jobs: tuple[Job, ...]
    run_time: tuple[float, ...]
    procs: tuple[int, ...]
    user: tuple[int, ...]
    max_nodes: int
    procs_per_node: float
    max_procs: int

    @property
    def size(self) -> int:
        return len(self.jobs)


def workload_from_trace(trace: SwfTrace, start: int = 0, length: int | None = None) -> Workload:
    """Jobs ``[start, start + length)`` of ``trace`` as whole-node gangs (see the module doc)."""
    stop = trace.n_jobs if length is None else start + length
    if start < 0 or stop > trace.n_jobs or stop <= start:
        raise ValueError(f"sequence [{start}, {stop}) is outside the trace's {trace.n_jobs} jobs")
    ppn = trace.procs_per_node
    procs: list[int] = [int(p) for p in trace.processors[start:stop].tolist()]
    users: list[int] = [int(u) for u in trace.user_id[start:stop].tolist()]
    ids: list[int] = [int(i) for i in trace.job_id[start:stop].tolist()]
    request: list[int] = [int(r) for r in trace.request_time[start:stop].tolist()]
    submit: list[float] = [float(t) for t in trace.submit_time[start:stop].tolist()]
    per_task = {CPU: ppn}
    no_labels: dict[str, str] = {}  # shared by the jobs, as their per_task mapping
    jobs: list[Job] = []
    for k, p in enumerate(procs):
        tasks = math.ceil(p / ppn)
        if tasks > trace.max_nodes:
            raise ValueError(f"job {ids[k]} needs {tasks} nodes; the machine has {trace.max_nodes}")
        user = users[k]
        jobs.append(
            Job(  # in Job's field order: id, per_task, walltime_s, submit_time, tasks, priority,
                # user, queue, depends_on, labels
                str(ids[k]),
                per_task,
                float(max(request[k], 0)),
                submit[k],
                tasks,
                0,
                None if user < 0 else str(user),
                None,
                (),
                no_labels,
            )
        )
    return Workload(
        jobs=tuple(jobs),
        run_time=tuple(float(r) for r in trace.run_time[start:stop].tolist()),
        procs=tuple(procs),
        user=tuple(users),
        max_nodes=trace.max_nodes,
        procs_per_node=ppn,
        max_procs=trace.max_procs,
    )


@dataclass(slots=True)
class DecisionRecord:
    """One decision point (kept when ``record=True``): the snapshot and what was decided."""

    state: ClusterState
    decision: Decision


@dataclass(slots=True)
class _Running:
    index: int
    placements: tuple[Placement, ...]
    running: RunningJob


@dataclass(slots=True)
class KairosSimulator:
    """Event-driven replay of a :class:`Workload` under the service's decision code.

    Drive it with :meth:`run` (whole sequence, one policy), or step by step:
    ``state = sim.next_state()`` (``None`` when every job has started) then
    ``sim.apply(decision)`` -- the gym environment does the latter with a :class:`DecisionRun`.
    """

    workload: Workload
    config: DecisionConfig = field(default_factory=DecisionConfig)
    pooled: bool = False
    record: bool = False

    now: float = 0.0
    start_time: list[float] = field(default_factory=list)
    decisions: list[DecisionRecord] = field(default_factory=list)
    _events: list[tuple[float, int, int, int]] = field(default_factory=list)
    _seq: int = 0
    _pending: dict[str, int] = field(default_factory=dict)
    _running: dict[str, _Running] = field(default_factory=dict)
    _node_ids: list[str] = field(default_factory=list)
    _node_cap: float = 0.0
    _alloc: dict[str, float] = field(default_factory=dict)
    _node_cache: dict[tuple[str, float], Node] = field(default_factory=dict)
    _index: dict[str, int] = field(default_factory=dict)
    _started: int = 0
    _dirty: bool = False
    _free_slots: int = 0
    _by_tasks: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        wl = self.workload
        if wl.size == 0:
            raise ValueError("empty workload")
        if self.pooled:
            self._node_ids = ["pool"]
            self._node_cap = wl.max_nodes * wl.procs_per_node
        else:
            width = max(4, len(str(wl.max_nodes - 1)))
            self._node_ids = [f"n{i:0{width}d}" for i in range(wl.max_nodes)]
            self._node_cap = wl.procs_per_node
        self._alloc = dict.fromkeys(self._node_ids, 0.0)
        # every task is one node's worth of cpus: the machine holds max_nodes tasks in both models
        self._free_slots = wl.max_nodes
        self.start_time = [-1.0] * wl.size
        self._index = {job.id: i for i, job in enumerate(wl.jobs)}
        if len(self._index) != wl.size:
            raise ValueError("job ids in a workload must be unique")
        for i, job in enumerate(wl.jobs):
            self._push(job.submit_time, _ARRIVAL, i)
        self.now = wl.jobs[0].submit_time

    # ------------------------------------------------------------------ events

    def _push(self, time: float, kind: int, index: int) -> None:
        heapq.heappush(self._events, (time, self._seq, kind, index))
        self._seq += 1

    def _advance(self) -> bool:
        """Apply every event at the next event time; False when there are no events left."""
        events = self._events
        if not events:
            return False
        t = events[0][0]
        if t < self.now:
            raise RuntimeError(f"time went backwards: {t} < {self.now}")
        self.now = t
        jobs = self.workload.jobs
        while events and events[0][0] == t:
            _, _, kind, i = heapq.heappop(events)
            job = jobs[i]
            if kind == _ARRIVAL:
                self._pending[job.id] = i
                heapq.heappush(self._by_tasks, (job.tasks, i))
            else:
                rec = self._running.pop(job.id)
                per_task = float(job.per_task[CPU])
                for p in rec.placements:
                    self._alloc[p.node_id] -= per_task * p.tasks
                self._free_slots += job.tasks
            self._dirty = True
        return True

    # ------------------------------------------------------------------ state

    def _node(self, node_id: str) -> Node:
        used = self._alloc[node_id]
        if used < 1e-9:
            used = 0.0
        key = (node_id, used)
        node = self._node_cache.get(key)
        if node is None:
            node = Node(id=node_id, capacity={CPU: self._node_cap}, allocated={CPU: used})
            if len(self._node_cache) > 4 * len(self._node_ids) + 64:
                self._node_cache.clear()
            self._node_cache[key] = node
        return node

    def state(self) -> ClusterState:
        jobs = self.workload.jobs
        return ClusterState(
            now=self.now,
            nodes=tuple(self._node(n) for n in self._node_ids),
            running=tuple(r.running for r in self._running.values()),
            pending=tuple(jobs[i] for i in self._pending.values()),
        )

    @property
    def done(self) -> bool:
        return self._started == self.workload.size

    def next_state(self) -> ClusterState | None:
        """Advance to the next decision point and return its snapshot (``None``: all started).

        A decision point is a simulated time at which something happened (arrival or completion)
        and at least one job is pending.
        """
        while not self.done:
            if self._dirty and self._pending:
                self._dirty = False
                if self._something_fits():
                    return self.state()
                # no pending job fits the free nodes: the decision would allocate nothing
            if not self._advance():
                missing = [self.workload.jobs[i].id for i in self._pending.values()]
                raise RuntimeError(f"no events left but jobs never started: {missing[:5]}")
        return None

    def _something_fits(self) -> bool:
        by_tasks = self._by_tasks
        started = self.start_time
        while by_tasks and started[by_tasks[0][1]] >= 0.0:
            heapq.heappop(by_tasks)
        return bool(by_tasks) and by_tasks[0][0] <= self._free_slots

    def apply(self, decision: Decision, state: ClusterState | None = None) -> None:
        """Start the decision's allocations at ``now``."""
        if self.record and state is not None:
            self.decisions.append(DecisionRecord(state, decision))
        wl = self.workload
        for alloc in decision.allocations:
            i = self._pending.pop(alloc.job_id)
            job = wl.jobs[i]
            per_task = float(job.per_task[CPU])
            for p in alloc.placements:
                self._alloc[p.node_id] += per_task * p.tasks
            self.start_time[i] = self.now
            self._free_slots -= job.tasks
            self._running[job.id] = _Running(
                i, alloc.placements, RunningJob(job, alloc.placements, self.now)
            )
            self._push(self.now + wl.run_time[i], _COMPLETION, i)
            self._started += 1

    def run(self, policy: OrderingPolicy | RankingPolicy | SteppingPolicy) -> SequenceResult:
        """Replay the whole sequence with ``policy``; the episode ends at the last start."""
        while (state := self.next_state()) is not None:
            self.apply(decide(state, policy, self.config), state)
        return self.result()

    def decision_run(self) -> DecisionRun | None:
        """The next decision point as a resumable :class:`DecisionRun` (skipping empty rounds)."""
        while (state := self.next_state()) is not None:
            run = DecisionRun(state, self.config)
            if not run.done:
                return run
            # nothing can start now (e.g. head-of-line blocking): record the empty round
            self.apply(run.result(_NO_POLICY), state)
        return None

    def result(self) -> SequenceResult:
        wl = self.workload
        starts = np.asarray(self.start_time, dtype=np.float64)
        started = starts[starts >= 0.0]
        return SequenceResult(
            submit=np.asarray([j.submit_time for j in wl.jobs], dtype=np.float64),
            run=np.asarray(wl.run_time, dtype=np.float64),
            procs=np.asarray(wl.procs, dtype=np.int64),
            start=starts,
            end_time=float(started.max()) if started.size else self.now,
            max_procs=wl.max_procs,
            user=np.asarray(wl.user, dtype=np.int64),
        )


# ---------------------------------------------------------------------- the engine path

_Key = tuple[float, float, str]


def is_static(policy: ScoreHeuristic) -> bool:
    """True when the heuristic's score does not depend on ``now``."""
    cls = type(policy)
    return cls.score is ScoreHeuristic.score and cls.raw_score is ScoreHeuristic.raw_score


class _Orderer:
    """A policy's order of the machine's pending jobs at a decision point: exactly the order the
    core walks for that snapshot (``policy.order(run.orderable(), now)``, or a ranking policy's
    order of the decision's first view)."""

    def __init__(
        self, workload: Workload, machine: PooledMachine, policy: OrderingPolicy | ScoringRanker
    ) -> None:
        jobs = workload.jobs
        self.jobs = jobs
        self.machine = machine
        # as decide(): an ordering policy is walked in its order, else a ranker's scores
        self.policy = policy if isinstance(policy, OrderingPolicy) else None
        self.ranker = policy if self.policy is None and isinstance(policy, ScoringRanker) else None
        heuristic = policy if isinstance(policy, ScoreHeuristic) else None
        self.heuristic = heuristic
        self.builtin = heuristic is not None and type(heuristic).order is ScoreHeuristic.order
        self.static = self.builtin and heuristic is not None and is_static(heuristic)
        #: static heuristics: pending jobs kept sorted by their (time-independent) key
        self.keys: list[_Key] = []
        self.sorted: list[tuple[_Key, int]] = []
        if self.static:
            assert heuristic is not None
            self.keys = [self._key(heuristic, j, 0.0) for j in jobs]
        self.index = {job.id: i for i, job in enumerate(jobs)}
        self.encoder: HeadEncoder | None = None
        if self.ranker is not None:
            self.tasks = np.asarray([j.tasks for j in jobs], dtype=np.int64)
            self.encoder = HeadEncoder(
                np.asarray([j.submit_time for j in jobs], dtype=np.float64),
                np.asarray([j.walltime_s for j in jobs], dtype=np.float64),
                np.asarray([j.tasks * float(j.per_task.get(CPU, 0.0)) for j in jobs]),
                workload.max_nodes * workload.procs_per_node,
            )
            self.capacity = workload.max_nodes * workload.procs_per_node

    @staticmethod
    def _key(policy: ScoreHeuristic, job: Job, now: float) -> _Key:
        return (policy.score(job, now), finite_key(job.submit_time), job.id)

    def arrived(self, j: int) -> None:
        if self.static:
            insort(self.sorted, (self.keys[j], j))

    def started(self, j: int) -> None:
        if self.static:
            del self.sorted[bisect_left(self.sorted, (self.keys[j], j))]

    def order(self, now: float) -> Iterable[int]:
        """The order of the pending jobs; the walk consumes it lazily (a round stops early on
        head-of-line blocking or when nothing fits) and :meth:`started` runs after the round."""
        machine = self.machine
        if self.ranker is not None:
            return self._ranked(now)
        if self.static:
            return map(itemgetter(1), self.sorted)
        jobs = self.jobs
        if self.builtin:
            heuristic = self.heuristic
            assert heuristic is not None
            key = self._key
            return sorted(machine.pending, key=lambda j: key(heuristic, jobs[j], now))
        policy = self.policy
        assert policy is not None
        ranked = policy.order([jobs[j] for j in machine.fcfs_pending()], now)
        out: list[int] = []
        seen: set[int] = set()
        for job in ranked:  # unknown or repeated jobs are skipped, as the core does
            j = self.index.get(job.id, -1)
            if j >= 0 and j in machine.pending and j not in seen:
                seen.add(j)
                out.append(j)
        return out

    def _ranked(self, now: float) -> list[int]:
        """The ranking policy's order: the first view's features (HEAD phase, no reservation,
        every pending job a candidate) scored once (:class:`HeadEncoder`)."""
        ranker, encoder, machine = self.ranker, self.encoder, self.machine
        assert ranker is not None
        assert encoder is not None
        pending = machine.fcfs_pending()
        at = np.asarray(pending, dtype=np.intp)
        # the pooled node's allocated cpus, summed as the core's snapshot holds them
        ppn = self.capacity / machine.nodes
        used = (machine.nodes - machine.free) * ppn
        obs = encoder.encode(at, now, self.tasks[at] <= machine.free, self.capacity - used)
        mask = np.ones((1, len(pending)), dtype=np.bool_)
        logits = ranker.score(obs[None], mask)
        rows = rank_rows(np.asarray(logits)[0], mask[0])
        if rows is None:
            raise ValueError(f"{ranker.ref} gave non-finite scores")
        return [pending[r] for r in rows]


def pooled_machine(workload: Workload, backfill: Backfill) -> PooledMachine:
    """The workload's machine as node counts (every task is one whole node)."""
    jobs = workload.jobs
    return PooledMachine(
        workload.max_nodes,
        [j.tasks for j in jobs],
        [j.walltime_s for j in jobs],
        [j.submit_time for j in jobs],
        [j.id for j in jobs],
        backfill,
    )


def engine_runs(policy: object) -> bool:
    """Whether :func:`simulate_workload` runs ``policy`` (queue orders and ranking scorers);
    stepping policies go through :class:`KairosSimulator`."""
    return isinstance(policy, OrderingPolicy | ScoringRanker)


def simulate_workload(
    workload: Workload,
    policy: OrderingPolicy | ScoringRanker,
    backfill: Backfill = Backfill.EASY,
) -> SequenceResult:
    """Replay ``workload`` with an ordering or ranking ``policy`` through the engine (the rules of
    :mod:`app.domains.hpc.easy` on :class:`PooledMachine`): every job starts when
    :class:`KairosSimulator` (``decide()`` on the pooled snapshot) starts it."""
    if workload.size == 0:
        raise ValueError("empty workload")
    jobs = workload.jobs
    machine = pooled_machine(workload, backfill)
    orderer = _Orderer(workload, machine, policy)
    n = workload.size
    submit = [j.submit_time for j in jobs]
    arrivals = sorted(range(n), key=lambda i: (submit[i], i))
    run_time = workload.run_time
    start = [-1.0] * n
    completions: list[tuple[float, int, int]] = []  # (actual end, seq, job)
    seq = nxt = started = 0
    while started < n:
        t_arr = submit[arrivals[nxt]] if nxt < n else math.inf
        t_comp = completions[0][0] if completions else math.inf
        t = t_arr if t_arr < t_comp else t_comp
        if t == math.inf:
            missing = [jobs[j].id for j in machine.pending]
            raise RuntimeError(f"no events left but jobs never started: {missing[:5]}")
        machine.now = t
        while completions and completions[0][0] == t:
            machine.complete(heapq.heappop(completions)[2])
        while nxt < n and submit[arrivals[nxt]] == t:
            j = arrivals[nxt]
            machine.arrive(j)
            orderer.arrived(j)
            nxt += 1
        # a decision point, unless no pending job fits (the round would start nothing)
        if not machine.something_fits():
            continue
        for j in machine.round(orderer.order(t)):
            start[j] = t
            orderer.started(j)
            heapq.heappush(completions, (t + run_time[j], seq, j))
            seq += 1
            started += 1
    starts = np.asarray(start, dtype=np.float64)
    return SequenceResult(
        submit=np.asarray(submit, dtype=np.float64),
        run=np.asarray(run_time, dtype=np.float64),
        procs=np.asarray(workload.procs, dtype=np.int64),
        start=starts,
        end_time=float(starts.max()),
        max_procs=workload.max_procs,
        user=np.asarray(workload.user, dtype=np.int64),
    )


def simulate_kairos(
    trace: SwfTrace,
    start: int,
    length: int,
    policy: OrderingPolicy | RankingPolicy | SteppingPolicy,
    *,
    config: DecisionConfig | None = None,
    pooled: bool = False,
    on_decision: Callable[[ClusterState, Decision], None] | None = None,
) -> SequenceResult:
    """Replay jobs ``[start, start + length)`` of ``trace`` with ``policy`` (kairos semantics).

    ``pooled`` ordering and ranking policies (no ``on_decision``, no ``max_allocations``; the
    placement strategy cannot matter on a pooled machine) run on the engine
    (:func:`simulate_workload`); otherwise :class:`KairosSimulator` calls ``decide()`` at every
    decision point.
    """
    config = config if config is not None else DecisionConfig()
    if pooled and on_decision is None and config.max_allocations is None and engine_runs(policy):
        assert isinstance(policy, OrderingPolicy | ScoringRanker)
        return simulate_workload(workload_from_trace(trace, start, length), policy, config.backfill)
    sim = KairosSimulator(
        workload_from_trace(trace, start, length),
        config=config,
        pooled=pooled,
    )
    if on_decision is None:
        return sim.run(policy)
    while (state := sim.next_state()) is not None:
        decision = decide(state, policy, sim.config)
        on_decision(state, decision)
        sim.apply(decision, state)
    return sim.result()
