"""Gymnasium environments on the engine: the EASY rules of :mod:`app.domains.hpc.easy` on
:class:`~app.domains.hpc.pooled.PooledMachine`, observed through the one feature formula of
:func:`app.domains.hpc.encoding.features`.

One episode = one job sequence of ``sequence_length`` jobs of a trace, replayed from an empty
machine of ``MaxNodes`` identical nodes (every task one whole node, A.2), as
:func:`app.domains.hpc.simulate.workload_from_trace` makes it.  Events (arrivals, completions at
``start + run_time``) are processed one time at a time; then, if some pending job fits, a round
opens and the agent picks jobs one by one through the machine's stepping API
(:meth:`~PooledMachine.begin`, :meth:`~PooledMachine.pick`): the candidates are the pending jobs
in FCFS order ``(submit, id)``; in the HEAD phase every candidate may be picked (one that does not
fit is reserved), in the BACKFILL phase the mask is :func:`app.domains.hpc.easy.backfill_mask`.  A
round closes when the machine can start nothing more or no candidate is allowed; a step that could
only reserve a job while nothing fits (a choice without effect) is not offered.

* observation: ``{"obs": float32[N, F], "action_mask": int8[N]}`` (``N = max_candidates``,
  padding rows zero and masked); the rows are the encoder's candidate window
  (:func:`~app.domains.hpc.encoding.window_rows`) in FCFS order, and
  ``info["candidate_index"]`` maps rows to candidate indices;
* action: a row (``Discrete(N)``); a masked-out row is replaced by the first allowed one and
  reported in ``info["invalid_action"]``;
* reward: 0 at every step; on the terminal step ``-avg bounded slowdown`` (``reward="bsld"``) or
  ``+utilisation`` (``reward="utilization"``), as RLScheduler (A.6).

:class:`EpisodeBatch` holds many episodes (of any traces) in shared arrays, so the masks and the
observations of all of them come from one vectorised pass; :class:`SchedulingEnv` is one of them,
:class:`VectorSchedulingEnv` many with autoreset, ``training/hpc_env.py`` the training adapter.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from app.domains.hpc.easy import backfill_mask
from app.domains.hpc.encoding import (
    DEFAULT_MAX_CANDIDATES,
    NUM_FEATURES,
    features,
    free_fractions,
    queue_feature,
    window_rows,
)
from app.domains.hpc.heuristics.base import finite_key
from app.domains.hpc.pooled import PooledMachine, holds_nodes
from app.domains.hpc.swf import SwfTrace
from app.domains.hpc.types import Backfill

#: ``{"obs": float32[N, F], "action_mask": int8[N]}``
Observation = dict[str, Any]
RewardKind = Literal["bsld", "utilization"]

IntVec = npt.NDArray[np.int64]
FloatVec = npt.NDArray[np.float64]
BoolVec = npt.NDArray[np.bool_]

#: the bounded slowdown's runtime floor (A.6)
BSLD_TAU_S = 10.0


@dataclass(frozen=True, slots=True)
class TraceJobs:
    """A trace's jobs as the engine sees them (as :func:`workload_from_trace` builds them)."""

    name: str
    ids: tuple[str, ...]
    submit: FloatVec
    #: ``max(request, 0)``
    walltime: FloatVec
    run: FloatVec
    #: whole nodes per job, ``ceil(processors / procs_per_node)``
    tasks: IntVec
    procs: IntVec
    max_nodes: int
    max_procs: int
    procs_per_node: float

    @property
    def n_jobs(self) -> int:
        return len(self.ids)

    @property
    def capacity(self) -> float:
        """The schedulable cpus: ``max_nodes * procs_per_node``."""
        return self.max_nodes * self.procs_per_node

    @classmethod
    def from_trace(cls, trace: SwfTrace) -> TraceJobs:
        ppn = trace.procs_per_node
        tasks = np.array([math.ceil(p / ppn) for p in trace.processors.tolist()], dtype=np.int64)
        if tasks.size and int(tasks.max()) > trace.max_nodes:
            raise ValueError("a job needs more nodes than the machine has")
        return cls(
            name=trace.name,
            ids=tuple(str(int(i)) for i in trace.job_id.tolist()),
            submit=trace.submit_time.astype(np.float64),
            walltime=np.maximum(trace.request_time, 0).astype(np.float64),
            run=trace.run_time.astype(np.float64),
            tasks=tasks,
            procs=trace.processors.astype(np.int64),
            max_nodes=trace.max_nodes,
            max_procs=trace.max_procs,
            procs_per_node=ppn,
        )


