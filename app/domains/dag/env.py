"""A Gymnasium environment over the DAG simulator (:class:`~app.domains.dag.simulate.Episode`),
observed through the ``dag-v1`` encoder of :func:`app.domains.dag.decima.encode`.

Defaults are spark-sched-sim's training configuration (spec 4.2, 7.6 V6): ``kairos`` semantics, 50
executors, 200 TPC-H jobs (the first at t = 0, then a Poisson stream of mean gap 25 s) and a time
limit drawn at each reset from Exponential(mean 20,000 s) (``time_limit_mean_s=None``: none).

* observation: the round's ``dag-v1`` arrays padded to ``max_jobs x max_stages`` (``x`` float32
  ``[J, S, 5]``, ``adj`` float32 ``[J, S, S]``, ``stage_mask``/``select_mask`` int8 ``[J, S]``,
  ``job_mask`` int8 ``[J]``, ``exec_mask`` int8 ``[J, N]``); ``info["obs"]`` is the unpadded
  :class:`~app.domains.dag.decima.DecimaObs` (the same values), which trainers batch themselves;
* action: ``(stage, k)`` (``MultiDiscrete([J * S, N])``): the padded stage ``j * S + s`` and
  ``k + 1`` executors, exactly what :class:`~app.domains.dag.decima.DecimaPolicy` answers.  A
  stage that is not selectable is replaced by the first selectable one (row-major) and ``k`` is
  clipped to the chosen job's allowed counts; ``info["invalid_action"]`` says so;
* only rounds with a choice are observed: a round with no selectable stage of a job with an
  allowed executor count (Decima hides the stages of a job without one) is answered ``None`` (the
  rest stays idle) by the env itself;
* reward: minus the job-time (seconds of jobs in the system, summed over jobs) accumulated from
  the observed decision to the next one, so an episode's return is minus the sum of JCTs up to its
  end (spark-sched-sim's reward in seconds); ``info["wall_time_s"]`` is the simulated time of the
  observation, for continuously discounted returns;
* ``terminated``: every job finished; ``truncated``: the time limit passed.

Invariants: the job sequence and the time limit depend only on the reset seed; ``select_mask``
implies ``stage_mask``; every observed round has at least one stage with ``select_mask`` whose
job has a non-empty ``exec_mask`` row.
"""

from __future__ import annotations

import math
from typing import Any, Final

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from app.domains.dag.decima import DecimaObs, choice_mask, encode
from app.domains.dag.policy import Action
from app.domains.dag.simulate import Episode, EpisodeResult, Semantics, SimConfig
from app.domains.dag.tpch import TpchLibrary

__all__ = ["DagSchedulingEnv", "Observation"]

#: the padded `dag-v1` arrays by name (see the module doc)
Observation = dict[str, Any]

#: spark-sched-sim's training configuration (spec 4.2)
TRAIN_EXECUTORS: Final = 50
TRAIN_JOBS: Final = 200
TRAIN_INTERVAL_S: Final = 25.0
TRAIN_TIME_LIMIT_MEAN_S: Final = 20_000.0


