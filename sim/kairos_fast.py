"""Fast twin of :mod:`app.domains.hpc.simulate` for queue-order heuristics on trace machines.

On a machine of identical nodes with whole-node jobs (every SWF trace, A.2), one round of
:meth:`app.domains.hpc.decision.DecisionRun.run_order` reduces to node counts:

* walk the heuristic's order (``ScoreHeuristic.order``: score, submit time, id);
* HEAD: start the job if it fits the free nodes, else reserve it: its shadow time is the first
  requested end (running jobs by ``(start + walltime, submit, id)``, equal ends together, at least
  ``now``) at which enough nodes are free; ``none`` stops the round there;
* BACKFILL: start a job that fits now if it ends by the shadow time or leaves enough nodes for
  the reserved job at the shadow time (then it holds its nodes there).  A job refused once is
  never allowed later in the round (free nodes and nodes at the shadow time only shrink), so the
  core's deferred retries never fire and one pass is exact.

Ranking policies (a learned scorer used as an order, ADR 0065) run here too: at each decision
point the twin encodes the queue exactly as the core's first view would be encoded
(:func:`app.domains.hpc.ranking.head_features`: HEAD phase, no reservation, every pending job a
candidate),
asks the policy's ``score`` once, and walks ``rank_rows`` of the logits.

``tests/unit/sim/test_kairos_fast.py`` checks start times equal to
:class:`app.domains.hpc.simulate.KairosSimulator` (the real core) on random traces for every
heuristic, for
ranking ONNX policies and both backfilling modes, so this twin is what the service would do, much
faster.  Stepping (ONNX) policies always go through the core.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort

import numpy as np

from app.domains.hpc.encoding import rank_rows
from app.domains.hpc.heuristics import ScoreHeuristic
from app.domains.hpc.heuristics.base import finite_key
from app.domains.hpc.ranking import HeadEncoder, ScoringRanker
from app.domains.hpc.rlscheduler import SequenceResult
from app.domains.hpc.simulate import Workload, workload_from_trace
from app.domains.hpc.swf import SwfTrace
from app.domains.hpc.types import Backfill, Job

_Key = tuple[float, float, str]


def is_static(policy: ScoreHeuristic) -> bool:
    """True when the heuristic's score does not depend on ``now``."""
    cls = type(policy)
    return cls.score is ScoreHeuristic.score and cls.raw_score is ScoreHeuristic.raw_score


def _key(policy: ScoreHeuristic, job: Job, now: float) -> _Key:
    return (policy.score(job, now), finite_key(job.submit_time), job.id)