class _Episode:
    """One sequence on its :class:`PooledMachine`; job handles are FCFS ranks ``0..L-1``."""

    def __init__(self, batch: EpisodeBatch, slot: int, jobs: TraceJobs, start: int) -> None:
        length = batch.length
        if start < 0 or start + length > jobs.n_jobs:
            raise ValueError(f"sequence [{start}, {start + length}) is outside the trace")
        self.jobs, self.start, self.slot, self.batch = jobs, start, slot, batch
        index = range(start, start + length)
        ids, submit = jobs.ids, jobs.submit.tolist()
        #: trace index of every handle: the sequence in FCFS order
        self.order = sorted(index, key=lambda i: (finite_key(submit[i]), ids[i]))
        at = np.asarray(self.order, dtype=np.int64)
        self.tasks: list[int] = jobs.tasks[at].tolist()
        self.walltime: list[float] = jobs.walltime[at].tolist()
        self.submit: list[float] = jobs.submit[at].tolist()
        self.run: list[float] = jobs.run[at].tolist()
        self.machine = PooledMachine(
            jobs.max_nodes,
            self.tasks,
            self.walltime,
            self.submit,
            [ids[i] for i in self.order],
            batch.backfill,
        )
        self.length = length
        self.arrivals = sorted(range(length), key=lambda h: (self.submit[h], h))
        self.next_arrival = 0
        self.completions: list[tuple[float, int, int]] = []  # (actual end, seq, handle)
        self.seq = 0
        self.started = 0
        self.pending = 0
        self.dirty = False
        self.start_time = [math.nan] * length
        #: ``-sum(bsld) / length`` of the jobs started since the last :meth:`take_reward`
        self.reward = 0.0
        b = slot
        batch.tasks[b] = jobs.tasks[at]
        batch.walltime[b] = jobs.walltime[at]
        batch.submit[b] = jobs.submit[at]
        batch.pending[b] = False
        batch.ppn[b] = jobs.procs_per_node
        batch.capacity[b] = jobs.capacity
        self.finished = not self.next_round()

    # ------------------------------------------------------------------ events and rounds

    def _advance(self) -> None:
        machine, arrivals = self.machine, self.arrivals
        t_arr = (
            self.submit[arrivals[self.next_arrival]]
            if self.next_arrival < self.length
            else math.inf
        )
        comp = self.completions
        t_comp = comp[0][0] if comp else math.inf
        t = t_arr if t_arr < t_comp else t_comp
        if t == math.inf:
            raise RuntimeError("no events left but jobs never started")
        machine.now = t
        while comp and comp[0][0] == t:
            machine.complete(heapq.heappop(comp)[2])
        pending_row = self.batch.pending[self.slot]
        while self.next_arrival < self.length and self.submit[arrivals[self.next_arrival]] == t:
            h = arrivals[self.next_arrival]
            machine.arrive(h)
            pending_row[h] = True
            self.pending += 1
            self.next_arrival += 1
        self.dirty = True

    def next_round(self) -> bool:
        """Open the next round in which some pending job fits; False when every job started."""
        machine = self.machine
        while self.started < self.length:
            if self.dirty:
                self.dirty = False
                if machine.something_fits():
                    machine.begin()
                    return True
            else:
                self._advance()
        return False

    def pick(self, h: int) -> None:
        """Apply the pick of pending job ``h`` (a masked-in candidate)."""
        machine = self.machine
        before = len(machine.started)
        machine.pick(h)
        started = machine.started
        if len(started) > before:
            now = machine.now
            run = self.run[h]
            self.batch.pending[self.slot, h] = False
            self.pending -= 1
            self.start_time[h] = now
            heapq.heappush(self.completions, (now + run, self.seq, h))
            self.seq += 1
            self.started += 1
            wait = now - self.submit[h]
            self.reward -= max(1.0, (wait + run) / max(run, BSLD_TAU_S)) / self.length

    def take_reward(self) -> float:
        reward, self.reward = self.reward, 0.0
        return reward

    # ------------------------------------------------------------------ result

    def avg_bsld(self) -> float:
        """The mean bounded slowdown, summed in trace order (as the metrics do)."""
        start = self.trace_starts()
        run = self.jobs.run[self.start : self.start + self.length]
        submit = self.jobs.submit[self.start : self.start + self.length]
        return float(np.mean(np.maximum(1.0, (start - submit + run) / np.maximum(run, BSLD_TAU_S))))

    def utilization(self) -> float:
        """RLScheduler's utilisation: used processor-seconds over the span times ``MaxProcs``."""
        jobs = self.jobs
        end = max(self.start_time)
        span = end - float(jobs.submit[self.start])
        if span <= 0:
            return 0.0
        at = np.asarray(self.order, dtype=np.int64)
        work = float(np.sum(jobs.run[at] * jobs.procs[at].astype(np.float64)))
        return work / (span * jobs.max_procs)

    def trace_starts(self) -> FloatVec:
        """Start times in trace order."""
        out = np.empty(self.length, dtype=np.float64)
        out[np.asarray(self.order, dtype=np.int64) - self.start] = self.start_time
        return out


