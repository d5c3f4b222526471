"""The training interface over the domain's engine env (:mod:`app.domains.hpc.env`).

PPO, ES and the training-side evaluation step episodes through :class:`HpcEpisode`: one slot of
an :class:`~app.domains.hpc.env.EpisodeBatch`, so the rounds, masks and observations are the
engine's (the EASY rules of ``app/domains/hpc/easy.py`` on the pooled count model, the encoder's
one feature formula).  What this module adds is training bookkeeping only:

* positions: a pick is a position in the FCFS pending queue (the encoder's candidate index);
* ``auto_forced``: decisions with a single pickable candidate are applied automatically;
* rewards: each step returns ``-sum(bsld of the jobs started since the previous step) / length``,
  so an episode's return is RLScheduler's terminal reward ``-avg bsld`` (docs/adr/0062);
* teachers: :meth:`HpcEpisode.teacher_pos` is the heuristic's own order
  (:meth:`app.domains.hpc.heuristics.base.ScoreHeuristic.order`) over the pickable jobs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.domains.hpc import encoding as enc
from app.domains.hpc.env import EpisodeBatch, TraceJobs
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.simulate import CPU
from app.domains.hpc.types import Backfill, Job

IntArray = npt.NDArray[np.int64]

HEURISTIC_NAMES = ("fcfs", "sjf", "f1", "wfp3", "unicep")


@dataclass(frozen=True, slots=True)
class JobTable:
    """One trace's jobs as the engine sees them."""

    name: str
    jobs: TraceJobs

    @property
    def n_jobs(self) -> int:
        return self.jobs.n_jobs

    @classmethod
    def from_swf(cls, path: str) -> JobTable:
        from app.domains.hpc.swf import load_swf

        trace = load_swf(path)
        return cls(name=trace.name, jobs=TraceJobs.from_trace(trace))


@dataclass
class Observation:
    obs: npt.NDArray[np.float32]  # [N, F]
    mask: npt.NDArray[np.bool_]  # [N]
    index: IntArray  # [N] position in the queue of each row (-1: padding)