class DagSchedulingEnv(gym.Env[Observation, npt.NDArray[np.int64]]):
    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(
        self,
        lib: TpchLibrary,
        *,
        semantics: Semantics = "kairos",
        num_executors: int = TRAIN_EXECUTORS,
        num_jobs: int = TRAIN_JOBS,
        arrival_interval_s: float = TRAIN_INTERVAL_S,
        time_limit_mean_s: float | None = TRAIN_TIME_LIMIT_MEAN_S,
        max_jobs: int | None = None,
        max_stages: int | None = None,
    ) -> None:
        if num_executors < 1 or num_jobs < 1:
            raise ValueError("num_executors and num_jobs must be >= 1")
        if not (math.isfinite(arrival_interval_s) and arrival_interval_s >= 0):
            raise ValueError("arrival_interval_s must be finite and >= 0")
        if time_limit_mean_s is not None and not time_limit_mean_s > 0:
            raise ValueError("time_limit_mean_s must be > 0 (or None: no limit)")
        self.lib = lib
        self.cfg = SimConfig(semantics, num_executors)
        self.num_jobs = num_jobs
        self.interval_ms = arrival_interval_s * 1000.0
        self.time_limit_mean_s = time_limit_mean_s
        self.max_jobs = num_jobs if max_jobs is None else max_jobs
        self.max_stages = (
            max(len(d.stages) for d in lib.dags.values()) if max_stages is None else max_stages
        )
        j, s, n = self.max_jobs, self.max_stages, num_executors
        self._shapes: dict[str, tuple[tuple[int, ...], type[np.generic]]] = {
            "x": ((j, s, 5), np.float32),
            "adj": ((j, s, s), np.float32),
            "stage_mask": ((j, s), np.int8),
            "select_mask": ((j, s), np.int8),
            "job_mask": ((j,), np.int8),
            "exec_mask": ((j, n), np.int8),
        }
        self.observation_space = _observation_space(self._shapes)
        self.action_space = spaces.MultiDiscrete([j * s, n])
        self._episode: Episode | None = None
        self._obs: DecimaObs | None = None
        self._limit_ms = math.inf
        self._job_time_ms = 0.0

    # -- gymnasium API ---------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed, options=options)
        episode_seed = int(self.np_random.integers(2**31)) if seed is None else seed
        self._episode = Episode(
            self.lib,
            self.cfg,
            seed=episode_seed,
            num_init=1 if self.interval_ms > 0 else self.num_jobs,
            num_stream=self.num_jobs - 1 if self.interval_ms > 0 else 0,
            interval_ms=self.interval_ms,
        )
        if self.time_limit_mean_s is None:
            self._limit_ms = math.inf
        else:
            self._limit_ms = float(self.np_random.exponential(self.time_limit_mean_s)) * 1000.0
        self._job_time_ms = 0.0
        done = self._advance_to_choice()
        if done:
            raise RuntimeError("an episode without a single decision")  # no job at all
        return self._observation(), self._info(invalid=False)

    def step(
        self, action: npt.NDArray[np.int64]
    ) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        episode, obs = self._episode, self._obs
        if episode is None or obs is None:
            raise RuntimeError("call reset() before step()")
        flat, k = int(action[0]), int(action[1])
        j, s = divmod(flat, self.max_stages)
        invalid = not (
            0 <= j < obs.select_mask.shape[0]
            and 0 <= s < obs.select_mask.shape[1]
            and obs.select_mask[j, s]
            and obs.exec_mask[j].any()
        )
        if invalid:
            j, s = _first_choice(obs)
        row = np.flatnonzero(obs.exec_mask[j])
        cap = int(row.size)
        if not 0 <= k < cap:
            invalid = True
            k = min(max(k, 0), cap - 1)
        job_idx, stage_idx = obs.slots[j][s]
        done = episode.step(Action(job_idx, stage_idx, k + 1, cap))
        if not done:
            done = self._advance_to_choice()
        else:
            self._obs = None
        before = self._job_time_ms
        self._job_time_ms = episode.job_time_ms()
        reward = -(self._job_time_ms - before) / 1000.0
        truncated = not done and episode.now_ms >= self._limit_ms
        if done or truncated:
            return self._empty_observation(), reward, done, truncated, self._info(invalid)
        return self._observation(), reward, False, False, self._info(invalid)

    # -- helpers ---------------------------------------------------------------------------

    def _advance_to_choice(self) -> bool:
        """Answer ``None`` to rounds without a choice; true when the episode ended first."""
        episode = self._episode
        assert episode is not None
        while True:
            view = episode.view()
            obs = encode(view)
            if view.num_source > 0 and _has_choice(obs):
                self._obs = obs
                return False
            if episode.step(None):
                self._obs = None
                return True

    def _empty_observation(self) -> Observation:
        return {k: np.zeros(shape, dtype) for k, (shape, dtype) in self._shapes.items()}

    def _observation(self) -> Observation:
        obs = self._obs
        assert obs is not None
        num_j, num_s = obs.stage_mask.shape
        if num_j > self.max_jobs or num_s > self.max_stages:
            raise ValueError(
                f"{num_j} jobs x {num_s} stages exceed the env's padding "
                f"({self.max_jobs} x {self.max_stages})"
            )
        out = self._empty_observation()
        out["x"][:num_j, :num_s] = obs.x
        out["adj"][:num_j, :num_s, :num_s] = obs.adj
        out["stage_mask"][:num_j, :num_s] = obs.stage_mask
        out["select_mask"][:num_j, :num_s] = obs.select_mask
        out["job_mask"][:num_j] = obs.job_mask
        out["exec_mask"][:num_j] = obs.exec_mask
        return out

    def _info(self, invalid: bool) -> dict[str, Any]:
        episode = self._episode
        assert episode is not None
        return {
            "obs": self._obs,
            "wall_time_s": episode.now_ms / 1000.0,
            "job_time_s": self._job_time_ms / 1000.0,
            "invalid_action": invalid,
        }

    def episode_result(self) -> EpisodeResult:
        """The :class:`~app.domains.dag.simulate.EpisodeResult` of the current episode so far."""
        if self._episode is None:
            raise RuntimeError("call reset() first")
        return self._episode.result()


def _observation_space(
    shapes: dict[str, tuple[tuple[int, ...], type[np.generic]]],
) -> spaces.Dict:
    return spaces.Dict(
        {
            k: spaces.Box(-np.inf, np.inf, shape, dtype=dtype)
            if dtype is np.float32 and k == "x"
            else spaces.Box(0, 1, shape, dtype=dtype)
            for k, (shape, dtype) in shapes.items()
        }
    )


def _has_choice(obs: DecimaObs) -> bool:
    return bool(choice_mask(obs).any())


def _first_choice(obs: DecimaObs) -> tuple[int, int]:
    j, s = np.argwhere(choice_mask(obs))[0]
    return int(j), int(s)