@dataclass(slots=True)
class BatchView:
    """The current step of every slot of an :class:`EpisodeBatch`."""

    obs: npt.NDArray[np.float32]  # [B, N, F]
    mask: BoolVec  # [B, N]
    #: candidate index (position in the FCFS pending queue) of every row; -1: padding
    index: IntVec  # [B, N]
    #: job handle of every row; -1: padding
    handle: IntVec  # [B, N]
    #: candidates (pending jobs) and allowed candidates per slot
    candidates: IntVec  # [B]
    allowed: IntVec  # [B]
    #: every candidate of every slot, window or not: its slot and mask (FCFS within a slot)
    queue_slot: IntVec  # [C]
    queue_mask: BoolVec  # [C]


class EpisodeBatch:
    """``size`` episode slots of ``length`` jobs in shared arrays (see the module docstring).

    :meth:`load` puts a new sequence in a slot, :meth:`pick` applies a candidate of a slot, and
    :meth:`settle` closes every round without an allowed candidate (moving its slot to its next
    round) and returns the observations of all slots.  A slot whose jobs have all started is
    :attr:`finished` until reloaded.
    """

    def __init__(
        self,
        size: int,
        length: int,
        *,
        backfill: Backfill = Backfill.EASY,
        max_candidates: int = DEFAULT_MAX_CANDIDATES,
    ) -> None:
        if size < 1 or length < 1 or max_candidates < 1:
            raise ValueError("size, length and max_candidates must be >= 1")
        self.size, self.length, self.backfill = size, length, backfill
        self.max_candidates = max_candidates
        shape = (size, length)
        self.pending = np.zeros(shape, dtype=np.bool_)
        self.tasks = np.zeros(shape, dtype=np.int64)
        self.walltime = np.zeros(shape, dtype=np.float64)
        self.submit = np.zeros(shape, dtype=np.float64)
        self.ppn = np.ones(size, dtype=np.float64)
        self.capacity = np.ones(size, dtype=np.float64)
        self.now = np.zeros(size, dtype=np.float64)
        self.free = np.zeros(size, dtype=np.int64)
        self.backfill_phase = np.zeros(size, dtype=np.bool_)
        self.stopped = np.ones(size, dtype=np.bool_)
        self.reserved = np.full(size, -1, dtype=np.int64)
        self.shadow = np.zeros(size, dtype=np.float64)
        self.shadow_valid = np.zeros(size, dtype=np.bool_)
        #: :func:`holds_nodes`' counts of every slot's reservation
        self.shadow_free = np.zeros(size, dtype=np.int64)
        self.reserved_tasks = np.zeros(size, dtype=np.int64)
        self.episodes: list[_Episode | None] = [None] * size
        self.view: BatchView | None = None

    def load(self, slot: int, jobs: TraceJobs, start: int) -> _Episode:
        """A new sequence ``[start, start + length)`` of ``jobs`` in ``slot``, at its first
        round."""
        self.view = None
        ep = _Episode(self, slot, jobs, start)
        self.episodes[slot] = ep
        return ep

    def episode(self, slot: int) -> _Episode:
        ep = self.episodes[slot]
        if ep is None:
            raise RuntimeError(f"slot {slot} holds no episode")
        return ep

    def finished(self, slot: int) -> bool:
        return self.episode(slot).finished

    def pick(self, slot: int, row: int) -> None:
        """Apply ``row`` of the last :meth:`settle` view of ``slot`` (must be allowed)."""
        view = self.view
        if view is None:
            raise RuntimeError("call settle() first")
        if not (0 <= row < view.mask.shape[1]) or not bool(view.mask[slot, row]):
            raise ValueError(f"slot {slot}: row {row} is not allowed")
        self.episode(slot).pick(int(view.handle[slot, row]))

    def _round_state(self) -> None:
        """Every slot's machine state (:meth:`PooledMachine.round_state`) into the vectors."""
        state = np.array(
            [
                ep.machine.round_state() if ep is not None else (0.0, 0, False, True, -1, 0.0, 0, 0)
                for ep in self.episodes
            ],
            dtype=np.float64,
        )
        self.now = state[:, 0]
        self.free = state[:, 1].astype(np.int64)
        self.backfill_phase = state[:, 2] > 0.0
        self.stopped = state[:, 3] > 0.0
        self.reserved = state[:, 4].astype(np.int64)
        self.shadow = state[:, 5]
        self.shadow_free = state[:, 6].astype(np.int64)
        self.reserved_tasks = state[:, 7].astype(np.int64)
        self.shadow_valid = self.backfill_phase & (self.reserved >= 0)

    def _masks(self) -> tuple[IntVec, IntVec, BoolVec, BoolVec]:
        """``(slot, handle, fits, mask)`` of every candidate of every slot (FCFS within a slot)."""
        self._round_state()
        env, h = np.nonzero(self.pending)
        tasks = self.tasks[env, h]
        fits = tasks <= self.free[env]
        head = ~self.stopped[env] & ~self.backfill_phase[env]
        in_backfill = ~self.stopped[env] & self.backfill_phase[env]
        if not in_backfill.any():
            return env, h, fits, head
        candidates = fits & in_backfill & (h != self.reserved[env])
        # rule (b) of every candidate at once, by the pooled model's own test
        holds = holds_nodes(self.shadow_free[env], self.reserved_tasks[env], tasks)
        ends = self.now[env] + self.walltime[env, h]
        allowed = backfill_mask(candidates, ends, self.shadow[env], holds)
        return env, h, fits, head | allowed

    def settle(self) -> BatchView:
        """Close the rounds without an allowed candidate, then encode every slot's step."""
        while True:
            env, h, fits, mask = self._masks()
            allowed = np.bincount(env[mask], minlength=self.size)
            closed = False
            for b in np.flatnonzero(allowed == 0).tolist():
                ep = self.episodes[b]
                if ep is not None and not ep.finished:
                    ep.finished = not ep.next_round()
                    closed = True
            if not closed:
                break
        self.view = self._encode(env, h, fits, mask, allowed)
        return self.view

    def _encode(
        self, env: IntVec, h: IntVec, fits: BoolVec, mask: BoolVec, allowed: IntVec
    ) -> BatchView:
        n, size = self.max_candidates, self.size
        counts = np.bincount(env, minlength=size)
        offsets = np.cumsum(counts) - counts
        position = np.arange(env.shape[0], dtype=np.int64) - offsets[env]
        keep: BoolVec | None = None
        row = position
        for b in np.flatnonzero(counts > n).tolist():  # the encoder's window
            if keep is None:
                keep = np.ones(env.shape[0], dtype=np.bool_)
                row = position.copy()
            lo, hi = int(offsets[b]), int(offsets[b] + counts[b])
            hb = h[lo:hi]
            chosen = window_rows(
                mask[lo:hi], self.walltime[b, hb], self.submit[b, hb], self.tasks[b, hb], n
            )
            part = np.zeros(hi - lo, dtype=np.bool_)
            part[chosen] = True
            keep[lo:hi] = part
            row[lo:hi][np.asarray(chosen, dtype=np.int64)] = np.arange(len(chosen))
        queue_slot, queue_mask = env, mask
        if keep is not None:
            env, h, fits, mask = env[keep], h[keep], fits[keep], mask[keep]
            position, row = position[keep], row[keep]
        ppn = self.ppn[env]
        free_cpu = self.free.astype(np.float64) * self.ppn
        capacity = self.capacity
        fraction = free_fractions(free_cpu[:, None], capacity[:, None])
        has_res = self.shadow_valid[env]
        obs = np.zeros((size, n, NUM_FEATURES), dtype=np.float32)
        obs[env, row] = features(
            demand=(self.tasks[env, h].astype(np.float64) * ppn)[:, None],
            capacity=capacity[env][:, None],
            free=free_cpu[env][:, None],
            submit=self.submit[env, h],
            walltime=self.walltime[env, h],
            priority=np.zeros(env.shape[0], dtype=np.float64),
            fits=fits,
            is_reserved=h == self.reserved[env],
            now=self.now[env],
            has_reservation=has_res,
            reservation_start=self.shadow[env],
            backfill_phase=self.backfill_phase[env].astype(np.float64),
            queue_length=np.asarray([queue_feature(c) for c in counts.tolist()])[env],
            free_fraction=fraction[env],
        )
        out_mask = np.zeros((size, n), dtype=np.bool_)
        out_mask[env, row] = mask
        index = np.full((size, n), -1, dtype=np.int64)
        index[env, row] = position
        handle = np.full((size, n), -1, dtype=np.int64)
        handle[env, row] = h
        return BatchView(obs, out_mask, index, handle, counts, allowed, queue_slot, queue_mask)


