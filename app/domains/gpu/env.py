"""A Gymnasium env over the GPU event simulator (``philly-rigid`` / ``kairos`` semantics).

One engine: the env advances the state of :mod:`app.domains.gpu.simulate` with its own step
functions (completions, then arrivals, then one decision; progress integrated exactly between
epochs) and every decision is :func:`app.domains.gpu.decide.decide` of a
:class:`~app.domains.gpu.learned.ScoredPolicy` whose scores are the action, so a run of the env
with a policy's scores as actions is that policy's simulation.

* **Observation**: ``{"obs": float32[window, NUM_FEATURES], "mask": bool[window]}``, the
  ``kairos-gpu-v1`` rows of :func:`app.domains.gpu.encoding.encode`, zero-padded past the
  candidates (mask false there).
* **Action**: ``float32[window]``, a score per row in [-1, 1] (higher admitted first; padding
  ignored; only the order matters).
* **Epochs**: the agent is asked only where a pending job could start (an unmasked pending
  row); every other epoch keeps the running jobs (any order of them admits them all) and is
  stepped through inside the same ``step``.
* **Reward**: ``-(jobs in the system) x (seconds to the next epoch) / reward_scale_s``, summed
  over the epochs a step covers; an episode's return is ``-sum(JCT) / reward_scale_s``.
* **Info**: ``held`` (GPUs each row holds, 0 pending), ``demand`` (GPUs it needs to start),
  ``capacity`` (GPUs the walk may hand out: the up GPUs less those of running jobs beyond the
  window), ``rows`` (candidate count), ``jobs`` (the rows' jobs); at the end ``jcts`` (every
  job's, workload order). The reward of the epochs before the first choice is ``reset``'s
  ``info["reward_before"]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from app.domains.gpu.decide import decide
from app.domains.gpu.encoding import (
    DEFAULT_WINDOW,
    NUM_FEATURES,
    BoolArray,
    EncodingConstants,
    FloatArray,
    encode,
)
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.simulate import (
    EventConfig,
    SimJob,
    _advance,
    _apply,
    _complete,
    _finish_time,
    _Live,
    _snapshot,
)
from app.domains.gpu.types import ClusterSnapshot

__all__ = ["GpuSchedulingEnv", "ScoredEnv", "WorkloadSource", "observe"]

#: features are >= 0 and unbounded above (sizes relative to a node, demand to the cluster)
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: draws an episode's workload from the env's generator
WorkloadSource = Callable[[np.random.Generator], Sequence[SimJob]]


def observe(
    snap: ClusterSnapshot | None, constants: EncodingConstants, window: int, now: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The observation of ``snap`` (None: the episode is over) and the ``info`` keys the
    trainers need: ``held``/``demand`` per row, ``capacity`` (the up GPUs less those of
    running jobs beyond the window), ``rows``, ``jobs``, ``now``."""
    obs = np.zeros((window, NUM_FEATURES), dtype=np.float32)
    mask = np.zeros(window, dtype=np.bool_)
    held = np.zeros(window, dtype=np.int64)
    demand = np.zeros(window, dtype=np.int64)
    info: dict[str, Any] = {"now": now}
    if snap is None:
        info.update(held=held, demand=demand, capacity=0, rows=0, jobs=())
        return {"obs": obs, "mask": mask}, info
    enc = encode(snap, constants, window)
    k = len(enc.jobs)
    obs[:k], mask[:k] = enc.obs, enc.mask
    for i, j in enumerate(enc.jobs):
        held[i] = j.gpus
        demand[i] = j.demand
    pinned = sum(j.gpus for j in enc.overflow if j.running)
    info.update(held=held, demand=demand, capacity=snap.total_gpus - pinned, rows=k, jobs=enc.jobs)
    return {"obs": obs, "mask": mask}, info


def jobs_of(options: dict[str, Any] | None) -> list[SimJob] | None:
    """The workload a ``reset`` was given (``options["jobs"]``), if any."""
    return list(options["jobs"]) if options and "jobs" in options else None


