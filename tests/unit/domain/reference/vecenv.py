"""FROZEN: the batched node-count training env (sim/vecenv.py) as it stood before issue 19
moved the env onto the engine.  A test oracle only; never edit, never import outside tests."""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from app.domains.hpc.encoding import (
    DEFAULT_MAX_CANDIDATES,
    EPS,
    NUM_FEATURES,
    PRIORITY_SCALE,
    QUEUE_SCALE,
    SLOWDOWN_MIN_RUNTIME_S,
    SLOWDOWN_SCALE,
    WAIT_SCALE_S,
    WALLTIME_SCALE_S,
)
from app.domains.hpc.swf import SwfTrace
from app.domains.hpc.types import Backfill

RewardKind = Literal["bsld", "utilization"]

IntVec = npt.NDArray[np.int64]
FloatVec = npt.NDArray[np.float64]

_LOG_WALLTIME = math.log1p(WALLTIME_SCALE_S)
_LOG_SLOWDOWN = math.log1p(SLOWDOWN_SCALE)
_LOG_QUEUE = math.log1p(QUEUE_SCALE)


@dataclass(frozen=True, slots=True)
class _Jobs:
    """Whole-trace columns, plus ranks that reproduce the core's string-id tie-breaks."""

    submit: FloatVec
    walltime: FloatVec  # max(request, 0), as workload_from_trace
    run: FloatVec
    tasks: IntVec
    procs: IntVec
    #: rank of ``(submit, str(id))`` -- the core's FCFS order
    fcfs_rank: IntVec
    #: rank of ``(walltime, submit, str(id))`` -- the encoder's SJF order
    sjf_rank: IntVec
    #: rank of ``(tasks, submit, str(id))`` -- the encoder's "smallest" order
    small_rank: IntVec


def _rank(*keys: Any) -> IntVec:
    order = sorted(range(len(keys[0])), key=lambda i: tuple(k[i] for k in keys))
    rank = np.empty(len(order), dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int64)
    return rank


def _jobs(trace: SwfTrace) -> _Jobs:
    ppn = trace.procs_per_node
    tasks = np.array([math.ceil(p / ppn) for p in trace.processors.tolist()], dtype=np.int64)
    if tasks.size and int(tasks.max()) > trace.max_nodes:
        raise ValueError("a job needs more nodes than the machine has")
    ids = [str(int(i)) for i in trace.job_id.tolist()]
    submit = trace.submit_time.astype(np.float64)
    walltime = np.maximum(trace.request_time, 0).astype(np.float64)
    s, w, t = submit.tolist(), walltime.tolist(), tasks.tolist()
    return _Jobs(
        submit=submit,
        walltime=walltime,
        run=trace.run_time.astype(np.float64),
        tasks=tasks,
        procs=trace.processors.astype(np.int64),
        fcfs_rank=_rank(s, ids),
        sjf_rank=_rank(w, s, ids),
        small_rank=_rank(t, s, ids),
    )


@dataclass(frozen=True, slots=True)
class _Lists:
    """The same columns as Python lists (scalar access in the event loop)."""

    submit: list[float]
    walltime: list[float]
    run: list[float]
    tasks: list[int]
    fcfs_rank: list[int]


def _lists(jobs: _Jobs) -> _Lists:
    return _Lists(
        submit=jobs.submit.tolist(),
        walltime=jobs.walltime.tolist(),
        run=jobs.run.tolist(),
        tasks=jobs.tasks.tolist(),
        fcfs_rank=jobs.fcfs_rank.tolist(),
    )


