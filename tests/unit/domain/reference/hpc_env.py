"""FROZEN: the training twin (training/hpc_env.py) as it stood before issue 19 moved training
onto the engine.  A test oracle only; never edit, never import outside tests."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.domains.hpc import encoding as enc

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

BSLD_TAU_S = 10.0
_GUARD = 0.1
_LOG_WALLTIME_SCALE = math.log1p(enc.WALLTIME_SCALE_S)
_LOG_SLOWDOWN_SCALE = math.log1p(enc.SLOWDOWN_SCALE)
_LOG_QUEUE_SCALE = math.log1p(enc.QUEUE_SCALE)


@dataclass(frozen=True, slots=True)
class JobTable:
    """The columns of one cleaned trace that the twin needs (all float64, trace order)."""

    name: str
    submit: FloatArray
    run: FloatArray
    walltime: FloatArray
    procs: FloatArray
    capacity: float

    @property
    def n_jobs(self) -> int:
        return int(self.submit.shape[0])

    @classmethod
    def from_swf(cls, path: str) -> JobTable:
        from app.domains.hpc.swf import load_swf

        trace = load_swf(path)
        return cls(
            name=trace.name,
            submit=trace.submit_time.astype(np.float64),
            run=trace.run_time.astype(np.float64),
            walltime=trace.request_time.astype(np.float64),
            procs=trace.processors.astype(np.float64),
            capacity=float(trace.max_procs),
        )


# ------------------------------------------------------------------------------------------------
# heuristic scores (lower first; ties by submit then index), as app.domains.hpc.heuristics
# ------------------------------------------------------------------------------------------------


def _guarded(x: FloatArray) -> FloatArray:
    return np.where(x > 0.0, x, _GUARD)


def heuristic_scores(
    name: str, submit: FloatArray, walltime: FloatArray, procs: FloatArray, now: float
) -> FloatArray:
    """Kairos's (textbook) heuristic scores of the given jobs at ``now``."""
    if name == "fcfs":
        return submit.copy()
    if name == "sjf":
        return walltime.copy()
    if name == "f1":
        return np.log10(_guarded(walltime)) * procs + 870.0 * np.log10(_guarded(submit))
    wait = np.maximum(now - submit, 0.0)
    if name == "wfp3":
        x = wait / _guarded(walltime)
        return -(x * x * x) * procs
    if name == "unicep":
        n = np.maximum(procs, 1.0)
        return -wait / (np.log2(n) * _guarded(walltime) + 1e-15)
    raise ValueError(f"unknown heuristic {name!r}")


HEURISTIC_NAMES = ("fcfs", "sjf", "f1", "wfp3", "unicep")


@dataclass
class Observation:
    obs: npt.NDArray[np.float32]  # [N, F]
    mask: npt.NDArray[np.bool_]  # [N]
    index: IntArray  # [N] position in the queue of each row (-1: padding)


