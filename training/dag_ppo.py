"""PPO for the DAG domain: the Decima-architecture network (spec 4.2) on the domain's Gymnasium env
(:class:`app.domains.dag.env.DagSchedulingEnv`, features ``dag-v1``), exported to ONNX with
:func:`training.dag_export.build_onnx` and shipped as ``<out>/policy.onnx`` + ``card.json``.

The recipe is spark-sched-sim's (spec 4.2, 7.3), at its training configuration (50 executors,
200 TPC-H jobs, Poisson 25 s, Exp(20,000 s) time limit):

* an iteration rolls out ``--sequences`` job sequences x ``--rollouts`` rollouts each (the same
  reset seed, different action draws), actions sampled from the network's softmaxes;
* returns are continuously discounted (``--beta`` per second of simulated time) sums of the env's
  reward (minus the job-seconds accumulated until the next decision); the baseline of a decision
  at time t is the mean over the sequence's rollouts of their returns at t (linear
  interpolation), the input-dependent baseline of Decima (no value network);
* PPO: clipped ratio (``--clip``), ``--epochs`` passes of ``--minibatches`` minibatches, each
  advantage normalised per minibatch, entropy bonus, Adam, gradient-norm clip, early stop of an
  iteration when the approximate KL passes 1.5 x ``--target-kl``;
* decisions without a choice (one selectable stage and one allowed executor count) carry no
  gradient and are left out of the update (their rewards still count in the returns);
* ``--init`` warm-starts from a state dict in ``.npz`` form (default: spark-sched-sim's shipped
  Decima weights); every ``--val-every`` iterations the network is run, in the decoding mode the
  card will name, on ``--val-seeds`` through :func:`app.domains.dag.simulate.run_episode` (the
  evaluator's decision path) and the checkpoint with the lowest mean ratio of average JCT to Fair
  on those seeds is exported (the warm start, iteration 0, included).

Seeds: training sequence ``i`` of iteration ``t`` is ``--train-seed-base + t * sequences + i``;
validation and evaluation seeds must lie outside that range (the card records both).

    nice -n 10 python -m training.dag_ppo --iterations 40 --time-budget-s 2100 --workers 2 \
        --out models/dag-v1/1
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, cast

import numpy as np
import numpy.typing as npt
import onnx
import torch
from torch import nn

from app.domains.dag.decima import (
    _MLPS,
    MASKED_LOGIT,
    DecimaObs,
    DecimaPolicy,
    DecimaWeights,
    choice_mask,
    decima_forward,
)
from app.domains.dag.domain import FEATURE_SCHEMA_VERSION
from app.domains.dag.env import (
    TRAIN_EXECUTORS,
    TRAIN_INTERVAL_S,
    TRAIN_JOBS,
    TRAIN_TIME_LIMIT_MEAN_S,
    DagSchedulingEnv,
)
from app.domains.dag.heuristics import get_heuristic
from app.domains.dag.simulate import Semantics, SimConfig, run_episode
from app.domains.dag.tpch import TpchLibrary
from sim.dag_data import DEFAULT_DECIMA, DEFAULT_TPCH, load_tpch
from training.dag_export import DEFAULT_K, OPSET, build_onnx
from training.paths import repo_relative

__all__ = ["DecimaNet", "Sample", "main", "rollout", "train"]

F32 = npt.NDArray[np.float32]
_LEAK: Final = 0.2


# -- the network in torch (parameter names = the shipped state dict's) -------------------------


def _mlp(sizes: Sequence[int], act: Literal["leaky", "tanh"]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.LeakyReLU(_LEAK) if act == "leaky" else nn.Tanh())
    return nn.Sequential(*layers)


class DecimaNet(nn.Module):
    """The dense network of :func:`app.domains.dag.decima.decima_forward`, batched over a
    leading axis (padded observations); ``state_dict()`` names are the shipped model's."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]) -> None:
        super().__init__()

        def sizes(mlp: str) -> list[int]:
            prefix = _MLPS[mlp]
            return [shapes[f"{prefix}.0.weight"][1]] + [
                shapes[f"{prefix}.{i}.weight"][0] for i in (0, 2, 4)
            ]

        modules: dict[str, nn.Sequential] = {
            key: _mlp(sizes(key), "tanh" if key in ("stage", "exec") else "leaky") for key in _MLPS
        }
        self.encoder = nn.Module()
        self.encoder.node_encoder = nn.Module()
        self.encoder.node_encoder.mlp_prep = modules["prep"]
        self.encoder.node_encoder.mlp_msg = modules["msg"]
        self.encoder.node_encoder.mlp_update = modules["update"]
        self.encoder.dag_encoder = nn.Module()
        self.encoder.dag_encoder.mlp = modules["dag"]
        self.encoder.global_encoder = nn.Module()
        self.encoder.global_encoder.mlp = modules["glob"]
        self.stage_policy_network = nn.Module()
        self.stage_policy_network.mlp_score = modules["stage"]
        self.exec_policy_network = nn.Module()
        self.exec_policy_network.mlp_score = modules["exec"]
        self.mlps = modules

    def forward(
        self, batch: dict[str, torch.Tensor], iterations: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's active stages flattened into one node list (see :func:`collate`):
        (stage_logits [B, M] over each sample's nodes in order, masked outside ``choice``;
        exec_logits [B, E] of each sample's chosen job, masked outside ``exec_row``)."""
        m = self.mlps
        x = batch["x"]
        parent, child = batch["edges"][:, 0], batch["edges"][:, 1]
        level = batch["node_height"]
        h_init = m["prep"](x)
        h = torch.where((level == 0).unsqueeze(-1), m["update"](h_init), torch.zeros_like(h_init))
        # by height: a node of height L depends only on nodes of smaller height (the recursive
        # definition, equal to the dense synchronous iterations of the ONNX graph)
        for height in range(1, iterations + 1):
            nodes = torch.nonzero(level == height).squeeze(-1)
            if nodes.numel() == 0:
                continue
            on = level[parent] == height
            local = torch.full((x.shape[0],), -1, dtype=torch.long)
            local[nodes] = torch.arange(nodes.numel())
            agg = torch.zeros(nodes.numel(), h.shape[1]).index_add(
                0, local[parent[on]], m["msg"](h[child[on]])
            )
            h = h.index_put((nodes,), h_init[nodes] + m["update"](agg))
        node_sample = batch["node_sample"]
        h = torch.where(batch["any_edge"][node_sample].unsqueeze(-1), h, h_init)
        num_jobs, num_b = batch["job_sample"].shape[0], batch["exec_row"].shape[0]
        d = m["dag"](torch.cat([x, h], -1))
        h_dag = torch.zeros(num_jobs, d.shape[1]).index_add(0, batch["node_job"], d)
        g = m["glob"](h_dag)
        h_glob = torch.zeros(num_b, g.shape[1]).index_add(0, batch["job_sample"], g)
        node_job = batch["node_job"]
        stage_in = torch.cat([x, h, h_dag[node_job], h_glob[node_sample]], -1)
        scores = m["stage"](stage_in).squeeze(-1)
        stage_logits = torch.full((num_b, int(batch["width"])), MASKED_LOGIT)
        stage_logits[node_sample, batch["node_pos"]] = torch.where(
            batch["choice"], scores, torch.full_like(scores, MASKED_LOGIT)
        )
        chosen = batch["chosen_node"]
        job_in = torch.cat([x[chosen, :3], h_dag[node_job[chosen]]], -1)  # [B, 19]
        e = batch["exec_row"].shape[1]
        levels = (torch.arange(e, dtype=torch.float32) / e).view(1, e, 1).expand(num_b, -1, -1)
        exec_in = torch.cat(
            [
                job_in.unsqueeze(1).expand(-1, e, -1),
                h_glob.unsqueeze(1).expand(-1, e, -1),
                levels,
            ],
            -1,
        )
        escores = m["exec"](exec_in).squeeze(-1)
        exec_logits = torch.where(
            batch["exec_row"], escores, torch.full_like(escores, MASKED_LOGIT)
        )
        return stage_logits, exec_logits

    def numpy_weights(self) -> dict[str, F32]:
        return {
            k: v.detach().cpu().numpy().astype(np.float32) for k, v in self.state_dict().items()
        }


# -- rollouts (numpy, worker processes) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """One decision with a choice: its observation's active stages as a node list (row-major
    over the padded ``[J, S]`` slots) and what was done."""

    x: F32  # [n, 5]
    node_job: npt.NDArray[np.int16]  # [n] job row of each node
    edges: npt.NDArray[np.int16]  # [m, 2] (parent node, child node)
    choice: npt.NDArray[np.bool_]  # [n]
    num_jobs: int
    exec_row: npt.NDArray[np.bool_]  # [E] allowed counts of the chosen job
    node_height: npt.NDArray[np.int8]  # [n] edges on the longest path to a leaf
    height: int
    node: int  # the chosen stage's node
    k: int
    logp: float
    step: int  # position in the trajectory

    @classmethod
    def of(cls, obs: DecimaObs, flat: int, k: int, logp: float, step: int) -> Sample:
        active = obs.stage_mask.reshape(-1)
        index = np.full(active.size, -1, np.int64)
        index[active] = np.arange(int(active.sum()))
        num_s = obs.stage_mask.shape[1]
        jv, pv, cv = np.nonzero(obs.adj)
        edges = np.stack([index[jv * num_s + pv], index[jv * num_s + cv]], 1)
        j = flat // num_s
        nonleaf = obs.adj.sum(-1) > 0
        hgt = np.zeros(obs.stage_mask.shape, np.int64)
        for _ in range(obs.height):
            hgt = np.where(nonleaf, 1 + (obs.adj * hgt[:, None, :]).max(-1), 0).astype(np.int64)
        return cls(
            x=obs.x.reshape(-1, 5)[active].copy(),
            node_job=(np.flatnonzero(active) // num_s).astype(np.int16),
            edges=edges.astype(np.int16).reshape(-1, 2),
            choice=choice_mask(obs).reshape(-1)[active].copy(),
            num_jobs=int(obs.job_mask.shape[0]),
            exec_row=obs.exec_mask[j].copy(),
            node_height=hgt.reshape(-1)[active].astype(np.int8),
            height=obs.height,
            node=int(index[flat]),
            k=k,
            logp=logp,
            step=step,
        )


@dataclass(frozen=True, slots=True)
class Trajectory:
    seed: int
    samples: list[Sample]
    times_s: F32  # per decision (all decisions, with or without a choice)
    rewards: F32
    avg_jct_s: float


@dataclass(frozen=True, slots=True)
class EnvConfig:
    semantics: Semantics
    executors: int
    jobs: int
    interval_s: float
    time_limit_mean_s: float | None


def _log_softmax(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    z = z - z.max()
    out: npt.NDArray[np.float64] = z - math.log(float(np.exp(z).sum()))
    return out


def _sample(z: npt.NDArray[np.float64], rng: np.random.Generator) -> tuple[int, float]:
    lp = _log_softmax(z)
    i = int(np.searchsorted(np.cumsum(np.exp(lp)), rng.random(), side="right"))
    i = min(i, lp.size - 1)
    return i, float(lp[i])


@functools.cache
def _tpch() -> TpchLibrary:
    """The TPC-H library, parsed once per process (episodes never mutate it)."""
    return load_tpch(DEFAULT_TPCH)


def rollout(args: tuple[dict[str, F32], EnvConfig, int, int]) -> Trajectory:
    """One episode of the sampled policy with weights ``w`` on reset seed ``seed``."""
    arrays, cfg, seed, action_seed = args
    w = DecimaWeights(arrays)
    env = DagSchedulingEnv(
        _tpch(),
        semantics=cfg.semantics,
        num_executors=cfg.executors,
        num_jobs=cfg.jobs,
        arrival_interval_s=cfg.interval_s,
        time_limit_mean_s=cfg.time_limit_mean_s,
    )
    rng = np.random.default_rng(action_seed)
    _, info = env.reset(seed=seed)
    samples: list[Sample] = []
    times: list[float] = []
    rewards: list[float] = []
    done = truncated = False
    while not (done or truncated):
        obs = info["obs"]
        times.append(info["wall_time_s"])
        stage_logits, exec_logits = decima_forward(w, obs)
        allowed = choice_mask(obs)
        cand = np.flatnonzero(allowed.reshape(-1))
        c, lp_s = _sample(stage_logits.reshape(-1)[cand].astype(np.float64), rng)
        flat = int(cand[c])
        j, s = divmod(flat, allowed.shape[1])
        row = np.flatnonzero(obs.exec_mask[j])
        kk, lp_e = _sample(exec_logits[j, row].astype(np.float64), rng)
        k = int(row[kk])
        if cand.size > 1 or row.size > 1:
            samples.append(Sample.of(obs, flat, k, lp_s + lp_e, len(times) - 1))
        _, reward, done, truncated, info = env.step(np.array([j * env.max_stages + s, k]))
        rewards.append(reward)
    jct = env.episode_result().jct_ms
    return Trajectory(
        seed,
        samples,
        np.array(times, np.float32),
        np.array(rewards, np.float32),
        float(np.nanmean(jct)) / 1000.0 if np.isfinite(jct).any() else math.nan,
    )


def discounted_returns(times_s: F32, rewards: F32, beta: float) -> npt.NDArray[np.float64]:
    """G_t = r_t + exp(-beta (t_{t+1} - t_t)) G_{t+1} (continuous discounting in time)."""
    out = np.zeros(len(rewards), np.float64)
    acc = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        gap = float(times_s[i + 1] - times_s[i]) if i + 1 < len(rewards) else 0.0
        acc = float(rewards[i]) + math.exp(-beta * gap) * acc
        out[i] = acc
    return out


def advantages(group: Sequence[Trajectory], beta: float) -> list[npt.NDArray[np.float64]]:
    """Per trajectory: return minus the mean of the group's returns at the same time."""
    rets = [discounted_returns(t.times_s, t.rewards, beta) for t in group]
    out = []
    for t, g in zip(group, rets, strict=True):
        base = np.mean(
            [np.interp(t.times_s, o.times_s, r) for o, r in zip(group, rets, strict=True)], 0
        )
        out.append(g - base)
    return out


# -- the update --------------------------------------------------------------------------------


def collate(samples: Sequence[Sample]) -> tuple[dict[str, torch.Tensor], int]:
    """One node list for the batch (the forward pass of :meth:`DecimaNet.forward`) and the
    largest height among its samples (the message-passing iterations it needs)."""
    node_off = np.cumsum([0] + [s.x.shape[0] for s in samples])
    job_off = np.cumsum([0] + [s.num_jobs for s in samples])
    sizes = np.diff(node_off)
    batch = {
        "x": torch.from_numpy(np.concatenate([s.x for s in samples])),
        "edges": torch.from_numpy(
            np.concatenate(
                [s.edges.astype(np.int64) + node_off[i] for i, s in enumerate(samples)]
            ).reshape(-1, 2)
        ),
        "node_job": torch.from_numpy(
            np.concatenate(
                [s.node_job.astype(np.int64) + job_off[i] for i, s in enumerate(samples)]
            )
        ),
        "node_sample": torch.from_numpy(np.repeat(np.arange(len(samples)), sizes)),
        "node_pos": torch.from_numpy(np.arange(node_off[-1]) - np.repeat(node_off[:-1], sizes)),
        "job_sample": torch.from_numpy(
            np.repeat(np.arange(len(samples)), [s.num_jobs for s in samples])
        ),
        "any_edge": torch.tensor([s.edges.shape[0] > 0 for s in samples]),
        "choice": torch.from_numpy(np.concatenate([s.choice for s in samples])),
        "node_height": torch.from_numpy(
            np.concatenate([s.node_height for s in samples]).astype(np.int64)
        ),
        "exec_row": torch.from_numpy(np.stack([s.exec_row for s in samples])),
        "chosen_node": torch.tensor([s.node + node_off[i] for i, s in enumerate(samples)]),
        "node": torch.tensor([s.node for s in samples]),
        "width": torch.tensor(int(sizes.max())),
        "k": torch.tensor([s.k for s in samples]),
        "logp": torch.tensor([s.logp for s in samples], dtype=torch.float32),
    }
    return batch, max(s.height for s in samples)


def _dist_terms(
    net: DecimaNet, batch: dict[str, torch.Tensor], iterations: int
) -> tuple[torch.Tensor, torch.Tensor]:
    stage_logits, exec_logits = net(batch, iterations)
    ls = torch.log_softmax(stage_logits, -1)
    le = torch.log_softmax(exec_logits, -1)
    logp = ls.gather(1, batch["node"][:, None])[:, 0] + le.gather(1, batch["k"][:, None])[:, 0]
    pm_s = stage_logits > MASKED_LOGIT / 2
    pm_e = batch["exec_row"]
    ent = -(torch.where(pm_s, ls.exp() * ls, torch.zeros_like(ls))).sum(-1) - (
        torch.where(pm_e, le.exp() * le, torch.zeros_like(le))
    ).sum(-1)
    return logp, ent


def ppo_update(
    net: DecimaNet,
    opt: torch.optim.Optimizer,
    samples: list[Sample],
    adv: npt.NDArray[np.float64],
    args: argparse.Namespace,
    rng: np.random.Generator,
) -> dict[str, float]:
    stats = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clipfrac": 0.0, "minibatches": 0.0}
    if len(samples) > args.max_samples:
        keep = np.sort(rng.choice(len(samples), args.max_samples, replace=False))
        samples, adv = [samples[i] for i in keep], adv[keep]
    n = len(samples)
    size = max(1, math.ceil(n / args.minibatches))
    for _ in range(args.epochs):
        order = rng.permutation(n)
        stop = False
        for lo in range(0, n, size):
            idx = order[lo : lo + size]
            batch, height = collate([samples[i] for i in idx])
            a = torch.from_numpy(adv[idx]).float()
            a = (a - a.mean()) / (a.std() + 1e-8) if a.numel() > 1 else a * 0
            logp, ent = _dist_terms(net, batch, height)
            ratio = torch.exp(logp - batch["logp"])
            clipped = torch.clamp(ratio, 1 - args.clip, 1 + args.clip)
            loss = -torch.min(ratio * a, clipped * a).mean() - args.entropy * ent.mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), args.grad_clip)
            opt.step()
            with torch.no_grad():
                kl = float(((ratio - 1) - torch.log(ratio)).mean())
            stats["loss"] += loss.item()
            stats["kl"] += kl
            stats["entropy"] += ent.mean().item()
            stats["clipfrac"] += float(((ratio - 1).abs() > args.clip).float().mean())
            stats["minibatches"] += 1
            if kl > 1.5 * args.target_kl:
                stop = True
                break
        if stop:
            break
    m = max(stats["minibatches"], 1.0)
    return {k: (v / m if k != "minibatches" else v) for k, v in stats.items()}