class _Episode:
    """One sequence on a machine of ``total`` identical nodes, stepped like a DecisionRun."""

    def __init__(
        self,
        jobs: _Jobs,
        lists: _Lists,
        start: int,
        length: int,
        total: int,
        easy: bool,
        by_fcfs: IntVec,
    ) -> None:
        self.jobs = jobs
        self.cols = lists
        self.first = start
        self.stop = start + length
        self.total = total
        self.easy = easy
        self.by_fcfs = by_fcfs
        self.submit = jobs.submit
        self.now = float(jobs.submit[start])
        self.free = total
        self.next_arrival = start
        self.completions: list[tuple[float, int, int]] = []  # (actual end, seq, job)
        self.seq = 0
        self.pending: list[int] = []  # sorted FCFS ranks
        self.by_tasks: list[tuple[int, int]] = []  # heap, lazily purged
        self.running: dict[int, float] = {}  # job -> requested end
        self.start_time: dict[int, float] = {}
        self.started = 0
        self.length = length
        # decision round
        self.backfill_phase = False
        self.reserved = -1
        self.shadow = 0.0
        self.shadow_free = 0
        self.stopped = False
        self.dirty = False
        self._cache: tuple[IntVec, npt.NDArray[np.bool_]] | None = None

    # ---------------------------------------------------------------- events

    def _advance(self) -> None:
        comp = self.completions
        lst = self.cols
        submit = lst.submit
        t_arr = submit[self.next_arrival] if self.next_arrival < self.stop else math.inf
        t_comp = comp[0][0] if comp else math.inf
        t = min(t_arr, t_comp)
        if t == math.inf:
            raise RuntimeError("no events left but jobs never started")
        self.now = float(t)
        tasks = lst.tasks
        while comp and comp[0][0] == t:
            j = heapq.heappop(comp)[2]
            del self.running[j]
            self.free += tasks[j]
        fcfs_rank = lst.fcfs_rank
        while self.next_arrival < self.stop and submit[self.next_arrival] == t:
            j = self.next_arrival
            insort(self.pending, fcfs_rank[j])
            heapq.heappush(self.by_tasks, (tasks[j], j))
            self.next_arrival += 1
        self.dirty = True
        self._cache = None

    def _something_fits(self) -> bool:
        by_tasks, started = self.by_tasks, self.start_time
        while by_tasks and by_tasks[0][1] in started:
            heapq.heappop(by_tasks)
        return bool(by_tasks) and by_tasks[0][0] <= self.free

    def next_round(self) -> bool:
        """Move to the next decision point; False when every job has started."""
        self.backfill_phase = False
        self.reserved = -1
        self.stopped = False
        self._cache = None
        while self.started < self.length:
            if self.dirty and self.pending:
                self.dirty = False
                if self._something_fits():
                    return True
            else:
                self._advance()
        return False

    # ---------------------------------------------------------------- one decision step

    def _start(self, j: int) -> None:
        lst = self.cols
        now = self.now
        self.start_time[j] = now
        self.free -= lst.tasks[j]
        self.running[j] = now + lst.walltime[j]
        heapq.heappush(self.completions, (now + lst.run[j], self.seq, j))
        self.seq += 1
        del self.pending[bisect_left(self.pending, lst.fcfs_rank[j])]
        self.started += 1
        self._cache = None

    def _reserve(self, j: int) -> None:
        lst = self.cols
        tasks = lst.tasks
        need = tasks[j]
        submit, fcfs_rank = lst.submit, lst.fcfs_rank
        ends = sorted((end, submit[k], fcfs_rank[k], k) for k, end in self.running.items())
        free = self.free
        i = 0
        shadow = math.inf
        now = self.now
        while i < len(ends):
            # as in the core: overdue jobs (requested end past) all release at now, together
            t = max(ends[i][0], now)
            while i < len(ends) and ends[i][0] <= t:
                free += tasks[ends[i][3]]
                i += 1
            if free >= need:
                shadow = t
                break
        self.reserved = j
        self.shadow = shadow
        self.shadow_free = free
        if not self.easy:
            self.stopped = True
        else:
            self.backfill_phase = True
        self._cache = None

    def view(self) -> tuple[IntVec, npt.NDArray[np.bool_]]:
        """Pending jobs in FCFS order (the StepView candidates) and their mask (cached)."""
        if self._cache is None:
            cands = self.by_fcfs[np.asarray(self.pending, dtype=np.int64)]
            self._cache = (cands, self._mask(cands))
        return self._cache

    def _mask(self, cands: IntVec) -> npt.NDArray[np.bool_]:
        jobs = self.jobs
        if self.stopped:
            return np.zeros(cands.shape[0], dtype=np.bool_)
        if not self.backfill_phase:
            return np.ones(cands.shape[0], dtype=np.bool_)
        tasks = jobs.tasks[cands]
        fits = tasks <= self.free
        ends_in_time = self.now + jobs.walltime[cands] <= self.shadow
        leaves_room = self.shadow_free - tasks >= self.cols.tasks[self.reserved]
        allowed: npt.NDArray[np.bool_] = (
            fits & (ends_in_time | leaves_room) & (cands != self.reserved)
        )
        return allowed

    def round_done(self) -> bool:
        """As ``DecisionRun.done``: stopped, nothing pending, or no backfill candidate left."""
        if self.stopped or not self.pending:
            return True
        return self.backfill_phase and not bool(self.view()[1].any())

    def apply(self, j: int) -> None:
        lst = self.cols
        if not self.backfill_phase:
            if lst.tasks[j] <= self.free:
                self._start(j)
            else:
                self._reserve(j)
            return
        if self.now + lst.walltime[j] > self.shadow:
            self.shadow_free -= lst.tasks[j]
        self._start(j)

    # ---------------------------------------------------------------- result

    def bsld(self) -> float:
        jobs = self.jobs
        idx = np.arange(self.first, self.stop)
        start = np.array([self.start_time[int(j)] for j in idx], dtype=np.float64)
        run = jobs.run[idx]
        return float(
            np.mean(np.maximum(1.0, (start - jobs.submit[idx] + run) / np.maximum(run, 10.0)))
        )

    def utilization(self, max_procs: int) -> float:
        jobs = self.jobs
        idx = np.arange(self.first, self.stop)
        end = max(self.start_time.values())
        span = end - float(jobs.submit[self.first])
        if span <= 0:
            return 0.0
        work = float(np.sum(jobs.run[idx] * jobs.procs[idx].astype(np.float64)))
        return work / (span * max_procs)