class HpcEpisode:
    """One sequence of ``length`` jobs from ``table`` starting at ``start``, simulated lazily."""

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

    # -------------------------------------------------------------------------- episode control

    def reset(self, start: int, length: int) -> float:
        """Start a new episode; returns the reward of the forced steps before the first choice."""
        if start < 0 or start + length > self.t.n_jobs or length < 1:
            raise ValueError(f"sequence [{start}, {start + length}) outside the trace")
        self.start, self.length = start, length
        self.end = start + length
        self.next_arrival = start
        self.queue: list[int] = []  # job indices, FCFS (trace) order
        # running: heap of (actual end, index) for completions; requested ends kept alongside
        self.completions: list[tuple[float, int]] = []
        self.running: dict[int, float] = {}  # index -> start time
        self.free = self.t.capacity
        self.started = 0
        self.start_time = np.full(length, np.nan)
        self.bsld = np.zeros(length)
        self.now = float(self.t.submit[start])
        self.done = False
        self.rounds = 0
        self._pending_reward = 0.0
        self._arrive_until(self.now)
        self._new_round()
        return self._settle()

    def _arrive_until(self, t: float) -> None:
        submit = self.t.submit
        while self.next_arrival < self.end and submit[self.next_arrival] <= t:
            self.queue.append(self.next_arrival)
            self.next_arrival += 1

    def _new_round(self) -> None:
        self.rounds += 1
        self.phase_backfill = False
        self.res_idx = -1
        self.res_start = 0.0
        self.shadow_free = 0.0
        self._cache: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None = None

    def _advance(self) -> None:
        """Process the next event time (all events at it), then open a new round."""
        t_arr = (
            float(self.t.submit[self.next_arrival]) if self.next_arrival < self.end else math.inf
        )
        t_done = self.completions[0][0] if self.completions else math.inf
        t = min(t_arr, t_done)
        if not math.isfinite(t):
            raise RuntimeError("no event left but jobs are still queued")
        self.now = t
        while self.completions and self.completions[0][0] <= t:
            _, j = heapq.heappop(self.completions)
            del self.running[j]
            self.free += self.t.procs[j]
        self._arrive_until(t)
        self._new_round()

    # -------------------------------------------------------------------------- the round

    def _masks(self) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """``(fits, mask)`` over the queue (cached until the next pick)."""
        if self._cache is not None:
            return self._cache
        q = np.asarray(self.queue, dtype=np.int64)
        procs = self.t.procs[q]
        fits = procs <= self.free
        if not self.phase_backfill:
            mask = np.ones(len(q), dtype=np.bool_)
        else:
            res_procs = self.t.procs[self.res_idx]
            ends_in_time = self.now + self.t.walltime[q] <= self.res_start
            leaves_room = procs <= self.shadow_free - res_procs
            mask = fits & (q != self.res_idx) & (ends_in_time | leaves_room)
        self._cache = (fits, mask)
        return self._cache

    def _start_job(self, pos: int) -> None:
        j = self.queue.pop(pos)
        t = self.t
        self.free -= t.procs[j]
        self.running[j] = self.now
        heapq.heappush(self.completions, (self.now + t.run[j], j))
        k = j - self.start
        self.start_time[k] = self.now
        wait = self.now - t.submit[j]
        b = max(1.0, (wait + t.run[j]) / max(t.run[j], BSLD_TAU_S))
        self.bsld[k] = b
        self._pending_reward -= b / self.length
        self.started += 1

    def _earliest(self, j: int) -> tuple[float, float]:
        """Earliest start of job ``j`` and the free processors then (EASY shadow time)."""
        need = self.t.procs[j]
        free = self.free
        if need <= free:
            return self.now, free
        t = self.t
        releases = sorted((s + t.walltime[r], t.submit[r], r) for r, s in self.running.items())
        i = 0
        while i < len(releases):
            # as in the core: overdue jobs (requested end already past: they overran their
            # request) all release together at now; later ones in groups of equal requested end
            end = max(releases[i][0], self.now)
            while i < len(releases) and releases[i][0] <= end:
                free += t.procs[releases[i][2]]
                i += 1
            if need <= free:
                return end, free
        raise RuntimeError(f"job {j} needs {need} processors; the cluster has {t.capacity}")

    def apply(self, pos: int) -> None:
        """Apply a pick: ``pos`` is a position in the queue whose mask entry is true."""
        fits, mask = self._masks()
        if not mask[pos]:
            raise ValueError(f"queue position {pos} is masked out")
        j = self.queue[pos]
        if not self.phase_backfill:
            if fits[pos]:
                self._start_job(pos)
            else:
                self.res_idx = j
                self.res_start, self.shadow_free = self._earliest(j)
                if self.backfill:
                    self.phase_backfill = True
                else:
                    self._cache = (fits, np.zeros_like(mask))
                    return
        else:
            if self.now + self.t.walltime[j] > self.res_start:
                self.shadow_free -= self.t.procs[j]
            self._start_job(pos)
        self._cache = None

    def round_open(self) -> bool:
        """A choice can still change something: a job is pickable and, in the HEAD phase, some
        job fits now (otherwise the round can only reserve, which the next round redoes)."""
        if not self.queue:
            return False
        fits, mask = self._masks()
        return bool(mask.any()) and (self.phase_backfill or bool(fits.any()))

    def _settle(self) -> float:
        """Advance until a real choice is pending (or the episode ends); returns the reward."""
        while True:
            if self.started == self.length:
                self.done = True
                break
            if not self.round_open():
                self._advance()
                continue
            mask = self._masks()[1]
            if self.auto_forced and int(mask.sum()) == 1:
                self.apply(int(np.flatnonzero(mask)[0]))
                continue
            break
        reward, self._pending_reward = self._pending_reward, 0.0
        return reward

    def step_queue(self, pos: int) -> float:
        """Apply a pick by queue position and settle; returns the step's reward."""
        self.apply(pos)
        return self._settle()

    # -------------------------------------------------------------------------- observation

    def window(self) -> IntArray:
        """Queue positions the policy sees (``encoding.select_window``), ascending."""
        count = len(self.queue)
        if count <= self.max_candidates:
            return np.arange(count, dtype=np.int64)
        _, mask = self._masks()
        q = np.asarray(self.queue, dtype=np.int64)
        wt, sub, size = self.t.walltime[q], self.t.submit[q], self.t.procs[q] / self.t.capacity
        pos = np.arange(count)
        chosen: list[int] = []
        seen: set[int] = set()
        for group in (pos[mask], pos[~mask]):
            by_sjf = group[np.lexsort((group, sub[group], wt[group]))]
            by_small = group[np.lexsort((group, sub[group], size[group]))]
            for a, b in zip(by_sjf.tolist(), by_small.tolist(), strict=True):
                for i in (a, b):
                    if i not in seen:
                        seen.add(i)
                        chosen.append(i)
                        if len(chosen) == self.max_candidates:
                            return np.array(sorted(chosen), dtype=np.int64)
        return np.array(sorted(chosen), dtype=np.int64)

    def observe(self, pad_to: int | None = None) -> Observation:
        """The encoder's rows for the current step (``pad_to`` rows, padding masked)."""
        rows = self.window()
        n = len(rows) if pad_to is None else pad_to
        obs = np.zeros((n, enc.NUM_FEATURES), dtype=np.float32)
        mask = np.zeros(n, dtype=np.bool_)
        index = np.full(n, -1, dtype=np.int64)
        fits_all, mask_all = self._masks()
        q = np.asarray(self.queue, dtype=np.int64)[rows]
        t = self.t
        wt = t.walltime[q]
        wait = np.maximum(self.now - t.submit[q], 0.0)
        free = self.free
        has_res = self.res_idx >= 0
        if has_res:
            no_delay = (self.now + wt <= self.res_start).astype(np.float64)
            horizon = (self.res_start - self.now) / enc.WAIT_SCALE_S
        else:
            no_delay = np.ones(len(q))
            horizon = 0.0
        with np.errstate(divide="ignore"):
            vs_free = t.procs[q] / free if free > 0 else np.where(t.procs[q] > 0, np.inf, 0.0)
        k = len(q)
        cols = np.empty((k, enc.NUM_FEATURES), dtype=np.float64)
        cols[:, 0] = wait / enc.WAIT_SCALE_S
        cols[:, 1] = np.log1p(np.maximum(wt, 0.0)) / _LOG_WALLTIME_SCALE
        cols[:, 2] = t.procs[q] / t.capacity
        cols[:, 3] = np.where(fits_all[rows], 1.0 - enc.EPS, enc.EPS)
        cols[:, 4] = vs_free
        cols[:, 5] = no_delay
        cols[:, 6] = (q == self.res_idx) if has_res else 0.0
        cols[:, 7] = (
            np.log1p(wait / np.maximum(np.maximum(wt, 0.0), enc.SLOWDOWN_MIN_RUNTIME_S))
            / _LOG_SLOWDOWN_SCALE
        )
        cols[:, 8] = 0.5
        cols[:, 9] = 1.0 if self.phase_backfill else 0.0
        cols[:, 10] = math.log1p(len(self.queue)) / _LOG_QUEUE_SCALE
        cols[:, 11] = min(free, t.capacity) / t.capacity
        cols[:, 12] = horizon
        cols = np.where(np.isfinite(cols), cols, np.where(cols == np.inf, 1.0, 0.0))
        obs[:k] = np.clip(cols, 0.0, 1.0)
        mask[:k] = mask_all[rows]
        index[:k] = rows
        return Observation(obs, mask, index)

    def teacher_pos(self, heuristic: str, visible: IntArray | None = None) -> int:
        """Queue position the heuristic would pick now (first pickable job in its order),
        optionally among the ``visible`` queue positions only."""
        _, mask = self._masks()
        cand = np.flatnonzero(mask)
        if visible is not None:
            cand = np.intersect1d(cand, visible)
        q = np.asarray(self.queue, dtype=np.int64)[cand]
        t = self.t
        score = heuristic_scores(heuristic, t.submit[q], t.walltime[q], t.procs[q], self.now)
        score = np.where(np.isnan(score), np.inf, score)
        order = np.lexsort((q, t.submit[q], score))
        return int(cand[order[0]])

    def avg_bsld(self) -> float:
        return float(self.bsld.mean())


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
