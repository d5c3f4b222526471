"""PPO for the HPC "kernel" scheduling policy, in the single-file style of cleanrl.

The policy is RLScheduler's kernel network (A.8 of the HPC reproduction spec) on Kairos's feature
encoder (``app/domains/hpc/encoding.py``): one small MLP scores every visible candidate row,
masked rows get ``MASKED_LOGIT``, and a softmax over the rows is the action distribution.  The
value network embeds every real row with its own MLP and pools them (masked mean and max)
before a dense head.

Training runs on ``training/hpc_env.py``, the training interface over the domain's engine env
(``app/domains/hpc/env.py``: the EASY rules of ``easy.py`` on the pooled count model, the
encoder), with EASY backfilling by default, so the policy picks both the head job and the
backfill jobs, exactly as the service will ask it to (ADR 0032).  Differences from
RLScheduler, each recorded in ADR 0066:

* the reward is the per-job bounded slowdown paid when each job starts, ``-bsld_j / L``: its sum
  over an episode is RLScheduler's terminal reward ``-avg bsld`` (gamma = 1), only delivered
  earlier;
* an optional behaviour-cloning warm start imitates a heuristic teacher (SJF by default) before PPO
  so that a short run starts from a sane policy;
* training sequences never overlap the evaluation windows of the paper's protocol (seed 1,
  10 x 1024 jobs), see :func:`training_starts`;
* the kept checkpoint is the best on validation sequences drawn from the training ranges, never on
  the evaluation windows.

Run ``python -m training.ppo --help`` for the arguments; ``kairos train`` wraps it.
Metric names (stable): ``charts/*``, ``losses/*``, ``eval/*`` (cleanrl).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
import tyro
from torch import nn

from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION, NUM_FEATURES
from sim.progress import Progress
from training.hpc_env import HpcEpisode, JobTable, run_sequence

#: logit given to masked rows (also used by the ONNX export)
MASKED_LOGIT = -1.0e9
#: heuristics the ``best`` warm-start teacher chooses from
BEST_OF = ("sjf", "f1", "wfp3", "unicep")


@dataclass
class Args:
    exp_name: str = "hpc-kernel"
    """name of this experiment (the run folder is ``<run_dir>/<exp_name>__s<seed>__<time>``)"""
    seed: int = 0
    """seed of python, numpy, torch and of the training-sequence sampler"""
    torch_deterministic: bool = True
    """``torch.use_deterministic_algorithms``"""
    threads: int = 1
    """torch intra-op threads"""

    # data and environment
    trace: tuple[str, ...] = ("data/lublin_256.swf.gz", "data/lublin_256_new2.swf.gz")
    """SWF trace(s) to train on; episodes are drawn uniformly over all allowed starts"""
    episode_length: int = 256
    """jobs per training episode (RLScheduler: 256)"""
    backfill: Literal["easy", "none"] = "easy"
    """backfilling during training (the service's default is EASY)"""
    max_candidates: int = 128
    """visible queue rows (the encoder's window)"""
    eval_seed: int = 1
    """seed of the evaluation protocol whose windows are excluded from training"""
    eval_sequences: int = 10
    """number of evaluation windows excluded from training"""
    eval_length: int = 1024
    """length of each evaluation window"""
    eval_slices: tuple[int, ...] = (0, 10_000)
    """the windows are drawn over the first K jobs of each trace for each K here (0: all jobs);
    both the whole-trace protocol and RLScheduler's ``batch_job_slice = 10000`` are excluded"""
    train_fraction: float = 1.0
    """use only the first fraction of each trace (by job index) for training starts"""

    # budget
    total_timesteps: int = 2_000_000
    """environment steps (decisions) of PPO"""
    time_budget_s: float = 0.0
    """stop PPO after this many wall-clock seconds (0: no limit)"""

    # behaviour-cloning warm start
    bc_teacher: str = "f1"
    """heuristic imitated before PPO: ``fcfs``, ``sjf``, ``f1``, ``wfp3``, ``unicep``; ``best``
    imitates, on each teacher episode, whichever of sjf/f1/wfp3/unicep does best on that
    sequence; ``none`` starts from random weights"""
    bc_episodes: int = 64
    """teacher episodes collected for the warm start"""
    bc_epochs: int = 20
    """passes over the collected teacher decisions"""
    bc_lr: float = 3e-3
    """Adam learning rate of the warm start"""

    # PPO
    num_envs: int = 32
    """environments stepped in lock-step (one batched forward per step)"""
    num_steps: int = 256
    """steps per environment per rollout"""
    learning_rate: float = 3e-4
    """Adam learning rate"""
    anneal_lr: bool = False
    """linearly anneal the learning rate to 0"""
    gamma: float = 1.0
    """discount (RLScheduler: 1)"""
    gae_lambda: float = 0.9
    """GAE lambda (RLScheduler: 0.97; 0.9 cuts the advantages' variance, ADR 0066)"""
    num_minibatches: int = 4
    """minibatches per update epoch"""
    update_epochs: int = 4
    """update epochs per rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """PPO clip (RLScheduler: 0.2)"""
    ent_coef: float = 0.01
    """entropy bonus (keeps the warm-started actor exploring, ADR 0066)"""
    vf_coef: float = 0.5
    """value-loss weight"""
    max_grad_norm: float = 0.5
    """gradient clipping"""
    target_kl: float = 0.03
    """stop the update epochs when the approximate KL exceeds this (RLScheduler: 1.5 x 0.01)"""
    reward_scale: float = 0.01
    """multiplies the per-step reward (bsld magnitudes are 1..1000s)"""
    value_warmup_updates: int = 3
    """first updates train only the critic, so a warm-started actor is not moved by a
    meaningless value baseline"""
    init_checkpoint: str | None = None
    """start from this checkpoint's weights (skips the warm start)"""
    init_temperature: float = 2.0
    """divide the warm-started actor's logits by this before PPO: imitation leaves a nearly
    deterministic policy that explores too little; greedy decisions are unchanged"""

    # architecture
    actor_hidden: tuple[int, ...] = (32, 16, 8)
    """hidden sizes of the per-row kernel scorer (RLScheduler: 32, 16, 8)"""
    critic_hidden: tuple[int, ...] = (32, 32)
    """hidden sizes of the per-row critic embedding"""
    value_hidden: tuple[int, ...] = (64, 32)
    """hidden sizes of the value head over the pooled embedding"""

    # validation, checkpoints, outputs
    val_sequences: int = 8
    """validation sequences (from the training ranges) for checkpoint selection"""
    val_length: int = 1024
    """jobs per validation sequence"""
    val_every: int = 6
    """validate every this many PPO updates"""
    run_dir: str = "runs"
    """where run folders go"""
    checkpoint_every_s: float = 120.0
    """write ``last.pt`` at least this often"""
    progress: bool = False
    """show a progress bar on stderr when it is a terminal (never in CI or a pipe)"""

    # filled in at run time
    batch_size: int = field(default=0, init=False)
    minibatch_size: int = field(default=0, init=False)


# ----------------------------------------------------------------------------------------------
# network
# ----------------------------------------------------------------------------------------------


def mlp(sizes: Sequence[int], *, last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for k, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        linear = nn.Linear(fan_in, fan_out)
        nn.init.orthogonal_(linear.weight, math.sqrt(2.0))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if k < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def last_linear(net: nn.Sequential) -> nn.Linear:
    layer = net[-1]
    assert isinstance(layer, nn.Linear)
    return layer


class Agent(nn.Module):
    """Kernel actor (shared per-row scorer) and pooled critic."""

    def __init__(
        self,
        n_features: int,
        actor_hidden: Sequence[int] = (32, 16, 8),
        critic_hidden: Sequence[int] = (32, 32),
        value_hidden: Sequence[int] = (64, 32),
    ) -> None:
        super().__init__()
        self.n_features = n_features
        self.arch = {
            "n_features": n_features,
            "actor_hidden": list(actor_hidden),
            "critic_hidden": list(critic_hidden),
            "value_hidden": list(value_hidden),
        }
        self.actor = mlp([n_features, *actor_hidden, 1], last_activation=False)
        nn.init.orthogonal_(last_linear(self.actor).weight, 0.01)
        self.critic_embed = mlp([n_features, *critic_hidden], last_activation=True)
        self.critic_head = mlp([2 * critic_hidden[-1], *value_hidden, 1], last_activation=False)
        nn.init.orthogonal_(last_linear(self.critic_head).weight, 1.0)

    def logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``obs[B, N, F]``, ``mask[B, N]`` -> ``logits[B, N]`` (masked rows: MASKED_LOGIT)."""
        scores: torch.Tensor = self.actor(obs).squeeze(-1)
        return torch.where(mask, scores, torch.full_like(scores, MASKED_LOGIT))

    def value(self, obs: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``obs[B, N, F]``, ``valid[B, N]`` (real, non-padding rows) -> ``value[B]``."""
        emb = self.critic_embed(obs)  # [B, N, H] (>= 0 after ReLU)
        w = valid.unsqueeze(-1).to(emb.dtype)
        mean = (emb * w).sum(1) / w.sum(1).clamp(min=1.0)
        peak = (emb * w).amax(1)
        value: torch.Tensor = self.critic_head(torch.cat([mean, peak], dim=-1)).squeeze(-1)
        return value

    def act(
        self,
        obs: torch.Tensor,
        mask: torch.Tensor,
        valid: torch.Tensor,
        action: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (or score) an action: ``(action, logprob, entropy, value)``."""
        dist = torch.distributions.Categorical(logits=self.logits(obs, mask))
        if action is None:
            action = dist.sample()  # type: ignore[no-untyped-call]
        logprob = dist.log_prob(action)  # type: ignore[no-untyped-call]
        entropy = dist.entropy()  # type: ignore[no-untyped-call]
        return action, logprob, entropy, self.value(obs, valid)


def save_checkpoint(path: Path, agent: Agent, meta: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"arch": agent.arch, "state_dict": agent.state_dict(), "meta": meta}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> tuple[Agent, dict[str, Any]]:
    blob = torch.load(path, map_location="cpu", weights_only=True)
    arch = blob["arch"]
    agent = Agent(
        arch["n_features"], arch["actor_hidden"], arch["critic_hidden"], arch["value_hidden"]
    )
    agent.load_state_dict(blob["state_dict"])
    agent.eval()
    return agent, dict(blob["meta"])


# ----------------------------------------------------------------------------------------------
# training sequences: disjoint from the evaluation windows
# ----------------------------------------------------------------------------------------------


def evaluation_windows(n_jobs: int, seed: int, sequences: int, length: int) -> list[int]:
    """Start indices of the paper's evaluation protocol (A.3: gym legacy seeding, one randint per
    sequence in ``[length, n_jobs - length - 1)``); for seed 1, 10 x 1024 on 10,000 jobs this is
    ``[1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085]``."""
    import hashlib
    import struct

    digest = hashlib.sha512(str(seed).encode()).digest()
    words = list(struct.unpack("<2I", digest[:8]))
    rng = np.random.RandomState(words)  # the legacy generator is the protocol
    return [int(rng.randint(length, n_jobs - length - 1)) for _ in range(sequences)]


def training_starts(
    n_jobs: int,
    episode_length: int,
    excluded: Sequence[tuple[int, int]],
    train_fraction: float = 1.0,
) -> npt.NDArray[np.int64]:
    """Every start ``s`` with ``[s, s + episode_length)`` inside the first ``train_fraction`` of
    the trace and disjoint from each excluded half-open range ``[a, b)``."""
    limit = math.floor(n_jobs * train_fraction)
    ok = np.ones(max(0, limit - episode_length + 1), dtype=np.bool_)
    for a, b in excluded:
        lo = max(0, a - episode_length + 1)
        hi = min(len(ok), b)
        if lo < hi:
            ok[lo:hi] = False
    return np.flatnonzero(ok).astype(np.int64)


def merge_ranges(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def complement(ranges: Sequence[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    cursor = 0
    for a, b in merge_ranges(ranges):
        if a > cursor:
            out.append((cursor, a))
        cursor = max(cursor, b)
    if cursor < n:
        out.append((cursor, n))
    return out


# ----------------------------------------------------------------------------------------------
# batched environments
# ----------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """Observations of E environments padded to N rows."""

    obs: npt.NDArray[np.float32]  # [E, N, F]
    mask: npt.NDArray[np.bool_]  # [E, N] pickable rows
    valid: npt.NDArray[np.bool_]  # [E, N] real (non-padding) rows


def used_width(valid: torch.Tensor) -> int:
    """Rows up to the last real row in any item (the rest is padding everywhere)."""
    cols = torch.nonzero(valid.any(dim=0))
    return int(cols.max()) + 1 if cols.numel() else 1


def to_tensors(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.from_numpy(batch.obs),
        torch.from_numpy(batch.mask),
        torch.from_numpy(batch.valid),
    )


@torch.no_grad()
def greedy_actions(agent: Agent, batch: Batch) -> npt.NDArray[np.int64]:
    obs, mask, _ = to_tensors(batch)
    return agent.logits(obs, mask).argmax(dim=1).numpy().astype(np.int64)


@dataclass
class TrainingData:
    """The traces and the episode starts that training may use."""

    paths: list[str]
    tables: list[JobTable]
    excluded: list[list[tuple[int, int]]]
    starts: list[npt.NDArray[np.int64]]
    train_fraction: float

    @classmethod
    def load(cls, args: Args) -> TrainingData:
        tables, excluded, starts = [], [], []
        for path in args.trace:
            table = JobTable.from_swf(path)
            windows = {
                w
                for k in args.eval_slices
                for w in evaluation_windows(
                    min(k, table.n_jobs) if k > 0 else table.n_jobs,
                    args.eval_seed,
                    args.eval_sequences,
                    args.eval_length,
                )
            }
            ranges = merge_ranges([(w, w + args.eval_length) for w in windows])
            tables.append(table)
            excluded.append(ranges)
            starts.append(
                training_starts(table.n_jobs, args.episode_length, ranges, args.train_fraction)
            )
        if sum(len(s) for s in starts) == 0:
            raise ValueError("no training start is disjoint from the evaluation windows")
        return cls(list(args.trace), tables, excluded, starts, args.train_fraction)

    def sample(self, rng: np.random.Generator) -> tuple[int, int]:
        """A uniformly random ``(trace index, start)`` over all allowed starts."""
        sizes = np.array([len(s) for s in self.starts], dtype=np.float64)
        k = int(rng.choice(len(self.starts), p=sizes / sizes.sum()))
        return k, int(self.starts[k][int(rng.integers(len(self.starts[k])))])

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for path, table, ranges, starts in zip(
            self.paths, self.tables, self.excluded, self.starts, strict=True
        ):
            limit = math.floor(table.n_jobs * self.train_fraction)
            out.append(
                {
                    "trace": path,
                    "jobs": table.n_jobs,
                    "excluded_job_ranges": [list(r) for r in ranges],
                    "training_job_ranges": [list(r) for r in complement(ranges, limit)],
                    "episode_starts": len(starts),
                }
            )
        return out


class VecEnv:
    """``n`` episodes stepped in lock-step; a finished episode restarts on a new sequence."""

    def __init__(self, args: Args, data: TrainingData, rng: np.random.Generator, n: int) -> None:
        self.args, self.data, self.rng, self.n = args, data, rng, n
        self.sequences: list[tuple[int, int]] = []
        self.episodes: list[HpcEpisode] = []
        for _ in range(n):
            ep, seq = self._new_episode()
            self.episodes.append(ep)
            self.sequences.append(seq)
        self._best_teacher: dict[tuple[int, int], str] = {}
        self.index = np.full((n, args.max_candidates), -1, dtype=np.int64)
        self.steps = np.zeros(n, dtype=np.int64)

    def _new_episode(self) -> tuple[HpcEpisode, tuple[int, int]]:
        while True:
            k, start = self.data.sample(self.rng)
            ep = HpcEpisode(
                self.data.tables[k],
                backfill=self.args.backfill == "easy",
                max_candidates=self.args.max_candidates,
            )
            ep.reset(start, self.args.episode_length)
            if not ep.done:  # an all-forced sequence holds no decision
                return ep, (k, start)

    def _observe(self) -> Batch:
        n_rows = self.args.max_candidates
        obs = np.zeros((self.n, n_rows, NUM_FEATURES), dtype=np.float32)
        mask = np.zeros((self.n, n_rows), dtype=np.bool_)
        for i, ep in enumerate(self.episodes):
            o = ep.observe(pad_to=n_rows)
            obs[i], mask[i], self.index[i] = o.obs, o.mask, o.index
        return Batch(obs, mask, self.index >= 0)

    def reset(self) -> Batch:
        return self._observe()

    def step(
        self, actions: npt.NDArray[np.int64]
    ) -> tuple[Batch, npt.NDArray[np.float32], npt.NDArray[np.bool_], list[dict[str, float]]]:
        rewards = np.zeros(self.n, dtype=np.float32)
        dones = np.zeros(self.n, dtype=np.bool_)
        finished: list[dict[str, float]] = []
        for i, ep in enumerate(self.episodes):
            pos = int(self.index[i, int(actions[i])])
            if pos < 0:
                raise ValueError(f"env {i}: action {actions[i]} is a padding row")
            rewards[i] = ep.step_queue(pos)
            self.steps[i] += 1
            if ep.done:
                dones[i] = True
                finished.append({"bsld": ep.avg_bsld(), "steps": float(self.steps[i])})
                self.episodes[i], self.sequences[i] = self._new_episode()
                self.steps[i] = 0
        return self._observe(), rewards, dones, finished

    def teacher_actions(self, heuristic: str) -> npt.NDArray[np.int64]:
        """Row of the heuristic's pick in each env (among the visible rows)."""
        out = np.zeros(self.n, dtype=np.int64)
        for i, ep in enumerate(self.episodes):
            rows = self.index[i]
            name = self.best_teacher(i) if heuristic == "best" else heuristic
            pos = ep.teacher_pos(name, visible=rows[rows >= 0])
            out[i] = int(np.flatnonzero(rows == pos)[0])
        return out

    def best_teacher(self, i: int) -> str:
        """The heuristic with the lowest avg bsld on env ``i``'s current sequence."""
        key = self.sequences[i]
        if key not in self._best_teacher:
            k, start = key
            scores = {
                name: run_sequence(
                    self.data.tables[k],
                    start,
                    self.args.episode_length,
                    functools.partial(HpcEpisode.teacher_pos, heuristic=name),
                    backfill=self.args.backfill == "easy",
                ).avg_bsld()
                for name in BEST_OF
            }
            self._best_teacher[key] = min(scores, key=lambda name: (scores[name], name))
        return self._best_teacher[key]


class Validation:
    """Greedy evaluation on fixed sequences from the training ranges (checkpoint selection only;
    the evaluation windows are never used here)."""

    def __init__(self, args: Args, data: TrainingData) -> None:
        self.args = args
        self.sequences: list[tuple[int, int]] = []
        pool = [
            (k, int(s))
            for k, table in enumerate(data.tables)
            for s in training_starts(
                table.n_jobs, args.val_length, data.excluded[k], data.train_fraction
            )
        ]
        if args.val_sequences > 0 and pool:
            picks = np.linspace(0, len(pool) - 1, args.val_sequences).round().astype(int)
            self.sequences = [pool[i] for i in picks]
        self.data = data
        self.baselines = {
            name: self._run(
                lambda ep, rows, name=name: ep.teacher_pos(name, visible=rows)  # type: ignore[misc]
            )
            for name in ("sjf", "f1")
        }

    def describe(self) -> dict[str, Any]:
        return {
            "sequences": [
                {"trace": self.data.paths[k], "start": s, "length": self.args.val_length}
                for k, s in self.sequences
            ],
            "baselines_bsld": self.baselines,
        }

    def _episodes(self) -> list[HpcEpisode]:
        eps = []
        for k, start in self.sequences:
            ep = HpcEpisode(
                self.data.tables[k],
                backfill=self.args.backfill == "easy",
                max_candidates=self.args.max_candidates,
            )
            ep.reset(start, self.args.val_length)
            eps.append(ep)
        return eps

    def _run(self, pick: Callable[[HpcEpisode, npt.NDArray[np.int64]], int]) -> float:
        if not self.sequences:
            return float("nan")
        values = []
        for ep in self._episodes():
            while not ep.done:
                o = ep.observe()
                ep.step_queue(pick(ep, o.index))
            values.append(ep.avg_bsld())
        return float(np.mean(values))

    @torch.no_grad()
    def run(self, agent: Agent) -> float:
        """Mean avg bsld of the greedy policy (all sequences batched per step)."""
        if not self.sequences:
            return float("nan")
        eps = self._episodes()
        n_rows = self.args.max_candidates
        while not all(ep.done for ep in eps):
            live = [ep for ep in eps if not ep.done]
            obs = [ep.observe(pad_to=n_rows) for ep in live]
            logits = agent.logits(
                torch.from_numpy(np.stack([o.obs for o in obs])),
                torch.from_numpy(np.stack([o.mask for o in obs])),
            )
            rows = logits.argmax(dim=1).tolist()
            for ep, o, row in zip(live, obs, rows, strict=True):
                ep.step_queue(int(o.index[row]))
        return float(np.mean([ep.avg_bsld() for ep in eps]))


# ----------------------------------------------------------------------------------------------
# behaviour cloning warm start and PPO
# ----------------------------------------------------------------------------------------------


def behaviour_cloning(
    args: Args, agent: Agent, envs: VecEnv, log: Callable[[str, float, int], None]
) -> dict[str, float]:
    """Imitate ``args.bc_teacher`` on the training sequences (cross-entropy on the teacher's pick).

    Teacher episodes are rolled out with the teacher's own actions; the actor is then fitted to
    them for ``bc_epochs`` passes.  The critic is left to PPO.
    """
    obs_l: list[npt.NDArray[np.float32]] = []
    mask_l: list[npt.NDArray[np.bool_]] = []
    act_l: list[npt.NDArray[np.int64]] = []
    batch = envs.reset()
    episodes = 0
    while episodes < args.bc_episodes:
        actions = envs.teacher_actions(args.bc_teacher)
        obs_l.append(batch.obs)
        mask_l.append(batch.mask)
        act_l.append(actions)
        batch, _, dones, _ = envs.step(actions)
        episodes += int(dones.sum())
    # rows beyond the widest window are padding everywhere: trim to save memory and time
    obs = torch.from_numpy(np.concatenate(obs_l))
    mask = torch.from_numpy(np.concatenate(mask_l))
    acts = torch.from_numpy(np.concatenate(act_l))
    # decisions with a single pickable row carry no information
    informative = mask.sum(1) > 1
    obs, mask, acts = obs[informative], mask[informative], acts[informative]
    optimizer = torch.optim.Adam(agent.actor.parameters(), lr=args.bc_lr)
    n = obs.shape[0]
    gen = torch.Generator().manual_seed(args.seed)
    accuracy = 0.0
    for epoch in range(args.bc_epochs):
        perm = torch.randperm(n, generator=gen)
        total, correct = 0.0, 0
        for lo in range(0, n, 512):
            idx = perm[lo : lo + 512]
            logits = agent.logits(obs[idx], mask[idx])
            loss = nn.functional.cross_entropy(logits, acts[idx])
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += loss.item() * len(idx)
            correct += int((logits.argmax(1) == acts[idx]).sum())
        accuracy = correct / max(1, n)
        log("losses/bc_loss", total / max(1, n), epoch)
        log("charts/bc_accuracy", accuracy, epoch)
    return {"bc_decisions": float(n), "bc_accuracy": accuracy}


def ppo_update(
    args: Args,
    agent: Agent,
    optimizer: torch.optim.Optimizer,
    b: dict[str, torch.Tensor],
    gen: torch.Generator,
    *,
    critic_only: bool = False,
) -> dict[str, float]:
    """cleanrl's PPO update over one flattened rollout ``b`` (``critic_only``: value loss only)."""
    clipfracs: list[float] = []
    stats: dict[str, float] = {}
    for _epoch in range(args.update_epochs):
        perm = torch.randperm(args.batch_size, generator=gen)
        approx_kl = torch.tensor(0.0)
        for lo in range(0, args.batch_size, args.minibatch_size):
            mb = perm[lo : lo + args.minibatch_size]
            width = used_width(b["valid"][mb])
            _, newlogprob, entropy, newvalue = agent.act(
                b["obs"][mb, :width],
                b["mask"][mb, :width],
                b["valid"][mb, :width],
                b["actions"][mb],
            )
            logratio = newlogprob - b["logprobs"][mb]
            ratio = logratio.exp()
            with torch.no_grad():
                old_approx_kl = (-logratio).mean()
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfracs.append(float(((ratio - 1.0).abs() > args.clip_coef).float().mean()))
            adv = b["advantages"][mb]
            if args.norm_adv:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = torch.max(
                -adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
            ).mean()
            v_loss = 0.5 * ((newvalue - b["returns"][mb]) ** 2).mean()
            entropy_loss = entropy.mean()
            loss = v_loss * args.vf_coef
            if not critic_only:
                loss = loss + pg_loss - args.ent_coef * entropy_loss
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            stats = {
                "losses/policy_loss": pg_loss.item(),
                "losses/value_loss": v_loss.item(),
                "losses/entropy": entropy_loss.item(),
                "losses/old_approx_kl": old_approx_kl.item(),
                "losses/approx_kl": approx_kl.item(),
            }
        if not critic_only and args.target_kl > 0 and approx_kl.item() > args.target_kl:
            break
    y_pred, y_true = b["values"].numpy(), b["returns"].numpy()
    var_y = float(np.var(y_true))
    stats["losses/clipfrac"] = float(np.mean(clipfracs)) if clipfracs else 0.0
    stats["losses/explained_variance"] = (
        float("nan") if var_y == 0 else 1.0 - float(np.var(y_true - y_pred)) / var_y
    )
    return stats


def train(args: Args) -> Path:  # noqa: C901 - cleanrl's loop, kept in one piece on purpose
    """Train; returns the run folder (``best.pt``, ``last.pt``, ``metrics.jsonl``,
    ``summary.json``)."""
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = max(1, args.batch_size // args.num_minibatches)
    run_path = Path(args.run_dir) / f"{args.exp_name}__s{args.seed}__{int(time.time())}"
    run_path.mkdir(parents=True, exist_ok=True)
    (run_path / "args.json").write_text(json.dumps(asdict(args), indent=2) + "\n")
    metrics_file = (run_path / "metrics.jsonl").open("a", buffering=1)
    wall_start = time.time()

    def log(name: str, value: float, step: int) -> None:
        record = {"name": name, "value": value, "step": step, "time_s": time.time() - wall_start}
        metrics_file.write(json.dumps(record) + "\n")

    # seeding: the only sources of randomness are these four
    random.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(args.torch_deterministic)
    torch.set_num_threads(args.threads)
    torch_gen = torch.Generator().manual_seed(args.seed)

    data = TrainingData.load(args)
    envs = VecEnv(args, data, rng, args.num_envs)
    validation = Validation(args, data)
    agent = Agent(NUM_FEATURES, args.actor_hidden, args.critic_hidden, args.value_hidden)
    print(f"training starts: {data.describe()}")
    print(f"validation baselines (avg bsld): {validation.baselines}")

    summary: dict[str, Any] = {"validation_baselines": validation.baselines}
    init_meta: dict[str, Any] | None = None
    if args.init_checkpoint is not None:
        initial, init_blob = load_checkpoint(Path(args.init_checkpoint))
        init_meta = {"checkpoint": args.init_checkpoint, **init_blob.get("training", {})}
        agent.load_state_dict(initial.state_dict())
        agent.train()
        print(f"initialised from {args.init_checkpoint}")
    elif args.bc_teacher != "none":
        summary["bc"] = behaviour_cloning(args, agent, envs, log)
        print(f"warm start: imitated {args.bc_teacher}: {summary['bc']}")
    if args.init_temperature != 1.0:
        with torch.no_grad():
            last_linear(agent.actor).weight.div_(args.init_temperature)
            last_linear(agent.actor).bias.div_(args.init_temperature)
    best_bsld = validation.run(agent)
    log("eval/val_bsld", best_bsld, 0)
    print(f"validation after warm start: {best_bsld:.2f}")

    if args.init_checkpoint is not None:
        algorithm = f"PPO (cleanrl style) continued from {args.init_checkpoint}"
    elif args.bc_teacher != "none":
        algorithm = f"PPO (cleanrl style) after behaviour cloning of {args.bc_teacher}"
    else:
        algorithm = "PPO (cleanrl style) from random weights"

    def meta(global_step: int, val_bsld: float) -> dict[str, Any]:
        training: dict[str, Any] = {
            "algorithm": algorithm,
            "environment": "training/hpc_env.py (kairos semantics, "
            + ("EASY backfilling" if args.backfill == "easy" else "no backfilling")
            + f", {args.episode_length}-job episodes from an empty cluster)",
            "feature_schema_version": FEATURE_SCHEMA_VERSION,
            "traces": data.describe(),
            "data_split": (
                "training episodes never overlap the evaluation windows of the paper's protocol "
                f"(seed {args.eval_seed}, {args.eval_sequences} x {args.eval_length} jobs, drawn "
                f"over the first K jobs for K in {list(args.eval_slices)}, 0 = whole trace): "
                "only starts whose whole episode lies in training_job_ranges are sampled; "
                "checkpoints are selected on validation sequences from the same ranges"
            ),
            "seed": args.seed,
            "global_step": global_step,
            "training_time_s": round(time.time() - wall_start, 1),
            "validation_bsld": val_bsld,
            "validation": validation.describe(),
            "hyperparameters": asdict(args),
        }
        if init_meta is not None:
            training["initialised_from"] = init_meta
        return {"training": training}

    save_checkpoint(run_path / "best.pt", agent, meta(0, best_bsld))

    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    shape = (args.num_steps, args.num_envs)
    n_rows, n_feat = args.max_candidates, NUM_FEATURES
    obs_buf = torch.zeros((*shape, n_rows, n_feat))
    mask_buf = torch.zeros((*shape, n_rows), dtype=torch.bool)
    valid_buf = torch.zeros((*shape, n_rows), dtype=torch.bool)
    actions = torch.zeros(shape, dtype=torch.int64)
    logprobs = torch.zeros(shape)
    rewards = torch.zeros(shape)
    dones = torch.zeros(shape)
    values = torch.zeros(shape)

    global_step = 0
    num_updates = max(1, args.total_timesteps // args.batch_size)
    batch = envs.reset()
    next_done = torch.zeros(args.num_envs)
    last_checkpoint = time.time()
    ppo_start = time.time()
    bar = Progress(num_updates, "ppo", "update", enabled=None if args.progress else False)
    update = 0
    while update < num_updates:
        if args.time_budget_s > 0 and time.time() - ppo_start > args.time_budget_s:
            bar.write(f"time budget of {args.time_budget_s:.0f} s reached after {update} updates")
            break
        update += 1
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (
                1.0 - (update - 1) / num_updates
            )

        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_t, mask_t, valid_t = to_tensors(batch)
            obs_buf[step], mask_buf[step], valid_buf[step] = obs_t, mask_t, valid_t
            dones[step] = next_done
            width = used_width(valid_t)
            with torch.no_grad():
                action, logprob, _, value = agent.act(
                    obs_t[:, :width], mask_t[:, :width], valid_t[:, :width]
                )
            values[step], actions[step], logprobs[step] = value, action, logprob
            batch, reward, done, finished = envs.step(action.numpy())
            rewards[step] = torch.from_numpy(reward * args.reward_scale)
            next_done = torch.from_numpy(done.astype(np.float32))
            for episode in finished:
                log("charts/episodic_return", -episode["bsld"], global_step)
                log("charts/episode_bsld", episode["bsld"], global_step)
                log("charts/episode_length", episode["steps"], global_step)

        with torch.no_grad():  # GAE (gamma = 1, lambda = 0.97 by default)
            next_value = agent.value(torch.from_numpy(batch.obs), torch.from_numpy(batch.valid))
            advantages = torch.zeros_like(rewards)
            lastgaelam = torch.zeros(args.num_envs)
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                advantages[t] = lastgaelam
            returns = advantages + values

        flat = {
            "obs": obs_buf.reshape(-1, n_rows, n_feat),
            "mask": mask_buf.reshape(-1, n_rows),
            "valid": valid_buf.reshape(-1, n_rows),
            "actions": actions.reshape(-1),
            "logprobs": logprobs.reshape(-1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
            "values": values.reshape(-1),
        }
        critic_only = update <= args.value_warmup_updates
        stats = ppo_update(args, agent, optimizer, flat, torch_gen, critic_only=critic_only)
        for name, stat in stats.items():
            log(name, stat, global_step)
        sps = global_step / max(1e-9, time.time() - ppo_start)
        log("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        log("charts/SPS", sps, global_step)
        bar.update(1, postfix=f"sps {sps:.0f} best {best_bsld:.1f}")

        if update % args.val_every == 0 or update == num_updates:
            val_bsld = validation.run(agent)
            log("eval/val_bsld", val_bsld, global_step)
            bar.write(
                f"update {update}/{num_updates} step {global_step} sps {sps:.0f} "
                f"val bsld {val_bsld:.2f} (best {best_bsld:.2f}) "
                f"kl {stats.get('losses/approx_kl', 0):.4f} ev "
                f"{stats['losses/explained_variance']:.2f}"
            )
            if val_bsld < best_bsld:
                best_bsld = val_bsld
                save_checkpoint(run_path / "best.pt", agent, meta(global_step, val_bsld))
        if time.time() - last_checkpoint > args.checkpoint_every_s:
            save_checkpoint(run_path / "last.pt", agent, meta(global_step, float("nan")))
            last_checkpoint = time.time()

    bar.close()
    save_checkpoint(run_path / "last.pt", agent, meta(global_step, float("nan")))
    summary.update(
        {
            "global_step": global_step,
            "updates": update,
            "training_time_s": round(time.time() - wall_start, 1),
            "best_validation_bsld": best_bsld,
        }
    )
    (run_path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    metrics_file.close()
    print(f"done: {summary}")
    return run_path


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Args, args=list(sys.argv[1:] if argv is None else argv))
    train(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