class VectorSchedulingEnv:
    """``num_envs`` kairos-semantics episodes with batched observations (see the module doc).

    ``reset(seed)`` -> ``(obs, infos)``; ``step(actions)`` -> ``(obs, rewards, terminated,
    truncated, infos)`` with ``obs = {"obs": float32[B, N, F], "action_mask": int8[B, N]}``,
    ``infos["action_mask"]`` (int8) and ``infos["candidate_index"]``.  Actions are rows; a masked
    row is replaced by the first allowed one and flagged in ``infos["invalid_action"]``.
    """

    def __init__(
        self,
        trace: SwfTrace,
        num_envs: int,
        *,
        sequence_length: int = 256,
        backfill: Backfill = Backfill.EASY,
        max_candidates: int = DEFAULT_MAX_CANDIDATES,
        reward: RewardKind = "bsld",
        batch_slice: int = 0,
    ) -> None:
        upper = trace.n_jobs if batch_slice == 0 else min(batch_slice, trace.n_jobs)
        if upper - sequence_length - 1 <= sequence_length:
            raise ValueError(f"{upper} jobs are too few for sequences of {sequence_length}")
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        self.trace = trace
        self.num_envs = num_envs
        self.sequence_length = sequence_length
        self.easy = backfill is Backfill.EASY
        self.max_candidates = max_candidates
        self.reward_kind: RewardKind = reward
        self._start_range = (sequence_length, upper - sequence_length - 1)
        self._jobs = _jobs(trace)
        self._lists = _lists(self._jobs)
        self._by_fcfs = np.argsort(self._jobs.fcfs_rank, kind="stable").astype(np.int64)
        self._ppn = trace.procs_per_node
        self._capacity = trace.max_nodes * self._ppn
        self._rng = np.random.default_rng()
        self._episodes: list[_Episode] = []
        self._windows: list[IntVec] = []
        self._row_masks: list[npt.NDArray[np.bool_]] = []
        self.sequence_starts: list[int] = []

    # ---------------------------------------------------------------- episodes

    def _new_episode(self, b: int, start: int | None = None) -> None:
        if start is None:
            start = int(self._rng.integers(*self._start_range))
        ep = _Episode(
            self._jobs,
            self._lists,
            start,
            self.sequence_length,
            self.trace.max_nodes,
            self.easy,
            self._by_fcfs,
        )
        ep.next_round()
        self._episodes[b] = ep
        self.sequence_starts[b] = start

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None or not self._episodes:
            self._rng = np.random.default_rng(seed)
        starts = None if options is None else options.get("starts")
        self._episodes = [None] * self.num_envs  # type: ignore[list-item]
        self.sequence_starts = [-1] * self.num_envs
        for b in range(self.num_envs):
            self._new_episode(b, None if starts is None else int(starts[b]))
        obs, infos = self._observe()
        infos["sequence_start"] = np.asarray(self.sequence_starts, dtype=np.int64)
        return obs, infos

    # ---------------------------------------------------------------- observation

    def _window(self, ep: _Episode, cands: IntVec, mask: npt.NDArray[np.bool_]) -> IntVec:
        """Rows shown to the policy (indices into ``cands``), as encoding.select_window."""
        count = cands.shape[0]
        if count <= self.max_candidates:
            return np.arange(count, dtype=np.int64)
        jobs = ep.jobs
        chosen: list[int] = []
        seen: set[int] = set()
        for group in (np.flatnonzero(mask), np.flatnonzero(~mask)):
            by_sjf = group[np.argsort(jobs.sjf_rank[cands[group]], kind="stable")].tolist()
            by_small = group[np.argsort(jobs.small_rank[cands[group]], kind="stable")].tolist()
            for pair in zip(by_sjf, by_small, strict=True):
                for i in pair:
                    if i not in seen:
                        seen.add(i)
                        chosen.append(i)
                        if len(chosen) == self.max_candidates:
                            return np.asarray(sorted(chosen), dtype=np.int64)
        return np.asarray(sorted(chosen), dtype=np.int64)

    def _observe(self) -> tuple[dict[str, Any], dict[str, Any]]:
        n, b_count = self.max_candidates, self.num_envs
        obs = np.zeros((b_count, n, NUM_FEATURES), dtype=np.float32)
        mask_out = np.zeros((b_count, n), dtype=np.int8)
        index = np.full((b_count, n), -1, dtype=np.int64)
        jobs_parts: list[IntVec] = []
        widths: list[int] = []
        ctx: list[tuple[float, ...]] = []
        frees: list[int] = []
        windows: list[IntVec] = []
        row_masks: list[npt.NDArray[np.bool_]] = []
        c = self._capacity
        ppn = self._ppn
        for b, ep in enumerate(self._episodes):
            cands, mask = ep.view()
            count = cands.shape[0]
            if count <= n:
                chosen, row_mask = cands, mask
                index[b, :count] = np.arange(count)
            else:
                rows = self._window(ep, cands, mask)
                chosen, row_mask = cands[rows], mask[rows]
                index[b, : rows.shape[0]] = rows
            width = chosen.shape[0]
            windows.append(chosen)
            row_masks.append(row_mask)
            mask_out[b, :width] = row_mask
            jobs_parts.append(chosen)
            widths.append(width)
            frees.append(ep.free)
            free_cpu = float(ep.free) * ppn
            reserved = ep.backfill_phase or ep.stopped
            ctx.append(
                (
                    ep.now,
                    free_cpu,
                    1.0 if reserved else 0.0,
                    ep.shadow if reserved else 0.0,
                    float(ep.reserved if reserved else -1),
                    1.0 if ep.backfill_phase else 0.0,
                    math.log1p(count) / _LOG_QUEUE,
                    min(free_cpu, c) / c if c > 0.0 else 0.0,
                )
            )
        self._windows = windows
        self._row_masks = row_masks
        jobs = np.concatenate(jobs_parts)
        width_arr = np.asarray(widths, dtype=np.int64)
        env = np.repeat(np.arange(b_count, dtype=np.int64), width_arr)
        offsets = np.cumsum(width_arr) - width_arr
        row = np.arange(jobs.shape[0], dtype=np.int64) - np.repeat(offsets, width_arr)
        fits = self._jobs.tasks[jobs] <= np.repeat(np.asarray(frees, dtype=np.int64), width_arr)
        feats = self._features(jobs, env, fits, np.asarray(ctx, dtype=np.float64))
        obs[env, row] = feats
        infos: dict[str, Any] = {
            "action_mask": mask_out.copy(),
            "candidate_index": index,
            "candidates": np.array([len(ep.pending) for ep in self._episodes]),
        }
        return {"obs": obs, "action_mask": mask_out}, infos

    def _features(
        self, jobs: IntVec, env: IntVec, fits: npt.NDArray[np.bool_], ctx: FloatVec
    ) -> FloatVec:
        """The encoder's 13 features for many rows at once (same float64 arithmetic)."""
        tbl = self._jobs
        out = np.zeros((jobs.shape[0], NUM_FEATURES), dtype=np.float64)
        now = ctx[env, 0]
        free_cpu = ctx[env, 1]
        has_res = ctx[env, 2] > 0.0
        shadow = ctx[env, 3]
        demand = tbl.tasks[jobs].astype(np.float64) * self._ppn
        walltime = tbl.walltime[jobs]
        wait = np.maximum(now - tbl.submit[jobs], 0.0)
        cap = self._capacity
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            out[:, 0] = wait / WAIT_SCALE_S
            out[:, 1] = np.log1p(walltime) / _LOG_WALLTIME
            out[:, 2] = np.where(demand > 0.0, demand / cap if cap > 0.0 else np.inf, 0.0)
            out[:, 3] = np.where(fits, 1.0 - EPS, EPS)
            out[:, 4] = np.where(
                demand > 0.0, np.where(free_cpu > 0.0, demand / free_cpu, np.inf), 0.0
            )
            out[:, 5] = np.where(has_res, now + walltime <= shadow, 1.0)
            out[:, 6] = np.where(has_res & (jobs == ctx[env, 4].astype(np.int64)), 1.0, 0.0)
            out[:, 12] = np.where(has_res, (shadow - now) / WAIT_SCALE_S, 0.0)
            slowdown = wait / np.maximum(walltime, SLOWDOWN_MIN_RUNTIME_S)
            out[:, 7] = np.log1p(slowdown) / _LOG_SLOWDOWN
            out[:, 8] = 0.5 + 0.5 * np.tanh(0.0 / PRIORITY_SCALE)
        out[:, 9] = ctx[env, 5]
        out[:, 10] = ctx[env, 6]
        out[:, 11] = ctx[env, 7]
        np.nan_to_num(out, copy=False, nan=0.0, posinf=1.0, neginf=0.0)
        np.clip(out, 0.0, 1.0, out=out)
        return out

    # ---------------------------------------------------------------- step

    def _final_reward(self, ep: _Episode) -> tuple[float, float]:
        bsld = ep.bsld()
        if self.reward_kind == "bsld":
            return -bsld, bsld
        return ep.utilization(self.trace.max_procs), bsld

    def step(
        self, actions: npt.ArrayLike
    ) -> tuple[
        dict[str, Any],
        FloatVec,
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        dict[str, Any],
    ]:
        acts = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=np.bool_)
        invalid = np.zeros(self.num_envs, dtype=np.bool_)
        episode_bsld = np.full(self.num_envs, np.nan)
        for b, ep in enumerate(self._episodes):
            window, row_mask = self._windows[b], self._row_masks[b]
            row = int(acts[b])
            if not (0 <= row < window.shape[0] and bool(row_mask[row])):
                invalid[b] = True
                row = int(np.flatnonzero(row_mask)[0])
            ep.apply(int(window[row]))
            if ep.round_done() and not ep.next_round():
                rewards[b], episode_bsld[b] = self._final_reward(ep)
                terminated[b] = True
                self._new_episode(b)
        obs, infos = self._observe()
        infos["invalid_action"] = invalid
        infos["episode_bsld"] = episode_bsld
        return obs, rewards, terminated, np.zeros(self.num_envs, dtype=np.bool_), infos