class ScoredEnv(gym.Env[dict[str, Any], FloatArray]):
    """What the GPU envs share: the spaces, and the ``ScoredPolicy`` whose scores are the
    action (``decide()`` walks them)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self, constants: EncodingConstants | None, window: int, reward_scale_s: float
    ) -> None:
        self.constants = constants or EncodingConstants()
        self.window = window
        self.reward_scale_s = reward_scale_s
        self.observation_space = spaces.Dict(
            {
                "obs": spaces.Box(0.0, FLOAT32_MAX, (window, NUM_FEATURES), np.float32),
                "mask": spaces.MultiBinary(window),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (window,), np.float32)
        self._scores: FloatArray = np.zeros(window, dtype=np.float32)
        self._policy = ScoredPolicy("gpu-env", "0", self._score, self.constants, window, kind="env")

    def _score(self, obs: FloatArray, mask: BoolArray) -> FloatArray:
        del mask
        return self._scores[: len(obs)]

    def _set_action(self, action: FloatArray) -> None:
        scores = np.asarray(action, dtype=np.float32).reshape(-1)
        if scores.shape != (self.window,):
            raise ValueError(f"action must have {self.window} scores, got {scores.shape}")
        self._scores = np.nan_to_num(scores, nan=-1e9, posinf=1e9, neginf=-1e9)


class GpuSchedulingEnv(ScoredEnv):
    def __init__(
        self,
        workloads: WorkloadSource,
        config: EventConfig,
        *,
        constants: EncodingConstants | None = None,
        window: int = DEFAULT_WINDOW,
        reward_scale_s: float = 3600.0,
    ) -> None:
        super().__init__(constants, window, reward_scale_s)
        self.workloads = workloads
        self.config = config
        self._jobs: list[SimJob] = []
        self._lives: list[_Live] = []
        self._order: list[int] = []
        self._next = 0
        self._active: list[_Live] = []
        self._now = 0.0
        self._snap: ClusterSnapshot | None = None

    # -- the engine ----------------------------------------------------------------------------

    def _arrive(self) -> None:
        self._active = _complete(self._active, self._now)
        order, jobs = self._order, self._jobs
        while self._next < len(order) and jobs[order[self._next]].arrival <= self._now:
            self._active.append(self._lives[order[self._next]])
            self._next += 1

    def _advance_to_next_epoch(self) -> None:
        """Move the clock to the next epoch (progress integrated), then completions and
        arrivals there."""
        cfg, now = self.config, self._now
        candidates = [_finish_time(lv, now) for lv in self._active]
        if self._next < len(self._order):
            candidates.append(self._jobs[self._order[self._next]].arrival)
        if self._active:
            candidates.append((math.floor(now / cfg.tick_s) + 1) * cfg.tick_s)
        t_next = max(min(candidates), now)
        for lv in self._active:
            _advance(lv, t_next - now)
        self._now = t_next
        self._arrive()

    def _done(self) -> bool:
        return self._next >= len(self._order) and not self._active

    def _needs_agent(self, snap: ClusterSnapshot) -> bool:
        total = snap.total_gpus
        return any(not j.running and j.demand <= total for j in snap.jobs)

    def _run_until_choice(self) -> float:
        """Step through epochs without a choice; the reward they earn."""
        reward = 0.0
        while not self._done():
            if self._active:
                snap = _snapshot(self._now, self.config, self._active)
                if self._needs_agent(snap):
                    self._snap = snap
                    return reward
                self._scores = np.zeros(self.window, dtype=np.float32)
                _apply(
                    decide(snap, self._policy, self.config.decide_config), self._active, self.config
                )
            reward += self._interval()
        self._snap = None
        return reward

    def _interval(self) -> float:
        n, before = len(self._active), self._now
        self._advance_to_next_epoch()
        return -n * (self._now - before) / self.reward_scale_s

    # -- gymnasium -----------------------------------------------------------------------------

    def _observe(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return observe(self._snap, self.constants, self.window, self._now)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        jobs = jobs_of(options)
        self._jobs = jobs if jobs is not None else list(self.workloads(self.np_random))
        for j in self._jobs:
            if j.duration_s is None or j.duration_s < 0:
                raise ValueError(f"job {j.id!r}: the env needs a duration >= 0")
        self._lives = [_Live(j) for j in self._jobs]
        self._order = sorted(
            range(len(self._jobs)), key=lambda i: (self._jobs[i].arrival, self._jobs[i].id)
        )
        self._next = 0
        self._active = []
        self._now = self._jobs[self._order[0]].arrival if self._jobs else 0.0
        self._arrive()
        reward = self._run_until_choice()
        obs, info = self._observe()
        info["reward_before"] = reward
        return obs, info

    def step(self, action: FloatArray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._snap is None:
            raise RuntimeError("step() after the episode ended: call reset()")
        self._set_action(action)
        d = decide(self._snap, self._policy, self.config.decide_config)
        _apply(d, self._active, self.config)
        reward = self._interval() + self._run_until_choice()
        done = self._done()
        obs, info = self._observe()
        if done:
            info["jcts"] = [
                (lv.done_at if lv.done_at is not None else math.nan) - lv.job.arrival
                for lv in self._lives
            ]
        return obs, reward, done, False, info
