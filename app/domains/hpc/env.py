"""Gymnasium environment over the kairos-semantics simulator (the service's decision code).

One episode = one job sequence of ``sequence_length`` jobs drawn from the trace with the
environment's own RNG (``reset(seed=...)``), replayed from an empty cluster.  Every step is one
step of a :class:`~app.domains.hpc.decision.DecisionRun`: the agent picks one of the visible
candidates of the current :class:`~app.domains.hpc.policy.StepView`; rounds in which nothing can
start are skipped.  The observation comes from the shared encoder
(:func:`app.domains.hpc.encoding.encode_view`), exactly what ``OnnxPolicy`` sees in the service.

* observation: ``{"obs": float32[N, F], "action_mask": int8[N]}`` (``N = max_candidates``,
  padding rows are zero and masked out); the mask is also in ``info["action_mask"]``;
* action: a row of ``obs`` (``Discrete(N)``); ``info["candidate_index"]`` maps rows to
  ``StepView.candidates`` indices (the window keeps FCFS order, so with at most ``N`` candidates
  the row *is* the candidate index).  A masked-out action is replaced by the first allowed row
  and reported in ``info["invalid_action"]`` (so random agents and ``check_env`` can run);
* reward: 0 at every step; on the terminal step ``-avg bounded slowdown`` (``reward="bsld"``) or
  ``+utilisation`` (``reward="utilization"``), as RLScheduler (A.6);
* ``terminated`` when every job of the sequence has started; ``truncated`` when ``max_steps``
  steps were taken first (the sequence is then unfinished: no terminal reward).

``pooled=True`` (default) models the machine as one node holding every cpu; decisions and
observations equal the per-node machine's for whole-node jobs (see :mod:`app.domains.hpc.simulate`)
and the
core's matrices stay 1 x 1.  :class:`sim.vecenv.VectorSchedulingEnv` is the fast batched twin.
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from app.domains.hpc.decision import DecisionConfig, DecisionRun
from app.domains.hpc.encoding import DEFAULT_MAX_CANDIDATES, NUM_FEATURES, EncodedView, encode_view
from app.domains.hpc.metrics import avg_bounded_slowdown, utilization_rlscheduler
from app.domains.hpc.simulate import KairosSimulator, workload_from_trace
from app.domains.hpc.swf import SwfTrace
from app.domains.hpc.types import Backfill, PolicyRef

#: ``{"obs": float32[N, F], "action_mask": int8[N]}``
Observation = dict[str, Any]
RewardKind = Literal["bsld", "utilization"]

#: the decisions an agent makes are attributed to this policy reference
AGENT_REF = PolicyRef("agent", "0", "env")


class SchedulingEnv(gym.Env[Observation, np.int64]):
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
        pooled: bool = True,
    ) -> None:
        if max_candidates < 1:
            raise ValueError("max_candidates must be >= 1")
        upper = trace.n_jobs if batch_slice == 0 else min(batch_slice, trace.n_jobs)
        if upper - sequence_length - 1 <= sequence_length:
            raise ValueError(
                f"{upper} jobs are too few for sequences of {sequence_length} "
                "(starts are drawn from [length, jobs - length - 1), as RLScheduler)"
            )
        self.trace = trace
        self.sequence_length = sequence_length
        self.config = DecisionConfig(backfill=backfill)
        self.max_candidates = max_candidates
        self.reward_kind: RewardKind = reward
        self.max_steps = max_steps
        self.pooled = pooled
        self._start_range = (sequence_length, upper - sequence_length - 1)
        self.observation_space = spaces.Dict(
            {
                "obs": spaces.Box(0.0, 1.0, (max_candidates, NUM_FEATURES), dtype=np.float32),
                "action_mask": spaces.Box(0, 1, (max_candidates,), dtype=np.int8),
            }
        )
        self.action_space = spaces.Discrete(max_candidates)
        self._sim: KairosSimulator | None = None
        self._run: DecisionRun | None = None
        self._encoded: EncodedView | None = None
        self._steps = 0
        self.sequence_start = -1

    # ------------------------------------------------------------------ helpers

    def _observe(self) -> tuple[Observation, dict[str, Any]]:
        run = self._run
        assert run is not None
        view = run.view()
        enc = encode_view(view, self.max_candidates, pad_to=self.max_candidates)
        self._encoded = enc
        mask = enc.mask.astype(np.int8)
        obs: Observation = {"obs": enc.obs, "action_mask": mask}
        info: dict[str, Any] = {
            "action_mask": mask.copy(),
            "candidate_index": enc.index.copy(),
            "phase": view.phase.value,
            "now": view.now,
            "candidates": len(view.candidates),
        }
        return obs, info

    def _terminal_obs(self) -> Observation:
        n = self.max_candidates
        return {
            "obs": np.zeros((n, NUM_FEATURES), dtype=np.float32),
            "action_mask": np.zeros(n, dtype=np.int8),
        }

    def _advance(self) -> bool:
        """Close finished rounds and move to the next pickable step; False at the episode end."""
        sim = self._sim
        assert sim is not None
        run = self._run
        while run is not None and run.done:
            sim.apply(run.result(AGENT_REF), run.state)
            run = sim.decision_run()
        self._run = run
        return run is not None

    def _final_reward(self) -> float:
        assert self._sim is not None
        res = self._sim.result()
        if self.reward_kind == "bsld":
            return -avg_bounded_slowdown(res)
        return utilization_rlscheduler(res)

    # ------------------------------------------------------------------ gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        if options is not None and "start" in options:
            start = int(options["start"])
        else:
            start = int(self.np_random.integers(*self._start_range))
        self.sequence_start = start
        workload = workload_from_trace(self.trace, start, self.sequence_length)
        self._sim = KairosSimulator(workload, config=self.config, pooled=self.pooled)
        self._run = self._sim.decision_run()
        self._steps = 0
        if self._run is None:  # pragma: no cover - a sequence always has a first decision
            raise RuntimeError("the sequence has no decision point")
        obs, info = self._observe()
        info["sequence_start"] = start
        return obs, info

    def step(self, action: int | np.int64) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        run, enc = self._run, self._encoded
        if run is None or enc is None:
            raise RuntimeError("call reset() before step(), and again after the episode ended")
        row = int(action)
        invalid = not (0 <= row < enc.mask.shape[0]) or not bool(enc.mask[row])
        if invalid:
            row = int(np.flatnonzero(enc.mask)[0])
        run.apply(enc.candidate(row))
        self._steps += 1
        if not self._advance():
            self._encoded = None
            info: dict[str, Any] = {"invalid_action": invalid, "steps": self._steps}
            return self._terminal_obs(), self._final_reward(), True, False, info
        obs, info = self._observe()
        info["invalid_action"] = invalid
        truncated = self.max_steps is not None and self._steps >= self.max_steps
        if truncated:
            self._run = None
            self._encoded = None
        return obs, 0.0, False, truncated, info
