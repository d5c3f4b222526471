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
counts free nodes) and the core's matrices are 1 x 1, which is much faster.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from app.domains.hpc.decision import DecisionConfig, DecisionRun, decide
from app.domains.hpc.policy import OrderingPolicy, RankingPolicy, SteppingPolicy
from app.domains.hpc.rlscheduler import SequenceResult
from app.domains.hpc.swf import SwfTrace
from app.domains.hpc.types import (
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
    jobs: list[Job] = []
    for i in range(start, stop):
        procs = int(trace.processors[i])
        tasks = math.ceil(procs / ppn)
        if tasks > trace.max_nodes:
            raise ValueError(
                f"job {int(trace.job_id[i])} needs {tasks} nodes; the machine has {trace.max_nodes}"
            )
        user = int(trace.user_id[i])
        jobs.append(
            Job(
                id=str(int(trace.job_id[i])),
                per_task={CPU: ppn},
                walltime_s=float(max(int(trace.request_time[i]), 0)),
                submit_time=float(trace.submit_time[i]),
                tasks=tasks,
                user=None if user < 0 else str(user),
            )
        )
    return Workload(
        jobs=tuple(jobs),
        run_time=tuple(float(r) for r in trace.run_time[start:stop].tolist()),
        procs=tuple(int(p) for p in trace.processors[start:stop].tolist()),
        user=tuple(int(u) for u in trace.user_id[start:stop].tolist()),
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
    """Replay jobs ``[start, start + length)`` of ``trace`` with ``policy`` (kairos semantics)."""
    sim = KairosSimulator(
        workload_from_trace(trace, start, length),
        config=config if config is not None else DecisionConfig(),
        pooled=pooled,
    )
    if on_decision is None:
        return sim.run(policy)
    while (state := sim.next_state()) is not None:
        decision = decide(state, policy, sim.config)
        on_decision(state, decision)
        sim.apply(decision, state)
    return sim.result()
