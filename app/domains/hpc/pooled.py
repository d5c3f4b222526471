"""The pooled resource model: a homogeneous machine of whole-node jobs, as node counts.

On a machine of identical nodes where every task takes one whole node (every SWF trace, A.2),
placement never matters: a job of ``tasks`` nodes fits iff ``tasks <= free`` nodes, and the
per-node matrix of :class:`~app.domains.hpc.decision.DecisionRun` reduces to one integer.  The
rules of a round are those of :mod:`app.domains.hpc.easy`; this module keeps only the counts:

* a placement is the number of nodes a job takes (its ``tasks``);
* the shadow time of a reserved job is the first requested end (running jobs by
  ``(start + walltime, submit, id)``, equal ends together, overdue ends at ``now``) at which
  enough nodes are free, and rule (b) holds iff the nodes free then, less those held by jobs
  started by rule (b), still cover the reserved job;
* the model is monotone: free nodes and the nodes free at the shadow time only shrink within a
  round, and the rule (b) test does not depend on which nodes, so a job refused once stays
  refused for the rest of the round.

:class:`PooledMachine` is incremental: the caller mutates it between rounds (:meth:`arrive`,
:meth:`complete`, :attr:`now`) and runs a round with a fixed order (:meth:`round`) or pick by
pick (:meth:`begin`, :meth:`allowed`, :meth:`pick`).  Jobs are integer handles ``0..n-1``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

from app.domains.hpc.easy import EasyRound
from app.domains.hpc.heuristics.base import finite_key
from app.domains.hpc.policy import Phase
from app.domains.hpc.types import Backfill

__all__ = ["PooledMachine", "holds_nodes"]

IntVec = npt.NDArray[np.int64]
BoolVec = npt.NDArray[np.bool_]


@overload
def holds_nodes(shadow_free: int, reserved_tasks: int, placement: int) -> bool: ...
@overload
def holds_nodes(shadow_free: IntVec, reserved_tasks: IntVec, placement: IntVec) -> BoolVec: ...
def holds_nodes(
    shadow_free: int | IntVec, reserved_tasks: int | IntVec, placement: int | IntVec
) -> bool | BoolVec:
    """Rule (b) on node counts (elementwise on arrays): with ``placement`` nodes held at the
    shadow time, the ``shadow_free`` nodes free then still cover the reserved job's
    ``reserved_tasks``."""
    return shadow_free - placement >= reserved_tasks


class PooledMachine:
    """Node counts of one machine, its pending and running jobs, and the round's EASY state."""

    monotone = True

    def __init__(
        self,
        nodes: int,
        tasks: Sequence[int],
        walltime: Sequence[float],
        submit: Sequence[float],
        ids: Sequence[str],
        backfill: Backfill,
    ) -> None:
        if not len(tasks) == len(walltime) == len(submit) == len(ids):
            raise ValueError("tasks, walltime, submit and ids must have one entry per job")
        too_big = [ids[j] for j, t in enumerate(tasks) if t > nodes or t < 1]
        if too_big:
            raise ValueError(f"jobs need 1..{nodes} nodes: {too_big[:5]}")
        self.nodes = nodes
        self.free = nodes
        self.now = 0.0
        self.tasks = list(tasks)
        self.walltime = [float(w) for w in walltime]
        #: FCFS key of every job: (submit time, id), as the core sorts its queue
        self.fcfs: list[tuple[float, str]] = [
            (finite_key(float(s)), i) for s, i in zip(submit, ids, strict=True)
        ]
        #: pending jobs in arrival order
        self.pending: dict[int, None] = {}
        #: running job -> (requested end, submit, id, job): its key in :attr:`_ends`
        self.running: dict[int, tuple[float, float, str, int]] = {}
        #: the running jobs sorted by (requested end, submit, id): the shadow time's release order
        self._ends: list[tuple[float, float, str, int]] = []
        #: jobs started by the current (or last) round, in start order
        self.started: list[int] = []
        self._by_tasks: list[tuple[int, int]] = []  # pending jobs by size (lazy deletion)
        self._is_pending = [False] * len(tasks)
        self._shadow_free = 0
        self._reserved_tasks = 0
        self._easy: EasyRound[int, int] = EasyRound(self, backfill)
        self._easy.stopped = True

    # ------------------------------------------------------------------ state between rounds

    def arrive(self, job: int) -> None:
        """``job`` joins the queue."""
        self.pending[job] = None
        self._is_pending[job] = True
        heapq.heappush(self._by_tasks, (self.tasks[job], job))

    def complete(self, job: int) -> None:
        """Running ``job`` ends now: its nodes are free."""
        key = self.running.pop(job)
        del self._ends[bisect_left(self._ends, key)]
        self.free += self.tasks[job]

    def something_fits(self) -> bool:
        """Whether some pending job fits the free nodes (else a round starts nothing)."""
        by_tasks, pending = self._by_tasks, self._is_pending
        while by_tasks and not pending[by_tasks[0][1]]:
            heapq.heappop(by_tasks)
        return bool(by_tasks) and by_tasks[0][0] <= self.free

    def fcfs_pending(self) -> list[int]:
        """The pending jobs in FCFS order (submit time, then id)."""
        return sorted(self.pending, key=self.fcfs.__getitem__)

    # ------------------------------------------------------------------ rounds

    def round(self, order: Iterable[int]) -> list[int]:
        """One round at :attr:`now` walking ``order`` (pending jobs); the jobs it started."""
        self.begin()
        self._easy.walk(order)
        return self.started

    def begin(self) -> None:
        """Start a round to be driven pick by pick (:meth:`allowed`, :meth:`pick`)."""
        self.started = []
        self._easy.reset()

    @property
    def phase(self) -> Phase:
        return self._easy.phase

    @property
    def done(self) -> bool:
        """The round can start nothing more (head-of-line blocking, or no pending job fits)."""
        return self._easy.stopped

    @property
    def reserved(self) -> int | None:
        return self._easy.reserved

    @property
    def shadow(self) -> float:
        return self._easy.shadow

    def round_state(self) -> tuple[float, int, bool, bool, int, float, int, int]:
        """``(now, free, BACKFILL phase, done, reserved job or -1, shadow time, nodes free at
        the shadow time less those held there, the reserved job's nodes)``: the last two are
        :func:`holds_nodes`' counts, meaningful with a reservation."""
        easy = self._easy
        reserved = easy.reserved
        return (
            self.now,
            self.free,
            easy.phase is Phase.BACKFILL,
            easy.stopped,
            -1 if reserved is None else reserved,
            easy.shadow,
            self._shadow_free,
            self._reserved_tasks,
        )

    def allowed(self, job: int) -> bool:
        """Whether picking pending ``job`` now is allowed (HEAD: it can ever start; BACKFILL:
        it may start now under the rules)."""
        easy = self._easy
        if easy.stopped:
            return False
        if easy.phase == Phase.HEAD:
            return self.can_start(job)
        return job != easy.reserved and easy.backfill_placement(job) is not None

    def pick(self, job: int) -> bool:
        """Apply a pick (see :meth:`EasyRound.pick`); True if the job started."""
        return self._easy.pick(job)

    # ------------------------------------------------------------------ ResourceModel

    def place_now(self, job: int) -> int | None:
        need = self.tasks[job]
        return need if need <= self.free else None

    def can_start(self, job: int) -> bool:
        return self.tasks[job] <= self.nodes

    def ends(self, job: int) -> float:
        return self.now + self.walltime[job]

    def reserve(self, job: int) -> float:
        """First requested end at which ``job``'s nodes are free; keeps the nodes free then."""
        need, free, now, tasks = self.tasks[job], self.free, self.now, self.tasks
        ends = self._ends
        i, m = 0, len(ends)
        while i < m:
            t = ends[i][0]
            if t < now:
                t = now  # overdue jobs all release at now, together
            while i < m and ends[i][0] <= t:
                free += tasks[ends[i][3]]
                i += 1
            if free >= need:
                self._shadow_free = free
                self._reserved_tasks = need
                return t
        raise RuntimeError(f"job {self.fcfs[job][1]!r} can never start")

    def holds(self, job: int, placement: int) -> bool:
        del job  # on node counts only the size matters
        return holds_nodes(self._shadow_free, self._reserved_tasks, placement)

    def start(self, job: int, placement: int) -> bool:
        self.free -= placement
        submit, job_id = self.fcfs[job]
        key = self.running[job] = (self.now + self.walltime[job], submit, job_id, job)
        insort(self._ends, key)
        del self.pending[job]
        self._is_pending[job] = False
        self.started.append(job)
        return self.something_fits()

    def can_start_any(self) -> bool:
        return self.something_fits()

    def hold(self, job: int, placement: int) -> None:
        del job
        self._shadow_free -= placement