class HpcEpisode:
    """One sequence of ``length`` jobs from ``table`` starting at ``start``."""

    def __init__(
        self,
        table: JobTable,
        *,
        backfill: bool = True,
        max_candidates: int = enc.DEFAULT_MAX_CANDIDATES,
        auto_forced: bool = True,
    ) -> None:
        self.t = table
        self.backfill = backfill
        self.max_candidates = max_candidates
        self.auto_forced = auto_forced
        self.start = 0
        self.length = 0
        self.done = True
        self._batch: EpisodeBatch | None = None
        self._jobs: list[Job] = []

    # -------------------------------------------------------------------------- episode control

    def reset(self, start: int, length: int) -> float:
        """Start a new episode; returns the reward of the forced steps before the first choice."""
        if start < 0 or start + length > self.t.n_jobs or length < 1:
            raise ValueError(f"sequence [{start}, {start + length}) outside the trace")
        self.start, self.length = start, length
        batch = self._batch
        if batch is None or batch.length != length:
            batch = self._batch = EpisodeBatch(
                1,
                length,
                backfill=Backfill.EASY if self.backfill else Backfill.NONE,
                max_candidates=self.max_candidates,
            )
        ep = batch.load(0, self.t.jobs, start)
        jobs = self.t.jobs
        ppn = jobs.procs_per_node
        self._jobs = [
            Job(
                id=jobs.ids[i],
                per_task={CPU: ppn},
                walltime_s=float(jobs.walltime[i]),
                submit_time=float(jobs.submit[i]),
                tasks=int(jobs.tasks[i]),
            )
            for i in ep.order
        ]
        return self._settle()

    def _settle(self) -> float:
        """Settle the engine (and apply forced picks); returns the reward since the last call."""
        batch = self._batch
        assert batch is not None
        view = batch.settle()
        while self.auto_forced and view.allowed[0] == 1:
            batch.pick(0, int(np.flatnonzero(view.mask[0])[0]))
            view = batch.settle()
        ep = batch.episode(0)
        self.done = ep.finished
        return ep.take_reward()

    @property
    def started(self) -> int:
        return 0 if self._batch is None else self._batch.episode(0).started

    @property
    def now(self) -> float:
        assert self._batch is not None
        return self._batch.episode(0).machine.now

    def _queue_handles(self) -> IntArray:
        assert self._batch is not None
        return np.flatnonzero(self._batch.pending[0]).astype(np.int64)

    @property
    def queue(self) -> list[int]:
        """Trace indices of the pending jobs, FCFS order."""
        assert self._batch is not None
        order = self._batch.episode(0).order
        return [order[h] for h in self._queue_handles().tolist()]

    def _allowed(self) -> npt.NDArray[np.bool_]:
        """The mask over the whole queue (not only the visible window)."""
        assert self._batch is not None
        view = self._batch.view
        assert view is not None
        allowed: npt.NDArray[np.bool_] = view.queue_mask[view.queue_slot == 0]
        return allowed

    def step_queue(self, pos: int) -> float:
        """Apply a pick by queue position and settle; returns the step's reward."""
        if self.done:
            raise RuntimeError("the episode is done")
        if not bool(self._allowed()[pos]):
            raise ValueError(f"queue position {pos} is masked out")
        assert self._batch is not None
        self._batch.episode(0).pick(int(self._queue_handles()[pos]))
        return self._settle()

    # -------------------------------------------------------------------------- observation

    def observe(self, pad_to: int | None = None) -> Observation:
        """The encoder's rows for the current step (``pad_to`` rows, padding masked)."""
        assert self._batch is not None
        view = self._batch.view
        assert view is not None
        width = int((view.index[0] >= 0).sum())
        n = width if pad_to is None else pad_to
        if n < width:
            raise ValueError(f"pad_to={pad_to} is smaller than the window ({width})")
        obs = np.zeros((n, enc.NUM_FEATURES), dtype=np.float32)
        mask = np.zeros(n, dtype=np.bool_)
        index = np.full(n, -1, dtype=np.int64)
        obs[:width] = view.obs[0, :width]
        mask[:width] = view.mask[0, :width]
        index[:width] = view.index[0, :width]
        return Observation(obs, mask, index)

    def window(self) -> IntArray:
        """Queue positions the policy sees, ascending."""
        index = self.observe().index
        return index[index >= 0]

    def teacher_pos(self, heuristic: str, visible: IntArray | None = None) -> int:
        """Queue position the heuristic would pick now (first pickable job in its order),
        optionally among the ``visible`` queue positions only."""
        cand = np.flatnonzero(self._allowed())
        if visible is not None:
            cand = np.intersect1d(cand, visible)
        picked = self._queue_handles()[cand].tolist()
        jobs = self._jobs
        position = {id(jobs[h]): p for p, h in zip(cand.tolist(), picked, strict=True)}
        first = get_heuristic(heuristic).order([jobs[h] for h in picked], self.now)[0]
        return position[id(first)]

    @property
    def start_time(self) -> npt.NDArray[np.float64]:
        """Start time of every job of the sequence, trace order (NaN: not started yet)."""
        assert self._batch is not None
        return self._batch.episode(0).trace_starts()

    def avg_bsld(self) -> float:
        assert self._batch is not None
        return self._batch.episode(0).avg_bsld()


def run_sequence(
    table: JobTable,
    start: int,
    length: int,
    pick: Callable[[HpcEpisode], int],
    *,
    backfill: bool = True,
) -> HpcEpisode:
    """Run one sequence to the end with ``pick(episode) -> queue position``."""
    ep = HpcEpisode(table, backfill=backfill)
    ep.reset(start, length)
    while not ep.done:
        ep.step_queue(pick(ep))
    return ep