# -- validation --------------------------------------------------------------------------------


def _val_episode(
    args: tuple[dict[str, F32] | None, EnvConfig, int, Literal["sample", "argmax"]],
) -> float:
    arrays, cfg, seed, mode = args
    policy = (
        get_heuristic("fair")
        if arrays is None
        else DecimaPolicy(DecimaWeights(arrays), mode=mode, seed=seed, name="dag-ppo")
    )
    res = run_episode(
        _tpch(),
        SimConfig(cfg.semantics, cfg.executors),
        policy,
        seed=seed,
        num_init=1,
        num_stream=cfg.jobs - 1,
        interval_ms=cfg.interval_s * 1000.0,
    )
    return float(np.nanmean(res.jct_ms)) / 1000.0


# -- the loop ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Best:
    iteration: int
    ratio: float
    weights: dict[str, F32]

    def offer(self, iteration: int, ratio: float, weights: dict[str, F32]) -> None:
        if ratio < self.ratio:
            self.iteration, self.ratio, self.weights = iteration, ratio, weights


def _collect(
    trajs: list[Trajectory], args: argparse.Namespace
) -> tuple[list[Sample], npt.NDArray[np.float64]]:
    """The update's samples and their advantages (baseline per job sequence)."""
    samples: list[Sample] = []
    parts: list[npt.NDArray[np.float64]] = []
    for i in range(args.sequences):
        group = trajs[i * args.rollouts : (i + 1) * args.rollouts]
        for t, a in zip(group, advantages(group, args.beta), strict=True):
            samples.extend(t.samples)
            parts.append(a[[s.step for s in t.samples]])
    return samples, np.concatenate(parts)