class _FastSim:
    def __init__(
        self, workload: Workload, policy: ScoreHeuristic | ScoringRanker, backfill: Backfill
    ) -> None:
        jobs = workload.jobs
        self.workload = workload
        self.ranker = policy if isinstance(policy, ScoringRanker) else None
        heuristic = policy if isinstance(policy, ScoreHeuristic) else _NO_HEURISTIC
        self.policy = heuristic
        self.jobs = jobs
        self.n = len(jobs)
        self.tasks = [j.tasks for j in jobs]
        self.wall = [j.walltime_s for j in jobs]
        self.submit = [j.submit_time for j in jobs]
        self.fcfs = [(finite_key(j.submit_time), j.id) for j in jobs]
        self.run = workload.run_time
        self.easy = backfill is Backfill.EASY
        self.custom_order = type(heuristic).order is not ScoreHeuristic.order
        self.static = self.ranker is None and is_static(heuristic) and not self.custom_order
        self.static_keys = [_key(heuristic, j, 0.0) for j in jobs] if self.static else []
        ppn = workload.procs_per_node
        self.capacity = workload.max_nodes * ppn
        self.ppn = ppn
        self.tasks_arr = np.asarray(self.tasks, dtype=np.int64)
        self.encoder = (
            HeadEncoder(
                np.asarray(self.submit, dtype=np.float64),
                np.asarray(self.wall, dtype=np.float64),
                np.asarray([j.tasks * float(j.per_task.get("cpu", 0.0)) for j in jobs]),
                self.capacity,
            )
            if self.ranker is not None
            else None
        )
        self.start = [-1.0] * self.n
        self.free = workload.max_nodes
        self.pending: list[tuple[_Key, int]] = []  # sorted by key (static heuristics)
        self.pending_set: dict[int, None] = {}  # arrival order
        self.completions: list[tuple[float, int, int]] = []  # (actual end, seq, job)
        self.running: dict[int, tuple[float, float, str]] = {}  # job -> (req. end, submit, id)
        self.by_tasks: list[tuple[int, int]] = []  # heap of pending jobs by size (lazy)
        self.seq = 0
        self.nxt = 0
        self.started = 0
        self.now = self.submit[0]

    def events(self) -> None:
        """Apply every event at the next event time."""
        submit, completions, tasks = self.submit, self.completions, self.tasks
        t_arr = submit[self.nxt] if self.nxt < self.n else math.inf
        t_comp = completions[0][0] if completions else math.inf
        t = t_arr if t_arr < t_comp else t_comp
        if t == math.inf:
            raise RuntimeError("no events left but jobs never started")
        self.now = t
        while completions and completions[0][0] == t:
            k = heapq.heappop(completions)[2]
            del self.running[k]
            self.free += tasks[k]
        while self.nxt < self.n and submit[self.nxt] == t:
            k = self.nxt
            if self.static:
                insort(self.pending, (self.static_keys[k], k))
            self.pending_set[k] = None
            heapq.heappush(self.by_tasks, (tasks[k], k))
            self.nxt += 1

    def something_fits(self) -> bool:
        by_tasks, start = self.by_tasks, self.start
        while by_tasks and start[by_tasks[0][1]] >= 0.0:
            heapq.heappop(by_tasks)
        return bool(by_tasks) and by_tasks[0][0] <= self.free

    def ranked(self) -> list[int]:
        """The ranking policy's order of the pending jobs (see :func:`head_features`)."""
        assert self.ranker is not None
        assert self.encoder is not None
        fcfs = self.fcfs
        pending = sorted(self.pending_set, key=fcfs.__getitem__)
        at = np.asarray(pending, dtype=np.intp)
        # the pooled node's allocated cpus, summed as the core's snapshot holds them
        used = (self.workload.max_nodes - self.free) * self.ppn
        obs = self.encoder.encode(
            at, self.now, self.tasks_arr[at] <= self.free, self.capacity - used
        )
        mask = np.ones((1, len(pending)), dtype=np.bool_)
        logits = self.ranker.score(obs[None], mask)
        rows = rank_rows(np.asarray(logits)[0], mask[0])
        if rows is None:
            raise ValueError(f"{self.ranker.ref} gave non-finite scores")
        return [pending[r] for r in rows]

    def order(self) -> list[int]:
        if self.ranker is not None:
            return self.ranked()
        if self.static:
            return [j for _, j in self.pending]
        jobs, now = self.jobs, self.now
        if self.custom_order:
            index = {jobs[j].id: j for j in self.pending_set}
            ranked = self.policy.order([jobs[j] for j in self.pending_set], now)
            return [index[job.id] for job in ranked]
        return sorted(self.pending_set, key=lambda j: _key(self.policy, jobs[j], now))

    def start_job(self, j: int) -> None:
        now = self.now
        self.start[j] = now
        self.free -= self.tasks[j]
        self.running[j] = (now + self.wall[j], self.fcfs[j][0], self.fcfs[j][1])
        heapq.heappush(self.completions, (now + self.run[j], self.seq, j))
        self.seq += 1
        self.started += 1
        del self.pending_set[j]
        if self.static:
            del self.pending[bisect_left(self.pending, (self.static_keys[j], j))]

    def round(self) -> None:
        """One decision: the core's run_order on node counts."""
        tasks, wall, now = self.tasks, self.wall, self.now
        reserved = -1
        shadow = 0.0
        shadow_free = 0
        for j in self.order():
            need = tasks[j]
            if reserved < 0 and need > self.free:
                reserved = j
                shadow, shadow_free = _shadow(self.running, tasks, self.free, need, now)
                if not self.easy:
                    return
                continue
            if need > self.free:
                continue
            if reserved >= 0 and now + wall[j] > shadow:
                if shadow_free - need < tasks[reserved]:
                    continue
                shadow_free -= need
            self.start_job(j)
            if self.free == 0:
                return

    def result(self) -> SequenceResult:
        wl = self.workload
        return SequenceResult(
            submit=np.asarray(self.submit, dtype=np.float64),
            run=np.asarray(self.run, dtype=np.float64),
            procs=np.asarray(wl.procs, dtype=np.int64),
            start=np.asarray(self.start, dtype=np.float64),
            end_time=float(max(self.start)),
            max_procs=wl.max_procs,
            user=np.asarray(wl.user, dtype=np.int64),
        )


class _NoHeuristic(ScoreHeuristic):
    name = "none"


_NO_HEURISTIC = _NoHeuristic()


def simulate_workload_fast(
    workload: Workload, policy: ScoreHeuristic | ScoringRanker, backfill: Backfill
) -> SequenceResult:
    """Replay ``workload`` with ``policy`` (see the module docstring)."""
    sim = _FastSim(workload, policy, backfill)
    while sim.started < sim.n:
        sim.events()
        # a decision point, unless no pending job fits (the round would start nothing)
        if sim.something_fits():
            sim.round()
    return sim.result()


def _shadow(
    running: dict[int, tuple[float, float, str]], tasks: list[int], free: int, need: int, now: float
) -> tuple[float, int]:
    """Earliest start of a job needing ``need`` nodes, and the free nodes then.

    Like the core, overdue jobs (requested end already past) all count as released at ``now``,
    together; later ends release in groups of equal end.
    """
    ends = sorted((v, k) for k, v in running.items())
    i, m = 0, len(ends)
    while i < m:
        t = ends[i][0][0]
        if t < now:
            t = now
        while i < m and ends[i][0][0] <= t:
            free += tasks[ends[i][1]]
            i += 1
        if free >= need:
            return t, free
    raise RuntimeError("a job needs more nodes than the machine has")


def simulate_kairos_fast(
    trace: SwfTrace,
    start: int,
    length: int,
    policy: ScoreHeuristic | ScoringRanker,
    *,
    backfill: Backfill,
) -> SequenceResult:
    """Jobs ``[start, start + length)`` of ``trace`` (kairos semantics, heuristic policies)."""
    return simulate_workload_fast(workload_from_trace(trace, start, length), policy, backfill)
