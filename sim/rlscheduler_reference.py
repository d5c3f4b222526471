"""A straightforward re-statement of RLScheduler's heuristic simulator (the test oracle).

Written from the semantics of spec A.2-A.7 the way RLScheduler itself works: job objects, a queue
list re-sorted in place (stable sort) at every decision and before every backfill scan, a
running list re-sorted before every event, per-job score functions called inside the sort.
It is slow on purpose: it checks :mod:`app.domains.hpc.rlscheduler` (same start times on random
traces) and
is the baseline measured by ``benchmarks/simulate.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from app.domains.hpc.ranking import Picker, ScoringRanker, rls_picker
from app.domains.hpc.rlscheduler import RlsPolicy
from app.domains.hpc.swf import SwfTrace


class _Job:
    __slots__ = ("idx", "nodes", "procs", "request", "run", "scheduled", "submit")

    def __init__(self, idx: int, submit: int, run: int, request: int, procs: int, ppn: float):
        self.idx = idx
        self.submit = submit
        self.run = run
        self.request = request
        self.procs = procs
        self.nodes = math.ceil(procs / ppn)
        self.scheduled = -1.0


def _score(policy: RlsPolicy) -> Callable[[_Job], object]:
    """RLScheduler's score functions (WFP3/UNICEP with ``w = scheduled_time - submit``)."""
    if policy is RlsPolicy.FCFS:
        return lambda j: j.submit
    if policy is RlsPolicy.SJF:
        return lambda j: (j.request, j.submit)
    if policy is RlsPolicy.SMALLEST:
        return lambda j: (j.procs, j.submit)
    if policy is RlsPolicy.WFP3:
        return lambda j: -np.power(float(j.scheduled - j.submit) / j.request, 3) * j.procs
    if policy is RlsPolicy.UNICEP:
        return lambda j: -(j.scheduled - j.submit + 1e-15) / (np.log2(j.procs + 1e-15) * j.request)
    if policy is RlsPolicy.F1:
        return lambda j: (
            np.log10(j.request if j.request > 0 else 0.1) * j.procs
            + 870 * np.log10(j.submit if j.submit > 0 else 0.1)
        )
    if policy is RlsPolicy.F2:
        return lambda j: np.sqrt(j.request) * j.procs + 25600 * np.log10(j.submit)
    if policy is RlsPolicy.F3:
        return lambda j: j.request * j.procs + 6860000 * np.log10(j.submit)
    return lambda j: j.request * np.sqrt(j.procs) + 530000 * np.log10(j.submit)


class _Sim:
    def __init__(self, trace: SwfTrace, start: int, length: int, backfill: bool) -> None:
        ppn = trace.procs_per_node
        self.ppn = ppn
        self.jobs = [
            _Job(
                i,
                int(trace.submit_time[start + i]),
                int(trace.run_time[start + i]),
                int(trace.request_time[start + i]),
                int(trace.processors[start + i]),
                ppn,
            )
            for i in range(length)
        ]
        self.backfill = backfill
        self.free = trace.max_nodes
        self.now = float(self.jobs[0].submit)
        self.queue: list[_Job] = [self.jobs[0]]
        self.running: list[_Job] = []
        self.next = 1

    def _start(self, job: _Job) -> None:
        job.scheduled = self.now
        self.free -= job.nodes
        self.running.append(job)
        self.queue.remove(job)

    def _event(self) -> None:
        """Advance one event: the next arrival if it is not later than the next release."""
        self.running.sort(key=lambda r: r.scheduled + r.run)
        first = self.running[0]
        release = first.scheduled + first.run
        if self.next < len(self.jobs) and self.jobs[self.next].submit <= release:
            self.now = max(self.now, float(self.jobs[self.next].submit))
            self.queue.append(self.jobs[self.next])
            self.next += 1
        else:
            self.now = max(self.now, release)
            self.free += first.nodes
            self.running.pop(0)

    def _wait_for(self, job: _Job) -> None:
        while job.nodes > self.free:
            self._event()

    def _backfill_for(self, job: _Job) -> None:
        self.running.sort(key=lambda r: r.scheduled + r.request)
        free_procs = self.free * self.ppn
        shadow = self.now
        for r in self.running:
            free_procs += r.nodes * self.ppn
            shadow = r.scheduled + r.request
            if free_procs >= job.procs:
                break
        while job.nodes > self.free:
            self.queue.sort(key=lambda j: j.submit)
            for other in list(self.queue):
                if other.nodes <= self.free and self.now + other.request < shadow:
                    self._start(other)
            self._event()

    def _refill(self) -> bool:
        """After a start: False when the queue is empty and every job has arrived."""
        if self.queue:
            return True
        if self.next >= len(self.jobs):
            return False
        while not self.queue:
            if self.running:
                self.running.sort(key=lambda r: r.scheduled + r.run)
                release = self.running[0].scheduled + self.running[0].run
            else:
                release = math.inf
            if self.jobs[self.next].submit <= release:
                self.now = max(self.now, float(self.jobs[self.next].submit))
                self.queue.append(self.jobs[self.next])
                self.next += 1
            else:
                first = self.running.pop(0)
                self.now = max(self.now, release)
                self.free += first.nodes
        return True

    def run(
        self, score: Callable[[_Job], object] | None, picker: Picker | None = None
    ) -> tuple[list[float], float]:
        while True:
            if picker is not None:  # the queue stays in arrival order
                idx = picker([j.idx for j in self.queue], self.now, self.free)
                job = self.jobs[idx]
            else:
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    self.queue.sort(key=score)  # type: ignore[arg-type]
                job = self.queue[0]
            if job.nodes > self.free:
                if self.backfill:
                    self._backfill_for(job)
                else:
                    self._wait_for(job)
            self._start(job)
            if not self._refill():
                return [j.scheduled for j in self.jobs], self.now


def reference_simulate(
    trace: SwfTrace,
    start: int,
    length: int,
    policy: RlsPolicy | str | ScoringRanker,
    *,
    backfill: bool,
) -> tuple[list[float], float]:
    """Start time of every job and the episode end (the last start)."""
    sim = _Sim(trace, start, length, backfill)
    if isinstance(policy, str):
        return sim.run(_score(RlsPolicy(policy)))
    jobs = sim.jobs
    picker = rls_picker(
        policy,
        [j.submit for j in jobs],
        [j.request for j in jobs],
        [j.nodes for j in jobs],
        trace.max_nodes,
        sim.ppn,
    )
    return sim.run(None, picker)