def _start_range(trace: SwfTrace, sequence_length: int, batch_slice: int) -> tuple[int, int]:
    upper = trace.n_jobs if batch_slice == 0 else min(batch_slice, trace.n_jobs)
    if upper - sequence_length - 1 <= sequence_length:
        raise ValueError(
            f"{upper} jobs are too few for sequences of {sequence_length} "
            "(starts are drawn from [length, jobs - length - 1), as RLScheduler)"
        )
    return sequence_length, upper - sequence_length - 1


def _observation_space(max_candidates: int) -> spaces.Dict:
    return spaces.Dict(
        {
            "obs": spaces.Box(0.0, 1.0, (max_candidates, NUM_FEATURES), dtype=np.float32),
            "action_mask": spaces.Box(0, 1, (max_candidates,), dtype=np.int8),
        }
    )


def _final_reward(ep: _Episode, kind: RewardKind) -> tuple[float, float]:
    """``(reward, avg bsld)`` of a finished episode."""
    bsld = ep.avg_bsld()
    if kind == "bsld":
        return -bsld, bsld
    return ep.utilization(), bsld


class SchedulingEnv(gym.Env[Observation, np.int64]):
    """One episode (see the module docstring); ``truncated`` after ``max_steps`` steps."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(
        self,
        trace: SwfTrace,
        *,
        sequence_length: int = 256,
        backfill: Backfill = Backfill.EASY,
        max_candidates: int = DEFAULT_MAX_CANDIDATES,
        reward: RewardKind = "bsld",
        batch_slice: int = 0,
        max_steps: int | None = None,
    ) -> None:
        if max_candidates < 1:
            raise ValueError("max_candidates must be >= 1")
        self.trace = trace
        self.sequence_length = sequence_length
        self.backfill = backfill
        self.max_candidates = max_candidates
        self.reward_kind: RewardKind = reward
        self.max_steps = max_steps
        self._start_range = _start_range(trace, sequence_length, batch_slice)
        self._jobs = TraceJobs.from_trace(trace)
        self._batch = EpisodeBatch(
            1, sequence_length, backfill=backfill, max_candidates=max_candidates
        )
        self.observation_space = _observation_space(max_candidates)
        self.action_space = spaces.Discrete(max_candidates)
        self._live = False
        self._steps = 0
        self.sequence_start = -1

    def _observe(self) -> tuple[Observation, dict[str, Any]]:
        view = self._batch.settle()
        ep = self._batch.episode(0)
        mask = view.mask[0].astype(np.int8)
        obs: Observation = {"obs": view.obs[0], "action_mask": mask}
        info: dict[str, Any] = {
            "action_mask": mask.copy(),
            "candidate_index": view.index[0].copy(),
            "phase": ep.machine.phase.value,
            "now": ep.machine.now,
            "candidates": int(view.candidates[0]),
        }
        return obs, info

    def _terminal_obs(self) -> Observation:
        n = self.max_candidates
        return {
            "obs": np.zeros((n, NUM_FEATURES), dtype=np.float32),
            "action_mask": np.zeros(n, dtype=np.int8),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        if options is not None and "start" in options:
            start = int(options["start"])
        else:
            start = int(self.np_random.integers(*self._start_range))
        self.sequence_start = start
        ep = self._batch.load(0, self._jobs, start)
        if ep.finished:  # pragma: no cover - a sequence always has a first decision
            raise RuntimeError("the sequence has no decision point")
        self._live = True
        self._steps = 0
        obs, info = self._observe()
        info["sequence_start"] = start
        return obs, info

    def step(self, action: int | np.int64) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        view = self._batch.view
        if not self._live or view is None:
            raise RuntimeError("call reset() before step(), and again after the episode ended")
        row = int(action)
        mask = view.mask[0]
        invalid = not (0 <= row < mask.shape[0]) or not bool(mask[row])
        if invalid:
            row = int(np.flatnonzero(mask)[0])
        self._batch.pick(0, row)
        self._steps += 1
        obs, info = self._observe()
        ep = self._batch.episode(0)
        if ep.finished:
            self._live = False
            reward, _ = _final_reward(ep, self.reward_kind)
            done_info: dict[str, Any] = {"invalid_action": invalid, "steps": self._steps}
            return self._terminal_obs(), reward, True, False, done_info
        info["invalid_action"] = invalid
        truncated = self.max_steps is not None and self._steps >= self.max_steps
        if truncated:
            self._live = False
        return obs, 0.0, False, truncated, info


class VectorSchedulingEnv:
    """``num_envs`` episodes stepped at once, with autoreset.

    ``reset(seed)`` -> ``(obs, infos)``; ``step(actions)`` -> ``(obs, rewards, terminated,
    truncated, infos)`` with ``obs = {"obs": float32[B, N, F], "action_mask": int8[B, N]}``,
    ``infos["action_mask"]`` (int8) and ``infos["candidate_index"]``.  Actions are rows; a masked
    row is replaced by the first allowed one and flagged in ``infos["invalid_action"]``.  When an
    episode ends its terminal reward is returned and the slot restarts at once on a new sequence
    (the returned observation is the new episode's first); ``infos["episode_bsld"]`` has the
    result.
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
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        self.trace = trace
        self.num_envs = num_envs
        self.sequence_length = sequence_length
        self.max_candidates = max_candidates
        self.reward_kind: RewardKind = reward
        self._start_range = _start_range(trace, sequence_length, batch_slice)
        self._jobs = TraceJobs.from_trace(trace)
        self._batch = EpisodeBatch(
            num_envs, sequence_length, backfill=backfill, max_candidates=max_candidates
        )
        self._rng = np.random.default_rng()
        self._loaded = False
        self.sequence_starts: list[int] = [-1] * num_envs

    def _new_episode(self, b: int, start: int | None = None) -> None:
        if start is None:
            start = int(self._rng.integers(*self._start_range))
        self._batch.load(b, self._jobs, start)
        self.sequence_starts[b] = start

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None or not self._loaded:
            self._rng = np.random.default_rng(seed)
        starts = None if options is None else options.get("starts")
        for b in range(self.num_envs):
            self._new_episode(b, None if starts is None else int(starts[b]))
        self._loaded = True
        obs, infos = self._observe()
        infos["sequence_start"] = np.asarray(self.sequence_starts, dtype=np.int64)
        return obs, infos

    def _observe(self, view: BatchView | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if view is None:
            view = self._batch.settle()
        mask = view.mask.astype(np.int8)
        infos: dict[str, Any] = {
            "action_mask": mask.copy(),
            "candidate_index": view.index,
            "candidates": view.candidates,
        }
        return {"obs": view.obs, "action_mask": mask}, infos

    def step(
        self, actions: npt.ArrayLike
    ) -> tuple[dict[str, Any], FloatVec, BoolVec, BoolVec, dict[str, Any]]:
        batch = self._batch
        view = batch.view
        if view is None:
            raise RuntimeError("call reset() first")
        acts = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        n = view.mask.shape[1]
        rows = np.clip(acts, 0, n - 1)
        invalid = (acts != rows) | ~view.mask[np.arange(self.num_envs), rows]
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=np.bool_)
        episode_bsld = np.full(self.num_envs, np.nan)
        handles = view.handle
        for b in range(self.num_envs):
            row = int(rows[b])
            if invalid[b]:
                row = int(np.flatnonzero(view.mask[b])[0])
            batch.episode(b).pick(int(handles[b, row]))
        view = batch.settle()  # closes the rounds the picks ended
        for b in range(self.num_envs):
            ep = batch.episode(b)
            if ep.finished:
                rewards[b], episode_bsld[b] = _final_reward(ep, self.reward_kind)
                terminated[b] = True
                self._new_episode(b)
        obs, infos = self._observe(view if not terminated.any() else None)
        infos["invalid_action"] = invalid
        infos["episode_bsld"] = episode_bsld
        return obs, rewards, terminated, np.zeros(self.num_envs, dtype=np.bool_), infos
