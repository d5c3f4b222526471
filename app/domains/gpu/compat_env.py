"""A Gymnasium env over the ``pollux-compat`` fixed-step cluster.

One engine: the env advances :class:`app.domains.gpu.compat.PolluxCluster` (16 x 4 GPUs,
60-s grid, 30-s restart, the measured throughput tables) with its own ``advance`` and
``apply``, and every decision is :class:`app.domains.gpu.simulate.DecideCompat` (``decide()``
on the step's snapshot) of a :class:`~app.domains.gpu.learned.ScoredPolicy` whose scores are
the action. A run of the env with a policy's scores as actions is that policy's
``simulate_pollux`` run, step for step.

The contract is :class:`app.domains.gpu.env.GpuSchedulingEnv`'s:

* **Observation**: ``{"obs": float32[window, NUM_FEATURES], "mask": bool[window]}``.
* **Action**: ``float32[window]``, a score per row (higher admitted first; only the order
  matters).
* **Epochs**: the grid's steps; the agent is asked only at a step where an unmasked pending row
  exists. Every other step keeps the running jobs (any order admits them all) and is stepped
  through inside the same ``step``.
* **Reward**: ``-(active jobs) x interval / reward_scale_s`` of each step, from the step of a
  decision up to the next decision; an episode's return is ``-sum(JCT) / reward_scale_s`` up to
  the grid's rounding, less the steps before the first decision (``info["reward_before"]``).
* **Info**: as the event env's (``held``, ``demand``, ``capacity``, ``rows``, ``jobs``,
  ``now``); at the end ``jcts`` (every job's, workload order).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from app.domains.gpu.compat import CompatJob, PolluxCluster
from app.domains.gpu.decide import decide
from app.domains.gpu.encoding import (
    DEFAULT_WINDOW,
    EncodingConstants,
    FloatArray,
)
from app.domains.gpu.env import ScoredEnv, WorkloadSource, jobs_of, observe
from app.domains.gpu.pollux import Application
from app.domains.gpu.simulate import DecideCompat, compat_config, compat_jobs
from app.domains.gpu.types import ClusterSnapshot

__all__ = ["GpuCompatEnv"]


class GpuCompatEnv(ScoredEnv):
    def __init__(
        self,
        workloads: WorkloadSource,
        apps: Mapping[str, Application],
        *,
        nodes: int = 16,
        gpus_per_node: int = 4,
        interval: int = 60,
        restart_s: int = 30,
        constants: EncodingConstants | None = None,
        window: int = DEFAULT_WINDOW,
        reward_scale_s: float = 3600.0,
    ) -> None:
        super().__init__(constants, window, reward_scale_s)
        self.workloads = workloads
        self.apps = apps
        self.nodes, self.gpus_per_node = nodes, gpus_per_node
        self.interval, self.restart_s = interval, restart_s
        self._decider: DecideCompat | None = None
        self._cluster: PolluxCluster | None = None
        self._active: list[CompatJob] = []
        self._snap: ClusterSnapshot | None = None
        #: the observation of ``_snap`` (encoded once, where the choice was found)
        self._seen: tuple[dict[str, Any], dict[str, Any]] | None = None

    def _decide(self) -> float:
        """Decide the current step with ``_scores``; the step's reward."""
        cluster, decider, snap = self._cluster, self._decider, self._snap
        assert cluster is not None
        assert decider is not None
        assert snap is not None
        d = decide(snap, self._policy, decider.config)
        cluster.apply(self._active, decider.allocations(d, self._active, cluster.allocations))
        return -len(self._active) * cluster.interval / self.reward_scale_s

    def _run_until_choice(self) -> float:
        """Step the grid until a step offers a choice (its snapshot kept in ``_snap``) or the
        workload is done; the reward of the steps decided on the way."""
        cluster, decider = self._cluster, self._decider
        assert cluster is not None
        assert decider is not None
        reward = 0.0
        while not cluster.done():
            self._active = cluster.advance()
            if not self._active:
                continue
            self._snap = decider.snapshot(cluster.now, self._active, dict(cluster.allocations))
            obs, info = observe(self._snap, self.constants, self.window, cluster.now)
            if bool((obs["mask"] & (info["held"] == 0)).any()):
                self._seen = obs, info
                return reward
            self._scores = np.zeros(self.window, dtype=np.float32)
            reward += self._decide()
        self._snap = None
        return reward

    def _observe(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The observation; once the workload is done, ``info["jcts"]`` too."""
        cluster = self._cluster
        assert cluster is not None
        if self._snap is not None and self._seen is not None:
            return self._seen
        obs, info = observe(None, self.constants, self.window, float(cluster.now))
        if self._snap is None:
            info["jcts"] = [float((j.completion_time or 0) - j.arrival) for j in cluster.jobs]
        return obs, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        given = jobs_of(options)
        rows = given if given is not None else list(self.workloads(self.np_random))
        jobs = compat_jobs(rows, self.apps)
        self._decider = DecideCompat(
            self._policy, compat_config(rows, jobs), self.nodes, self.gpus_per_node
        )
        self._cluster = PolluxCluster(
            jobs,
            self._decider,
            nodes=self.nodes,
            gpus_per_node=self.gpus_per_node,
            interval=self.interval,
            restart_s=self.restart_s,
        )
        self._snap, self._seen = None, None
        reward = self._run_until_choice()
        obs, info = self._observe()
        info["reward_before"] = reward
        return obs, info

    def step(self, action: FloatArray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._snap is None or self._cluster is None:
            raise RuntimeError("step() after the episode ended: call reset()")
        self._set_action(action)
        reward = self._decide() + self._run_until_choice()
        obs, info = self._observe()
        return obs, reward, self._snap is None, False, info