def _load_init(path: Path) -> dict[str, F32]:
    with np.load(path) as npz:
        return {k: npz[k].astype(np.float32) for k in npz.files}


def train(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    rng = np.random.default_rng(args.seed)
    init = _load_init(args.init)
    net = DecimaNet({k: tuple(v.shape) for k, v in init.items()})
    if not args.from_scratch:
        net.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    cfg = EnvConfig(args.semantics, args.executors, args.jobs, args.interval_s, args.time_limit)
    val_cfg = EnvConfig(args.semantics, args.executors, args.jobs, args.interval_s, None)
    val_seeds = list(args.val_seeds)
    pool = ProcessPoolExecutor(max_workers=args.workers) if args.workers > 1 else None

    def run_map(fn: Any, items: list[Any]) -> list[Any]:
        return list(pool.map(fn, items)) if pool is not None else [fn(i) for i in items]

    started = time.monotonic()
    fair = run_map(_val_episode, [(None, val_cfg, s, args.mode) for s in val_seeds])

    def validate(arrays: dict[str, F32]) -> float:
        jct = run_map(_val_episode, [(arrays, val_cfg, s, args.mode) for s in val_seeds])
        return float(np.mean([a / f for a, f in zip(jct, fair, strict=True)]))

    best_ratio = validate(net.numpy_weights()) if not args.from_scratch else math.inf
    best = Best(0, best_ratio, net.numpy_weights())
    log: list[dict[str, Any]] = [{"iteration": 0, "val_ratio": best_ratio}]
    print(f"iteration 0: validation ratio to fair {best_ratio:.4f}", flush=True)
    ran = 0
    for iteration in range(1, args.iterations + 1):
        if time.monotonic() - started > args.time_budget_s:
            break
        t0 = time.monotonic()
        arrays = net.numpy_weights()
        seeds = [
            args.train_seed_base + (iteration - 1) * args.sequences + i
            for i in range(args.sequences)
        ]
        jobs = [
            (arrays, cfg, s, int(rng.integers(2**31))) for s in seeds for _ in range(args.rollouts)
        ]
        trajs: list[Trajectory] = run_map(rollout, jobs)
        samples, adv = _collect(trajs, args)
        t1 = time.monotonic()
        torch.set_num_threads(args.update_threads)  # the rollout workers are idle meanwhile
        stats = ppo_update(net, opt, samples, adv, args, rng)
        torch.set_num_threads(args.torch_threads)
        entry: dict[str, Any] = {
            "iteration": iteration,
            "train_avg_jct_s": float(np.nanmean([t.avg_jct_s for t in trajs])),
            "samples": len(samples),
            "rollout_s": round(t1 - t0, 1),
            "update_s": round(time.monotonic() - t1, 1),
            **{k: round(v, 5) for k, v in stats.items()},
        }
        if iteration % args.val_every == 0 or iteration == args.iterations:
            entry["val_ratio"] = ratio = validate(net.numpy_weights())
            best.offer(iteration, ratio, net.numpy_weights())
            if args.checkpoint is not None and best.iteration == iteration:
                np.savez(args.checkpoint, **cast(dict[str, Any], best.weights))
        log.append(entry)
        ran = iteration
        print(json.dumps(entry), flush=True)
    if "val_ratio" not in log[-1]:
        log[-1]["val_ratio"] = ratio = validate(net.numpy_weights())
        best.offer(ran, ratio, net.numpy_weights())
    if pool is not None:
        pool.shutdown()
    return {
        "best": best,
        "log": log,
        "fair_val_avg_jct_s": fair,
        "wall_s": time.monotonic() - started,
        "iterations": ran,
    }


def write_model(result: dict[str, Any], args: argparse.Namespace, argv: list[str]) -> None:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    best: Best = result["best"]
    weights = best.weights
    model = build_onnx(weights, DEFAULT_K, source=f"Kairos PPO ({out.parent.name}@{out.name})")
    onnx.save_model(model, str(out / "policy.onnx"))
    shapes = {"J": "jobs", "S": "active stages of a job", "E": "executors N"}
    card = {
        "name": out.parent.name,
        "version": out.name,
        "domain": "dag",
        "kind": "onnx",
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "decoding": {"mode": args.mode, "seed": 0},
        "inputs": [
            {"name": "x", "dtype": "float32", "shape": ["J", "S", 5]},
            {"name": "adj", "dtype": "float32", "shape": ["J", "S", "S"]},
            {"name": "stage_mask", "dtype": "bool", "shape": ["J", "S"]},
            {"name": "select_mask", "dtype": "bool", "shape": ["J", "S"]},
            {"name": "job_mask", "dtype": "bool", "shape": ["J"]},
            {"name": "exec_mask", "dtype": "bool", "shape": ["J", "E"]},
        ],
        "outputs": [
            {"name": "stage_logits", "dtype": "float32", "shape": ["J", "S"]},
            {"name": "exec_logits", "dtype": "float32", "shape": ["J", "E"]},
        ],
        "axes": shapes,
        "opset": OPSET,
        "features": {
            "schema": FEATURE_SCHEMA_VERSION,
            "per_stage": [
                "commit cap_j / N",
                "+1 if the stage's job is the round's source job else -1",
                "supply_j / N",
                "unlaunched tasks / 200",
                "unlaunched tasks x duration estimate (ms) / 1e5",
            ],
            "normalisers": {"num_tasks": 200.0, "work_ms": 1e5, "executors": "N"},
            "duration_estimate": "the stage's latest finished task (the submitted estimate "
            "before one finished)",
        },
        "architecture": {
            "name": "Decima (spark-sched-sim's architecture, spec 4.2), dense message passing",
            "message_passing_iterations": DEFAULT_K,
            "parameters": int(sum(v.size for v in weights.values())),
            "tensors": len(weights),
        },
        "training": {
            "algorithm": "PPO (clipped ratio, per-sequence rollout baseline, continuously "
            "discounted returns) on app.domains.dag.env.DagSchedulingEnv",
            "warm_start": None
            if args.from_scratch
            else "spark-sched-sim's shipped Decima weights (models/decima/model.pt, MIT; "
            "data/dag/spark_sched_sim_decima.npz)",
            "command": "python -m training.dag_ppo "
            + " ".join(repo_relative(Path(a)) if "/" in a else a for a in argv),
            "environment": {
                "semantics": args.semantics,
                "executors": args.executors,
                "jobs": args.jobs,
                "arrival_interval_s": args.interval_s,
                "time_limit_mean_s": args.time_limit,
                "workload": "Decima's TPC-H DAGs (data/dag/tpch_decima_dags.json.gz)",
            },
            "hyperparameters": {
                k: (repo_relative(v) if isinstance(v, Path) else v)
                for k, v in vars(args).items()
                if k not in ("out",)
            },
            "iterations_run": result["iterations"],
            "selected_iteration": best.iteration,
            "wall_s": round(result["wall_s"], 1),
            "log": result["log"],
        },
        "seeds": {
            "torch_and_sampling": args.seed,
            "training_sequences": [
                args.train_seed_base,
                args.train_seed_base + args.iterations * args.sequences - 1,
            ],
            "validation": list(args.val_seeds),
        },
        "validation": {
            "protocol": f"{args.mode} decoding, run_episode at the training configuration "
            "without time limit, mean of per-seed ratios of average JCT to fair",
            "seeds": list(args.val_seeds),
            "ratio_to_fair": best.ratio,
            "fair_avg_jct_s": result["fair_val_avg_jct_s"],
        },
        "metrics": {"validation_ratio_to_fair": best.ratio},
    }
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.dag_ppo", description=__doc__)
    p.add_argument("--out", type=Path, required=True, help="model directory to write")
    p.add_argument("--init", type=Path, default=DEFAULT_DECIMA, help="warm-start state dict")
    p.add_argument("--from-scratch", action="store_true", help="random initial weights")
    p.add_argument("--semantics", default="kairos", choices=["kairos", "spark-sched-sim-compat"])
    p.add_argument("--executors", type=int, default=TRAIN_EXECUTORS)
    p.add_argument("--jobs", type=int, default=TRAIN_JOBS)
    p.add_argument("--interval-s", type=float, default=TRAIN_INTERVAL_S)
    p.add_argument("--time-limit", type=float, default=TRAIN_TIME_LIMIT_MEAN_S)
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--sequences", type=int, default=4)
    p.add_argument("--rollouts", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--minibatches", type=int, default=10)
    p.add_argument(
        "--max-samples", type=int, default=12_000, help="decisions drawn for each update"
    )
    p.add_argument("--entropy", type=float, default=0.04)
    p.add_argument("--target-kl", type=float, default=0.01)
    p.add_argument("--grad-clip", type=float, default=0.5)
    p.add_argument("--beta", type=float, default=5e-3, help="discount per simulated second")
    p.add_argument("--mode", choices=["sample", "argmax"], default="sample")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-seed-base", type=int, default=100_000)
    p.add_argument("--val-seeds", type=int, nargs="+", default=[50_000, 50_001, 50_002, 50_003])
    p.add_argument("--val-every", type=int, default=4)
    p.add_argument("--time-budget-s", type=float, default=2100.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--update-threads", type=int, default=1, help="torch threads of the PPO update")
    p.add_argument(
        "--checkpoint", type=Path, default=None, help=".npz written at each new best validation"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(raw)
    if args.time_limit <= 0:
        args.time_limit = None
    overlap = set(args.val_seeds) & set(
        range(args.train_seed_base, args.train_seed_base + args.iterations * args.sequences)
    )
    if overlap:
        print(f"validation seeds {sorted(overlap)} are training seeds", file=sys.stderr)
        return 2
    result = train(args)
    write_model(result, args, raw)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
