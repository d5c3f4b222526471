"""PPO for the learned GPU policy ``gpu-v1`` (spec section 8.1), single file, cleanrl style.

* **Env**: :class:`app.domains.gpu.env.GpuSchedulingEnv` (the domain's event simulator and
  ``decide()``), ``kairos`` semantics on 16 x 4 GPUs by default. Each episode is a workload of
  160 jobs generated with the Pollux generator's semantics from the Philly weeks 0-9
  (:mod:`app.domains.gpu.philly`), its jobs rigid with their consolidated run time.
* **``--semantics pollux-compat``**: the episodes are the same generated rows on the fixed-step
  cluster of :func:`app.domains.gpu.simulate.simulate_pollux` (60-s grid, measured throughput
  tables); each of its decisions is ``decide()`` of a :class:`ScoredPolicy` whose scores are the
  sampled (or the teacher's) order, so an episode is that policy's ``pollux-compat`` run. A
  decision is recorded only where a pending row could start (as the env asks); the reward of a
  60-s step, ``-(active jobs) x 60 / 3600``, goes to the last recorded decision. Validation is
  under ``pollux-compat`` too, and the checkpoint kept is the best mean over the validation
  workloads of the average JCT divided by the artifact's Tiresias's on the same workload.
* **Policy**: a per-row kernel MLP (F -> 64 -> 32 -> 1, tanh) scores every candidate row; the
  value is an MLP over the masked mean and max of a second per-row MLP's embeddings.
* **Action sampling**: Plackett-Luce: repeatedly one row from the softmax over the rows that
  still fit the GPUs left (by count, as ``decide()`` admits), until none fits; log-prob = the sum
  of the draws' log-probs. The sampled order becomes the env's scores, so ``decide()``'s walk
  admits exactly that prefix. Greedy at evaluation: ``decide()`` walks the raw logits. There is
  no learned "stop" (every round is work-conserving).
* **Reward**: the env's ``-(jobs in the system) x dt / 3600 s`` (its sum is ``-sum JCT / 3600``).
* **Warm start**: optional behaviour cloning of a heuristic's walk (``--bc-episodes``); with
  ``--bc-coef`` > 0 the teacher's log-likelihood on those steps stays in the PPO loss, which
  keeps the policy near its teacher.
* **Selection**: the checkpoint kept is the best mean JCT on validation workloads generated from
  weeks 10-11 (``pollux-compat``: the mean ratio to the artifact's Tiresias, plus with
  ``--select-rigid`` the ``philly-rigid`` ratio to tiresias-2dlas on the same workloads); weeks
  12-15 and the 8 Pollux evaluation workloads are never read.
* **Export**: :func:`build_onnx` writes the graph node by node (``obs float32[B, K, F]``,
  ``mask bool[B, K]`` -> ``logits float32[B, K]`` masked to -1e9, ``value float32[B]``; opset
  17; ``metadata_props["feature_schema_version"]``), plus ``card.json``.

    nice -n 10 python -m training.gpu_ppo --total-minutes 30 --out models/gpu-v1/1
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import torch
import tyro
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from app.domains.gpu.compat_env import GpuCompatEnv
from app.domains.gpu.encoding import (
    DEFAULT_WINDOW,
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    NUM_FEATURES,
    EncodingConstants,
)
from app.domains.gpu.env import GpuSchedulingEnv
from app.domains.gpu.heuristics import GpuConfig, Placement, get_heuristic
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.philly import TRAIN_WEEKS, VALIDATION_WEEKS, split_weeks
from app.domains.gpu.pollux import Application
from app.domains.gpu.simulate import (
    COMPAT_ALIASES,
    Semantics,
    SimJob,
    event_config,
    simulate,
    simulate_events,
    simulate_pollux,
)
from sim.gpu_data import PHILLY_CSV, generated_workloads, load_applications, load_philly
from training.paths import repo_relative

MASKED_LOGIT = -1.0e9
OPSET = 17
#: validation workloads (weeks 10-11) compared with these heuristics
VALIDATION_HEURISTICS = ("tiresias-2dlas", "las", "smallest-first", "fifo-skip", "drf", "srtf")
#: under pollux-compat: the artifact's Tiresias (the bar of the selection metric) and SRSF
COMPAT_VALIDATION_HEURISTICS = ("tiresias", *VALIDATION_HEURISTICS[:-1], "srsf")
#: the pollux-compat step (s), as simulate_pollux runs it
COMPAT_INTERVAL_S = 60
#: the ``philly-rigid`` bar of ``--select-rigid``: the best information-agnostic heuristic
RIGID_BAR = "tiresias-2dlas"


@dataclass
class Args:
    seed: int = 1
    """seed of torch, numpy, the workload generator and the PL sampling"""
    philly: Path = PHILLY_CSV
    """the Philly job table"""
    semantics: str = "kairos"
    """training and validation semantics: kairos, philly-rigid or pollux-compat"""
    nodes: int = 16
    gpus_per_node: int = 4
    jobs_per_workload: int = 160
    train_workloads: int = 256
    """workloads generated from the training weeks (one per seed)"""
    train_pool: int = -1
    """the training workloads' generator seeds are ``train_pool x 100,000 + i`` (-1: the run's
    ``seed``); a fixed pool leaves the seed only the sampling and the workloads' order"""
    val_workloads: int = 8
    """validation workloads generated from weeks 10-11"""
    window: int = DEFAULT_WINDOW
    num_envs: int = 8
    num_steps: int = 256
    """steps per env per rollout"""
    total_minutes: float = 30.0
    """wall-clock budget of BC + PPO (validation and export excluded)"""
    learning_rate: float = 3e-4
    gamma: float = 0.998
    gae_lambda: float = 0.95
    update_epochs: int = 4
    num_minibatches: int = 8
    clip_coef: float = 0.2
    ent_coef: float = 0.003
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    bc_episodes: int = 24
    """behaviour-cloning episodes before PPO (0: none)"""
    bc_teacher: str = "smallest-first"
    bc_epochs: int = 4
    bc_learning_rate: float = 1e-3
    bc_coef: float = 0.0
    """weight of the teacher's log-likelihood (BC steps) kept in the PPO loss (0: none)"""
    dagger_rounds: int = 0
    """pollux-compat: rounds of DAgger after BC (the learner's greedy runs, labelled by the
    teacher, added to the BC steps, then ``bc_epochs`` more epochs)"""
    dagger_episodes: int = 16
    """pollux-compat: learner episodes per DAgger round"""
    episodes_per_update: int = 4
    """pollux-compat: full episodes per PPO update (the event env uses num_envs x num_steps)"""
    val_every: int = 10
    """validate every this many PPO updates"""
    min_updates: int = 0
    """PPO updates run even past the time budget"""
    out: Path = Path("runs/gpu-v1")
    """the model directory written (policy.onnx + card.json)"""
    name: str = "gpu-v1"
    version: str = "1"
    use_estimates: bool = False
    """feed the estimate features (information-aware); default information-agnostic"""
    las_threshold_gpu_s: float = 3250.0
    """the attained GPU-seconds the ``las_queue`` feature marks (a card constant)"""
    skip: bool = False
    """add a linear term of the features to the scorer's MLP (see :class:`Agent`)"""
    skip_epochs: int = 0
    """with ``skip``: behaviour-cloning epochs of the linear term alone, before ``bc_epochs``"""
    skip_learning_rate: float = 0.05
    threads: int = 1
    """torch intra-op threads"""
    run_dir: Path = Path("runs")
    init_key: str = ""
    """start from a heuristic's key written as the linear term (see INITIAL_KEYS), the MLP's
    output at zero: the greedy policy at update 0 is that heuristic exactly (implies ``skip``)"""
    init_scale: float = 1.0
    """the key's scale: the sampling temperature's inverse (greedy order unchanged)"""
    linear_only: bool = False
    """PPO moves only the linear term (and the critic); the MLP stays at its start"""
    group_size: int = 1
    """pollux-compat: episodes per workload in an update; > 1 replaces GAE by the group's
    leave-one-out baseline (see :func:`group_advantages`)"""
    group_horizon_s: float = 14400.0
    """with ``group_size`` > 1: the clock-time discount of the returns (s)"""
    select_rigid: bool = False
    """pollux-compat: the checkpoint kept minimises the sum of two means over the validation
    workloads, the ratio to the artifact's Tiresias (as without it) and the ``philly-rigid``
    ratio to :data:`RIGID_BAR` on the same workloads as rigid jobs"""
    keep_checkpoints: bool = False
    """also save every validated state to ``run_dir`` (``NAME-sSEED-uUPDATE.pt``)"""

    def __post_init__(self) -> None:
        if self.select_rigid and Semantics(self.semantics) is not Semantics.POLLUX_COMPAT:
            raise ValueError("--select-rigid is for --semantics pollux-compat")


# -- the network -------------------------------------------------------------------------------


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class Agent(nn.Module):
    """The scorer (``actor``, per row) and the critic (pooled rows). With ``skip`` the logits
    are the MLP's plus a linear term of the features (no bias), so an order that is a linear
    function of the features, such as a heuristic's key, is representable exactly."""

    def __init__(self, features: int = NUM_FEATURES, skip: bool = False) -> None:
        super().__init__()
        self.actor = mlp([features, 64, 32, 1])
        self.skip = nn.Linear(features, 1, bias=False) if skip else None
        if self.skip is not None:
            nn.init.zeros_(self.skip.weight)
        self.embed = nn.Sequential(nn.Linear(features, 64), nn.Tanh(), nn.Linear(64, 32), nn.Tanh())
        self.critic = mlp([64, 64, 1])
        nn.init.orthogonal_(self.actor[-1].weight, gain=0.01)  # type: ignore[arg-type]
        nn.init.zeros_(self.actor[-1].bias)  # type: ignore[arg-type]

    def logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        raw: torch.Tensor = self.actor(obs).squeeze(-1)
        if self.skip is not None:
            raw = raw + self.skip(obs).squeeze(-1)
        return torch.where(mask, raw, torch.full_like(raw, MASKED_LOGIT))

    def value(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        emb: torch.Tensor = self.embed(obs)
        m = mask.unsqueeze(-1).to(emb.dtype)
        mean = (emb * m).sum(1) / m.sum(1).clamp(min=1.0)
        mx = torch.where(mask.unsqueeze(-1), emb, torch.full_like(emb, MASKED_LOGIT)).amax(1)
        mx = torch.where(mask.any(1, keepdim=True), mx, torch.zeros_like(mx))
        out: torch.Tensor = self.critic(torch.cat([mean, mx], -1)).squeeze(-1)
        return out


def numpy_scorer(agent: Agent) -> Any:
    """``score(obs[k, F], mask[k]) -> logits[k]`` of the actor (for ``ScoredPolicy``)."""

    def score(obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_]) -> Any:
        with torch.no_grad():
            o = torch.from_numpy(np.ascontiguousarray(obs))[None]
            m = torch.from_numpy(np.asarray(mask, dtype=np.bool_))[None]
            return agent.logits(o, m)[0].numpy()

    return score


#: heuristic keys as linear scores over FEATURE_NAMES (higher first; ties by arrival, as
#: ``decide()`` breaks them). 2D-LAS is exact when ``las_queue``'s threshold is the heuristic's.
INITIAL_KEYS: dict[str, dict[str, float]] = {
    "tiresias-2dlas": {"las_queue": -4.0, "running": 2.0, "wait": 1.0},
    "smallest-first": {"gpus_per_cluster": -256.0, "wait": 1.0},
}


def initial_weights(init: str) -> npt.NDArray[np.float64]:
    names = list(FEATURE_NAMES)
    w = np.zeros(NUM_FEATURES)
    for f, v in INITIAL_KEYS[init].items():
        w[names.index(f)] = v
    return w


def agent_of(w: npt.ArrayLike) -> Agent:
    """An agent whose score is the linear term ``w`` alone (the MLP's output layer at zero)."""
    agent = Agent(skip=True)
    with torch.no_grad():
        last = _linears(agent.actor)[-1]
        last.weight.zero_()
        last.bias.zero_()
        assert agent.skip is not None
        agent.skip.weight.copy_(torch.tensor(np.asarray(w, dtype=np.float32))[None])
    return agent


# -- ONNX --------------------------------------------------------------------------------------


def _linears(seq: nn.Sequential) -> list[nn.Linear]:
    return [m for m in seq if isinstance(m, nn.Linear)]


def build_onnx(agent: Agent) -> onnx.ModelProto:
    """The graph of ``agent`` (logits and value), written node by node."""
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: npt.NDArray[Any]) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def dense(prefix: str, x: str, layers: list[nn.Linear], tanh_last: bool) -> str:
        for i, lin in enumerate(layers):
            w = const(f"{prefix}{i}.w", lin.weight.detach().numpy().T.astype(np.float32).copy())
            b = const(f"{prefix}{i}.b", lin.bias.detach().numpy().astype(np.float32).copy())
            nodes.append(helper.make_node("MatMul", [x, w], [f"{prefix}{i}.mm"]))
            nodes.append(helper.make_node("Add", [f"{prefix}{i}.mm", b], [f"{prefix}{i}.z"]))
            x = f"{prefix}{i}.z"
            if i < len(layers) - 1 or tanh_last:
                nodes.append(helper.make_node("Tanh", [x], [f"{prefix}{i}.a"]))
                x = f"{prefix}{i}.a"
        return x

    neg = const("masked", np.array(MASKED_LOGIT, dtype=np.float32))
    last = const("axis_last", np.array([-1], dtype=np.int64))
    rows = const("axis_rows", np.array([1], dtype=np.int64))
    one = const("one", np.array(1.0, dtype=np.float32))
    zero = const("zero", np.array(0.0, dtype=np.float32))
    a = dense("actor", "obs", _linears(agent.actor), tanh_last=False)
    if agent.skip is not None:
        w = const("skip.w", agent.skip.weight.detach().numpy().T.astype(np.float32).copy())
        nodes.append(helper.make_node("MatMul", ["obs", w], ["skip.mm"]))
        nodes.append(helper.make_node("Add", [a, "skip.mm"], ["actor.skip"]))
        a = "actor.skip"
    nodes.append(helper.make_node("Squeeze", [a, last], ["raw_logits"]))
    nodes.append(helper.make_node("Where", ["mask", "raw_logits", neg], ["logits"]))
    e = dense("embed", "obs", _linears(agent.embed), tanh_last=True)
    nodes += [
        helper.make_node("Unsqueeze", ["mask", last], ["mask3"]),
        helper.make_node("Cast", ["mask3"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", [e, "maskf"], ["emb_m"]),
        helper.make_node("ReduceSum", ["emb_m", rows], ["emb_sum"], keepdims=0),
        helper.make_node("ReduceSum", ["maskf", rows], ["count"], keepdims=0),
        helper.make_node("Max", ["count", one], ["count1"]),
        helper.make_node("Div", ["emb_sum", "count1"], ["emb_mean"]),
        helper.make_node("Where", ["mask3", e, neg], ["emb_w"]),
        helper.make_node("ReduceMax", ["emb_w"], ["emb_max0"], axes=[1], keepdims=0),
        helper.make_node("Greater", ["count", zero], ["any_row"]),
        helper.make_node("Where", ["any_row", "emb_max0", zero], ["emb_max"]),
        helper.make_node("Concat", ["emb_mean", "emb_max"], ["pooled"], axis=-1),
    ]
    v = dense("critic", "pooled", _linears(agent.critic), tanh_last=False)
    nodes.append(helper.make_node("Squeeze", [v, last], ["value"]))
    graph = helper.make_graph(
        nodes,
        "kairos-gpu-v1",
        [
            helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["B", "K", NUM_FEATURES]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, ["B", "K"]),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "K"]),
            helper.make_tensor_value_info("value", TensorProto.FLOAT, ["B"]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    helper.set_model_props(model, {"feature_schema_version": FEATURE_SCHEMA_VERSION})
    onnx.checker.check_model(model)
    return model


def io_signature(window: int) -> dict[str, Any]:
    del window
    return {
        "inputs": [
            {"name": "obs", "dtype": "float32", "shape": ["B", "K", NUM_FEATURES]},
            {"name": "mask", "dtype": "bool", "shape": ["B", "K"]},
        ],
        "outputs": [
            {"name": "logits", "dtype": "float32", "shape": ["B", "K"]},
            {"name": "value", "dtype": "float32", "shape": ["B"]},
        ],
    }


# -- Plackett-Luce over the rows that fit ------------------------------------------------------


def row_sizes(info: dict[str, Any]) -> npt.NDArray[np.int64]:
    """GPUs each row claims in the admission walk (held if running, else its demand)."""
    held, demand = info["held"], info["demand"]
    out: npt.NDArray[np.int64] = np.where(held > 0, held, demand).astype(np.int64)
    return out


def sample_order(
    logits: npt.NDArray[np.float32],
    mask: npt.NDArray[np.bool_],
    sizes: npt.NDArray[np.int64],
    capacity: int,
    rng: np.random.Generator,
) -> list[int]:
    left = capacity
    avail = mask.copy()
    chosen: list[int] = []
    while True:
        feas = avail & (sizes <= left)
        if not feas.any():
            return chosen
        idx = np.flatnonzero(feas)
        z = logits[idx].astype(np.float64)
        p = np.exp(z - z.max())
        p /= p.sum()
        k = int(idx[rng.choice(len(idx), p=p)])
        chosen.append(k)
        left -= int(sizes[k])
        avail[k] = False


def order_to_scores(order: Sequence[int], window: int) -> npt.NDArray[np.float32]:
    """Env scores in [-1, 1] that walk ``order`` first (the other rows at -1)."""
    scores = np.full(window, -1.0, dtype=np.float32)
    for pos, k in enumerate(order):
        scores[k] = 1.0 - pos / (window + 1)
    return scores


def teacher_order(
    info: dict[str, Any], mask: npt.NDArray[np.bool_], name: str, config: GpuConfig | None = None
) -> list[int]:
    """The walk of heuristic ``name`` over the rows (ranked by its key under ``config``,
    admitted if they fit)."""
    h = get_heuristic(name)
    jobs = info["jobs"]
    cfg = CONFIG_LAS if config is None else config
    ranked = sorted(
        (k for k in range(len(jobs)) if mask[k]),
        key=lambda k: h.sort_key(jobs[k], cfg),
    )
    sizes, left, out = row_sizes(info), int(info["capacity"]), []
    for k in ranked:
        if sizes[k] <= left:
            out.append(k)
            left -= int(sizes[k])
    return out


CONFIG_LAS = event_config(Semantics.KAIROS, 1, 1).decide_config
#: the decide() knobs simulate_pollux gives a library heuristic (a key-mode teacher reads them)
CONFIG_COMPAT = GpuConfig(placement=Placement.MOST_FREE, las_thresholds=(57600.0,))


def sequence_logprob(
    logits: torch.Tensor, seq: torch.Tensor, sizes: torch.Tensor, capacity: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum over each sampled sequence of the draws' log-probs, and of their entropies.

    ``logits[B, K]`` (masked rows at -1e9), ``seq[B, T]`` (row indices, -1 padded),
    ``sizes[B, K]``, ``capacity[B]``."""
    b, k = logits.shape
    t = seq.shape[1]
    valid = seq >= 0
    safe = seq.clamp(min=0)
    claim = torch.gather(sizes, 1, safe) * valid
    left = capacity[:, None] - (torch.cumsum(claim, 1) - claim)  # GPUs left before draw t
    onehot = torch.zeros(b, t, k, dtype=torch.bool)
    onehot.scatter_(2, safe.unsqueeze(-1), valid.unsqueeze(-1))
    before = (torch.cumsum(onehot.to(torch.int32), 1) - onehot.to(torch.int32)) > 0
    feas = (
        (logits[:, None, :] > MASKED_LOGIT / 2) & ~before & (sizes[:, None, :] <= left[..., None])
    )
    z = torch.where(feas, logits[:, None, :], torch.full_like(logits[:, None, :], -1e30))
    logp_all = z - torch.logsumexp(z, -1, keepdim=True)
    picked = torch.gather(logp_all, 2, safe.unsqueeze(-1)).squeeze(-1)
    logp = (picked * valid).sum(1)
    p = torch.where(feas, logp_all.exp(), torch.zeros_like(logp_all))
    ent = -(p * torch.where(feas, logp_all, torch.zeros_like(logp_all))).sum(-1)
    return logp, (ent * valid).sum(1)


# -- data --------------------------------------------------------------------------------------


@dataclass
class Data:
    train: list[list[SimJob]]
    val: list[list[SimJob]]
    train_seeds: list[int]
    val_seeds: list[int]
    train_rows: int
    val_rows: int


def load_data(args: Args) -> Data:
    jobs = load_philly(args.philly)
    train_rows, val_rows = split_weeks(jobs, TRAIN_WEEKS, VALIDATION_WEEKS)
    pool = args.seed if args.train_pool < 0 else args.train_pool
    train_seeds = [pool * 100_000 + i for i in range(args.train_workloads)]
    val_seeds = [900_000 + i for i in range(args.val_workloads)]
    return Data(
        generated_workloads(train_rows, train_seeds, args.jobs_per_workload),
        generated_workloads(val_rows, val_seeds, args.jobs_per_workload),
        train_seeds,
        val_seeds,
        len(train_rows),
        len(val_rows),
    )


def mean_jct(jcts: Sequence[float]) -> float:
    return float(np.mean(jcts))


def validate(
    agent: Agent,
    args: Args,
    data: Data,
    constants: EncodingConstants,
    semantics: Semantics | None = None,
) -> list[float]:
    """The greedy policy's average JCT on each validation workload under ``semantics`` (the
    event simulator; default ``args.semantics``)."""
    cfg = event_config(semantics or Semantics(args.semantics), args.nodes, args.gpus_per_node)
    pol = ScoredPolicy(args.name, args.version, numpy_scorer(agent), constants, args.window)
    return [mean_jct(simulate_events(w, pol, cfg).jcts) for w in data.val]


def validate_compat(
    agent: Agent,
    args: Args,
    data: Data,
    constants: EncodingConstants,
    apps: Mapping[str, Application],
) -> list[float]:
    pol = ScoredPolicy(args.name, args.version, numpy_scorer(agent), constants, args.window)
    return [
        mean_jct(
            simulate_pollux(w, apps, pol, nodes=args.nodes, gpus_per_node=args.gpus_per_node).jcts
        )
        for w in data.val
    ]


def heuristic_validation(
    args: Args, data: Data, apps: Mapping[str, Application] | None = None
) -> dict[str, list[float]]:
    sem = Semantics(args.semantics)
    names = (
        COMPAT_VALIDATION_HEURISTICS if sem is Semantics.POLLUX_COMPAT else VALIDATION_HEURISTICS
    )
    return {
        h: [
            mean_jct(
                simulate(
                    w, h, sem, nodes=args.nodes, gpus_per_node=args.gpus_per_node, apps=apps
                ).jcts
            )
            for w in data.val
        ]
        for h in names
    }


def rigid_bar_validation(args: Args, data: Data) -> list[float]:
    """:data:`RIGID_BAR`'s average JCT on each validation workload under ``philly-rigid``."""
    return [
        mean_jct(
            simulate(
                w,
                RIGID_BAR,
                Semantics.PHILLY_RIGID,
                nodes=args.nodes,
                gpus_per_node=args.gpus_per_node,
            ).jcts
        )
        for w in data.val
    ]


def mean_ratio(val: Sequence[float], bar: Sequence[float]) -> float:
    return float(np.mean(np.asarray(val) / np.asarray(bar)))


def selection_metric(val: Sequence[float], heur: Mapping[str, Sequence[float]]) -> float:
    """What the checkpoint kept minimises: with the artifact's Tiresias among the heuristics
    (pollux-compat), the mean of the per-workload ratios to its average JCT; otherwise the mean
    average JCT."""
    if "tiresias" in heur:
        return mean_ratio(val, heur["tiresias"])
    return float(np.mean(val))


def checkpoint_validation(
    agent: Agent,
    args: Args,
    data: Data,
    constants: EncodingConstants,
    apps: Mapping[str, Application] | None,
    heur: Mapping[str, Sequence[float]],
    rigid_bar: Sequence[float],
) -> tuple[float, list[float], list[float]]:
    """A checkpoint's selection metric (lower is better), its validation JCTs under the
    training semantics and, with ``select_rigid``, under ``philly-rigid`` (``rigid_bar``:
    :func:`rigid_bar_validation`)."""
    if apps is None:
        val = validate(agent, args, data, constants)
        return selection_metric(val, heur), val, []
    val = validate_compat(agent, args, data, constants, apps)
    if not args.select_rigid:
        return selection_metric(val, heur), val, []
    rigid = validate(agent, args, data, constants, Semantics.PHILLY_RIGID)
    return selection_metric(val, heur) + mean_ratio(rigid, rigid_bar), val, rigid


# -- pollux-compat episodes --------------------------------------------------------------------

#: ``(obs, mask, info) -> (rows to admit in order, value estimate)``
Chooser = Callable[
    [npt.NDArray[np.float32], npt.NDArray[np.bool_], dict[str, Any]], tuple[list[int], float]
]


def run_compat_episode(
    rows: Sequence[SimJob],
    apps: Mapping[str, Application],
    args: Args,
    constants: EncodingConstants,
    choose: Chooser,
) -> tuple[list[Step], list[float]]:
    """One episode of :class:`GpuCompatEnv` (the ``pollux-compat`` cluster) on ``rows`` whose
    orders come from ``choose``: the decisions with their rewards (the last marked done) and
    every job's JCT."""
    env = GpuCompatEnv(
        lambda _: rows,
        apps,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        interval=COMPAT_INTERVAL_S,
        constants=constants,
        window=args.window,
    )
    o, info = env.reset(options={"jobs": rows})
    steps: list[Step] = []
    done = "jcts" in info
    while not done:
        seq, value = choose(o["obs"], o["mask"], info)
        step = Step(o["obs"], o["mask"], row_sizes(info), int(info["capacity"]), seq, 0.0, value)
        step.now = float(info["now"])
        o, reward, done, _, info = env.step(order_to_scores(seq, args.window))
        step.reward, step.done = reward, done
        steps.append(step)
    return steps, list(info["jcts"])


def compat_teacher_steps(
    data: Data,
    apps: Mapping[str, Application],
    args: Args,
    constants: EncodingConstants,
    rng: np.random.Generator,
) -> list[Step]:
    """The teacher's recorded decisions on ``bc_episodes`` training workloads."""

    def choose(
        obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], info: dict[str, Any]
    ) -> tuple[list[int], float]:
        del obs
        return teacher_order(info, mask, args.bc_teacher, CONFIG_COMPAT), 0.0

    steps: list[Step] = []
    for _ in range(args.bc_episodes):
        rows = data.train[int(rng.integers(len(data.train)))]
        steps += run_compat_episode(rows, apps, args, constants, choose)[0]
    return steps


def greedy_order(
    logits: npt.NDArray[np.float32],
    mask: npt.NDArray[np.bool_],
    sizes: npt.NDArray[np.int64],
    capacity: int,
) -> list[int]:
    """``decide()``'s walk of ``logits``: highest first (ties by row, i.e. the canonical
    pre-order), admitted if it fits the GPUs left."""
    left, out = capacity, []
    for k in sorted(np.flatnonzero(mask).tolist(), key=lambda k: (-float(logits[k]), k)):
        if sizes[k] <= left:
            out.append(int(k))
            left -= int(sizes[k])
    return out


def dagger_steps(
    agent: Agent,
    data: Data,
    apps: Mapping[str, Application],
    args: Args,
    constants: EncodingConstants,
    rng: np.random.Generator,
) -> list[Step]:
    """The teacher's orders on the states of ``dagger_episodes`` greedy runs of ``agent``."""
    labelled: list[Step] = []

    def choose(
        obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], info: dict[str, Any]
    ) -> tuple[list[int], float]:
        sizes, cap = row_sizes(info), int(info["capacity"])
        seq = teacher_order(info, mask, args.bc_teacher, CONFIG_COMPAT)
        labelled.append(Step(obs, mask, sizes, cap, seq, 0.0, 0.0))
        with torch.no_grad():
            o = torch.from_numpy(obs)[None]
            logits = agent.logits(o, torch.from_numpy(mask)[None])[0].numpy()
        return greedy_order(logits, mask, sizes, cap), 0.0

    for _ in range(args.dagger_episodes):
        rows = data.train[int(rng.integers(len(data.train)))]
        run_compat_episode(rows, apps, args, constants, choose)
    return labelled


def compat_rollout(
    agent: Agent,
    data: Data,
    apps: Mapping[str, Application],
    args: Args,
    constants: EncodingConstants,
    rng: np.random.Generator,
) -> tuple[list[list[Step]], list[float]]:
    """``episodes_per_update`` sampled episodes (the decisions with their log-probs) and each
    episode's average JCT; with ``group_size`` > 1, consecutive groups of that many episodes
    share one workload."""

    def choose(
        obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], info: dict[str, Any]
    ) -> tuple[list[int], float]:
        o = torch.from_numpy(obs)[None]
        m = torch.from_numpy(mask)[None]
        with torch.no_grad():
            logits = agent.logits(o, m)[0].numpy()
            value = float(agent.value(o, m)[0])
        return sample_order(logits, mask, row_sizes(info), int(info["capacity"]), rng), value

    episodes: list[list[Step]] = []
    finished: list[float] = []
    group = max(1, args.group_size)
    for _ in range(max(1, args.episodes_per_update // group)):
        rows = data.train[int(rng.integers(len(data.train)))]
        for _ in range(group):  # a group: the same workload, its own sampled orders
            steps, jcts = run_compat_episode(rows, apps, args, constants, choose)
            episodes.append(steps)
            finished.append(mean_jct(jcts))
    set_logp(agent, [s for steps in episodes for s in steps])
    return episodes, finished


# -- training ----------------------------------------------------------------------------------


@dataclass
class Step:
    obs: npt.NDArray[np.float32]
    mask: npt.NDArray[np.bool_]
    sizes: npt.NDArray[np.int64]
    capacity: int
    seq: list[int]
    logp: float
    value: float
    reward: float = 0.0
    done: bool = False
    now: float = 0.0
    """the clock of the decision (s)"""


class Envs:
    def __init__(self, args: Args, data: Data, constants: EncodingConstants) -> None:
        cfg = event_config(Semantics(args.semantics), args.nodes, args.gpus_per_node)
        self.rng = np.random.default_rng(args.seed)
        pool = data.train
        self.envs = [
            GpuSchedulingEnv(
                lambda r: pool[int(r.integers(len(pool)))],
                cfg,
                constants=constants,
                window=args.window,
            )
            for _ in range(args.num_envs)
        ]
        self.obs: list[dict[str, Any]] = []
        self.infos: list[dict[str, Any]] = []
        for i, env in enumerate(self.envs):
            o, info = env.reset(seed=args.seed * 1000 + i)
            self.obs.append(o)
            self.infos.append(info)
        self.finished: list[float] = []

    def step(self, i: int, scores: npt.NDArray[np.float32]) -> tuple[float, bool]:
        env = self.envs[i]
        o, r, term, trunc, info = env.step(scores)
        if term or trunc:
            self.finished.append(mean_jct(info["jcts"]))
            o, info = env.reset()
        self.obs[i], self.infos[i] = o, info
        return float(r), bool(term or trunc)


def env_teacher_steps(envs: Envs, args: Args) -> list[Step]:
    """The teacher's decisions on ``bc_episodes`` episodes of the event env."""
    steps: list[Step] = []
    episodes = 0
    while episodes < args.bc_episodes:
        for i in range(len(envs.envs)):
            info, o = envs.infos[i], envs.obs[i]
            seq = teacher_order(info, o["mask"], args.bc_teacher)
            steps.append(
                Step(o["obs"], o["mask"], row_sizes(info), int(info["capacity"]), seq, 0, 0)
            )
            _, done = envs.step(i, order_to_scores(seq, args.window))
            episodes += done
    return steps


def teacher_nll(agent: Agent, mb: Sequence[Step]) -> torch.Tensor:
    """The mean negative log-likelihood per draw of the teacher's orders in ``mb``."""
    obs, mask, sizes, cap, seqs = _stack(mb)
    logp, _ = sequence_logprob(agent.logits(obs, mask), seqs, sizes, cap)
    draws = (seqs >= 0).sum().clamp(min=1)
    return -logp.sum() / draws


def behaviour_cloning(
    agent: Agent,
    opt: torch.optim.Optimizer,
    steps: list[Step],
    args: Args,
    epochs: int | None = None,
) -> float:
    """Imitate the teacher's recorded walks ``steps`` (Plackett-Luce likelihood) for
    ``epochs`` (default ``bc_epochs``) passes; ``opt`` decides which parameters move."""
    loss_v = 0.0
    for _ in range(args.bc_epochs if epochs is None else epochs):
        random.shuffle(steps)
        for start in range(0, len(steps), 256):
            loss = teacher_nll(agent, steps[start : start + 256])
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            opt.step()
            loss_v = float(loss.detach())
    return loss_v


def _stack(
    mb: Sequence[Step],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    t = max(1, max(len(s.seq) for s in mb))
    seq = np.full((len(mb), t), -1, dtype=np.int64)
    for i, s in enumerate(mb):
        seq[i, : len(s.seq)] = s.seq
    return (
        torch.from_numpy(np.stack([s.obs for s in mb])),
        torch.from_numpy(np.stack([s.mask for s in mb])),
        torch.from_numpy(np.stack([s.sizes for s in mb])),
        torch.tensor([s.capacity for s in mb], dtype=torch.int64),
        torch.from_numpy(seq),
    )


def rollout(agent: Agent, envs: Envs, args: Args) -> list[list[Step]]:
    per_env: list[list[Step]] = [[] for _ in envs.envs]
    for _ in range(args.num_steps):
        obs = torch.from_numpy(np.stack([o["obs"] for o in envs.obs]))
        mask = torch.from_numpy(np.stack([o["mask"] for o in envs.obs]))
        with torch.no_grad():
            logits = agent.logits(obs, mask).numpy()
            values = agent.value(obs, mask).numpy()
        for i in range(len(envs.envs)):
            info = envs.infos[i]
            sizes = row_sizes(info)
            m = envs.obs[i]["mask"]
            seq = sample_order(logits[i], m, sizes, int(info["capacity"]), envs.rng)
            step = Step(
                envs.obs[i]["obs"], m, sizes, int(info["capacity"]), seq, 0.0, float(values[i])
            )
            step.reward, step.done = envs.step(i, order_to_scores(seq, args.window))
            per_env[i].append(step)
    set_logp(agent, [s for steps in per_env for s in steps])
    return per_env


def set_logp(agent: Agent, flat: Sequence[Step]) -> None:
    """Each step's log-prob of its sampled order under ``agent`` (batched)."""
    with torch.no_grad():
        for start in range(0, len(flat), 512):
            mb = flat[start : start + 512]
            obs_b, mask_b, sizes_b, cap_b, seq_b = _stack(mb)
            lp, _ = sequence_logprob(agent.logits(obs_b, mask_b), seq_b, sizes_b, cap_b)
            for s, v in zip(mb, lp.tolist(), strict=True):
                s.logp = float(v)


def advantages(
    agent: Agent, envs: Envs, per_env: list[list[Step]], args: Args
) -> tuple[list[Step], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    obs = torch.from_numpy(np.stack([o["obs"] for o in envs.obs]))
    mask = torch.from_numpy(np.stack([o["mask"] for o in envs.obs]))
    with torch.no_grad():
        last = agent.value(obs, mask).numpy()
    return gae_all(per_env, [float(v) for v in last], args)


def gae_all(
    per_env: list[list[Step]], last: Sequence[float], args: Args
) -> tuple[list[Step], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """GAE over each list of steps, ``last[i]`` the value after list ``i`` (unused past a done
    step)."""
    flat: list[Step] = []
    adv: list[float] = []
    ret: list[float] = []
    for i, steps in enumerate(per_env):
        gae = 0.0
        a_env = [0.0] * len(steps)
        for t in reversed(range(len(steps))):
            nxt = last[i] if t == len(steps) - 1 else steps[t + 1].value
            nonterminal = 0.0 if steps[t].done else 1.0
            delta = steps[t].reward + args.gamma * nxt * nonterminal - steps[t].value
            gae = delta + args.gamma * args.gae_lambda * nonterminal * gae
            a_env[t] = gae
        flat.extend(steps)
        adv.extend(a_env)
        ret.extend(a + s.value for a, s in zip(a_env, steps, strict=True))
    return flat, np.array(adv, dtype=np.float32), np.array(ret, dtype=np.float32)


def returns_to_go(steps: Sequence[Step], horizon_s: float) -> npt.NDArray[np.float64]:
    """``G_i = r_i + exp(-(t_{i+1} - t_i) / horizon_s) G_{i+1}``: each decision's return,
    discounted by clock time."""
    g = np.zeros(len(steps))
    acc = 0.0
    for i in reversed(range(len(steps))):
        if i + 1 < len(steps):
            acc *= math.exp(-(steps[i + 1].now - steps[i].now) / horizon_s)
        acc += steps[i].reward
        g[i] = acc
    return g


def group_advantages(
    episodes: list[list[Step]], group_size: int, horizon_s: float
) -> tuple[list[Step], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Advantages from the other episodes of the same workload (leave-one-out): a decision at
    clock ``t`` scores its episode's return from ``t`` against the mean of the group's other
    episodes' returns from ``t``. The arrivals after ``t`` are the same in every episode of a
    group, so the part of the return that no decision controls cancels, which no critic can
    do (it does not see the future arrivals). The baseline depends only on the other
    episodes' samples, so the gradient stays unbiased."""
    flat: list[Step] = []
    adv: list[float] = []
    ret: list[float] = []
    returns = [returns_to_go(e, horizon_s) for e in episodes]
    times = [np.array([s.now for s in e]) for e in episodes]

    def from_time(k: int, t: float) -> float:
        i = int(np.searchsorted(times[k], t, side="left"))
        if i >= len(times[k]):
            return 0.0
        return float(math.exp(-(times[k][i] - t) / horizon_s) * returns[k][i])

    for start in range(0, len(episodes), group_size):
        members = range(start, min(start + group_size, len(episodes)))
        for e in members:
            others = [k for k in members if k != e]
            for i, step in enumerate(episodes[e]):
                base = np.mean([from_time(k, step.now) for k in others]) if others else 0.0
                flat.append(step)
                adv.append(float(returns[e][i] - base))
                ret.append(float(returns[e][i]))
    return flat, np.array(adv, dtype=np.float32), np.array(ret, dtype=np.float32)


def ppo_update(
    agent: Agent,
    opt: torch.optim.Optimizer,
    flat: list[Step],
    adv: npt.NDArray[np.float32],
    ret: npt.NDArray[np.float32],
    args: Args,
    rng: np.random.Generator,
    teacher: Sequence[Step] = (),
) -> dict[str, float]:
    n = len(flat)
    mb_size = max(1, n // args.num_minibatches)
    old_logp = np.array([s.logp for s in flat], dtype=np.float32)
    stats: dict[str, float] = {}
    for _ in range(args.update_epochs):
        perm = rng.permutation(n)
        for start in range(0, n, mb_size):
            idx = perm[start : start + mb_size]
            obs, mask, sizes, cap, seq = _stack([flat[i] for i in idx])
            logp, ent = sequence_logprob(agent.logits(obs, mask), seq, sizes, cap)
            ratio = (logp - torch.from_numpy(old_logp[idx])).exp()
            a = torch.from_numpy(adv[idx])
            # a remainder minibatch of one row has no spread to normalise by
            a = (a - a.mean()) / (a.std() + 1e-8) if len(idx) > 1 else a - a.mean()
            pg = torch.max(-a * ratio, -a * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef))
            v = agent.value(obs, mask)
            v_loss = 0.5 * ((v - torch.from_numpy(ret[idx])) ** 2).mean()
            loss = pg.mean() - args.ent_coef * ent.mean() + args.vf_coef * v_loss
            bc = torch.zeros(())
            if args.bc_coef > 0 and teacher:
                pick = rng.integers(len(teacher), size=min(len(idx), len(teacher)))
                bc = teacher_nll(agent, [teacher[int(i)] for i in pick])
                loss = loss + args.bc_coef * bc
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            opt.step()
            stats = {
                "pg_loss": float(pg.mean().detach()),
                "v_loss": float(v_loss.detach()),
                "entropy": float(ent.mean().detach()),
                "approx_kl": float(((ratio - 1) - ratio.log()).mean().detach()),
                "teacher_nll": float(bc.detach()),
            }
    return stats


def write_model(agent: Agent, out: Path, card: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "policy.onnx").write_bytes(build_onnx(agent).SerializeToString())
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")


def validation_block(val: Sequence[float], heur: dict[str, list[float]]) -> dict[str, Any]:
    """The card's validation result: the policy against the information-agnostic heuristics
    (the best of them is the bar) and the oracle ones (reported)."""
    means = {h: float(np.mean(v)) for h, v in heur.items()}
    agnostic = [h for h in means if h in COMPAT_ALIASES or not get_heuristic(h).needs_estimate]
    best = min(agnostic, key=lambda h: means[h])
    m = float(np.mean(val))
    extra: dict[str, Any] = {}
    if "tiresias" in heur:
        t = heur["tiresias"]
        extra = {
            "selection": "mean over the validation workloads of the average JCT / the "
            "artifact's Tiresias's (the checkpoint kept minimises it)",
            "policy_ratio_to_tiresias": selection_metric(val, heur),
            "policy_wins_vs_tiresias": sum(a < b for a, b in zip(val, t, strict=True)),
            "heuristics_wins_vs_tiresias": {
                h: sum(a < b for a, b in zip(v, t, strict=True)) for h, v in heur.items()
            },
        }
    return {
        "metric": "mean over the validation workloads of the average JCT (s), greedy",
        **extra,
        "policy_avg_jct_s": m,
        "policy_per_workload": list(val),
        "heuristics_avg_jct_s": means,
        "heuristics_per_workload": {h: list(v) for h, v in heur.items()},
        "oracle_heuristics": [h for h in means if h not in agnostic],
        "best_heuristic": best,
        "ratio_to_best_heuristic": m / means[best],
    }


def make_card(
    args: Args,
    data: Data,
    constants: EncodingConstants,
    val: list[float],
    heur: dict[str, list[float]],
    meta: dict[str, Any],
) -> dict[str, Any]:
    params = {k: repo_relative(v) if isinstance(v, Path) else v for k, v in asdict(args).items()}
    return {
        "name": args.name,
        "version": args.version,
        "domain": "gpu",
        "kind": "onnx",
        "decision_mode": "rank",
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "features": list(FEATURE_NAMES),
        "encoding": constants.as_dict(),
        "window": args.window,
        **io_signature(args.window),
        "opset": OPSET,
        "architecture": {
            "score": "w3 . tanh(W2 tanh(W1 x + b1) + b2) + b3"
            + (" + s . x" if args.skip or args.init_key else "")
            + " per candidate row (64, 32)",
            "value": "MLP(64 -> 1) over masked mean and max of a per-row tanh MLP (64, 32)",
            "parameters": sum(p.numel() for p in meta["agent"].parameters()),
        },
        "training": {
            "algorithm": "PPO with Plackett-Luce admission orders over the rows that fit "
            "(training/gpu_ppo.py) on "
            + (
                "app/domains/gpu/compat_env.py GpuCompatEnv (the fixed-step cluster of "
                "simulate_pollux), "
                if args.semantics == Semantics.POLLUX_COMPAT
                else "app/domains/gpu/env.py, "
            )
            + f"{args.semantics} semantics, {args.nodes} x {args.gpus_per_node} GPUs; "
            + (
                f"started at the key of {args.init_key} x {args.init_scale} as the linear term "
                "(the greedy policy at update 0 is that heuristic)"
                + ("; PPO moves the linear term and the critic only" if args.linear_only else "")
                if args.init_key
                else f"behaviour-cloning warm start on {args.bc_teacher} "
                f"({args.bc_episodes} episodes)"
            )
            + (f", {args.dagger_rounds} DAgger rounds" if args.dagger_rounds else "")
            + (f", teacher log-likelihood kept at weight {args.bc_coef}" if args.bc_coef else ""),
            "command": meta["command"],
            "hyperparameters": params,
            "data": {
                "trace": "data/gpu/philly/philly_jobs.csv.gz",
                "week_origin": "the table's first submission, 2017-09-04 10:30:41",
                "training_weeks": list(TRAIN_WEEKS),
                "validation_weeks": list(VALIDATION_WEEKS),
                "never_read": "weeks 12-15 and the 8 Pollux evaluation workloads",
                "training_rows": data.train_rows,
                "validation_rows": data.val_rows,
                "generator": "app/domains/gpu/philly.py generate_pollux_workload "
                f"({args.jobs_per_workload} jobs), jobs rigid with their consolidated run time",
                "training_workload_seeds": [data.train_seeds[0], data.train_seeds[-1]],
                "validation_workload_seeds": [data.val_seeds[0], data.val_seeds[-1]],
            },
            "traces": [],
            "validation": validation_block(val, heur),
            "best_update": meta["best_update"],
            "updates_run": meta["updates"],
            "training_time_s": meta["training_time_s"],
            "env_steps": meta["env_steps"],
        },
        "seeds": {"training": args.seed, "validation_workloads": data.val_seeds[0]},
        "metrics": {"validation": {"avg_jct_s": float(np.mean(val))}},
    }


def compat_batch(
    agent: Agent,
    data: Data,
    apps: Mapping[str, Application],
    args: Args,
    constants: EncodingConstants,
    rng: np.random.Generator,
    finished: list[float],
) -> tuple[list[Step], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """One update's ``pollux-compat`` episodes with their advantages and returns (the
    episodes' average JCTs appended to ``finished``)."""
    per_env, jcts = compat_rollout(agent, data, apps, args, constants, rng)
    finished.extend(jcts)
    if args.group_size > 1:
        return group_advantages(per_env, args.group_size, args.group_horizon_s)
    return gae_all(per_env, [0.0] * len(per_env), args)


def make_agent(args: Args) -> tuple[Agent, list[nn.Parameter]]:
    """The agent at its start (``init_key``: that heuristic's key as the linear term) and the
    parameters PPO moves (``linear_only``: all but the actor's MLP)."""
    if args.init_key:
        agent = agent_of(args.init_scale * initial_weights(args.init_key))
    else:
        agent = Agent(skip=args.skip)
    if args.linear_only and agent.skip is None:
        raise ValueError("--linear-only needs the linear term: --skip or --init-key")
    trained = [
        p
        for name, p in agent.named_parameters()
        if not (args.linear_only and name.startswith("actor."))
    ]
    return agent, trained


def train(args: Args, command: str = "") -> Path:
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    constants = EncodingConstants(
        use_estimates=args.use_estimates, las_threshold_gpu_s=args.las_threshold_gpu_s
    )
    t0 = time.monotonic()
    data = load_data(args)
    compat = Semantics(args.semantics) is Semantics.POLLUX_COMPAT
    apps = load_applications() if compat else None
    heur = heuristic_validation(args, data, apps)
    print(
        f"data {time.monotonic() - t0:.1f}s; validation heuristics:",
        {h: round(float(np.mean(v)), 1) for h, v in heur.items()},
        flush=True,
    )
    agent, trained = make_agent(args)
    opt = torch.optim.Adam(trained, lr=args.learning_rate, eps=1e-5)
    rng = np.random.default_rng(args.seed)
    envs = None if compat else Envs(args, data, constants)
    finished = envs.finished if envs is not None else []

    rigid_bar = rigid_bar_validation(args, data) if args.select_rigid else []

    def run_validation() -> tuple[float, list[float], list[float]]:
        return checkpoint_validation(agent, args, data, constants, apps, heur, rigid_bar)

    budget_s = args.total_minutes * 60.0
    start = time.monotonic()
    teacher: list[Step] = []
    if args.bc_episodes:
        teacher = (
            compat_teacher_steps(data, apps, args, constants, rng)
            if apps is not None
            else env_teacher_steps(envs, args)  # type: ignore[arg-type]
        )
        if agent.skip is not None and args.skip_epochs:
            # the linear term alone first: its likelihood is convex, so a teacher whose key
            # is linear in the features is fitted to the order before the MLP moves
            lin_opt = torch.optim.Adam(agent.skip.parameters(), lr=args.skip_learning_rate)
            loss = behaviour_cloning(agent, lin_opt, teacher, args, args.skip_epochs)
            print(f"linear bc loss {loss:.3f} ({time.monotonic() - start:.0f}s)", flush=True)
        bc_opt = torch.optim.Adam(agent.parameters(), lr=args.bc_learning_rate, eps=1e-5)
        loss = behaviour_cloning(agent, bc_opt, teacher, args)
        print(
            f"bc loss {loss:.3f} on {len(teacher)} steps ({time.monotonic() - start:.0f}s)",
            flush=True,
        )
        for r in range(args.dagger_rounds if apps is not None else 0):
            teacher += dagger_steps(agent, data, apps, args, constants, rng)  # type: ignore[arg-type]
            loss = behaviour_cloning(agent, bc_opt, teacher, args)
            print(
                f"dagger {r + 1} loss {loss:.3f} on {len(teacher)} steps "
                f"({time.monotonic() - start:.0f}s)",
                flush=True,
            )
    if args.keep_checkpoints:
        args.run_dir.mkdir(parents=True, exist_ok=True)
    m, val, rigid = run_validation()
    best = (m, 0, val, rigid, {k: v.clone() for k, v in agent.state_dict().items()})
    print(f"update 0 val {np.mean(val):.1f} select {m:.4f}", flush=True)
    update, env_steps = 0, 0
    while update < args.min_updates or time.monotonic() - start < budget_s:
        update += 1
        if envs is not None:
            per_env = rollout(agent, envs, args)
            flat, adv, ret = advantages(agent, envs, per_env, args)
            step_rng = envs.rng
        else:
            flat, adv, ret = compat_batch(agent, data, apps, args, constants, rng, finished)  # type: ignore[arg-type]
            step_rng = rng
        env_steps += len(flat)
        stats = ppo_update(agent, opt, flat, adv, ret, args, step_rng, teacher)
        if update % args.val_every == 0:
            m, val, rigid = run_validation()
            recent = float(np.mean(finished[-16:])) if finished else math.nan
            print(
                f"update {update} steps {env_steps} train_jct {recent:.1f} "
                f"val {np.mean(val):.1f} select {m:.4f} best {best[0]:.4f} {stats} "
                f"({time.monotonic() - start:.0f}s)",
                flush=True,
            )
            if args.keep_checkpoints:
                torch.save(
                    agent.state_dict(), args.run_dir / f"{args.name}-s{args.seed}-u{update}.pt"
                )
            if m < best[0]:
                best = (
                    m,
                    update,
                    val,
                    rigid,
                    {k: v.clone() for k, v in agent.state_dict().items()},
                )
    training_time = time.monotonic() - start
    agent.load_state_dict(best[4])
    meta = {
        "agent": agent,
        "command": command,
        "best_update": best[1],
        "updates": update,
        "training_time_s": round(training_time, 1),
        "env_steps": env_steps,
    }
    card = make_card(args, data, constants, best[2], heur, meta)
    if args.select_rigid:
        card["training"]["validation"]["philly_rigid"] = {
            "selection": "the checkpoint kept minimises policy_ratio_to_tiresias + ratio_to_bar",
            "bar": RIGID_BAR,
            "policy_per_workload": best[3],
            "bar_per_workload": rigid_bar,
            "ratio_to_bar": mean_ratio(best[3], rigid_bar),
        }
    write_model(agent, args.out, card)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    torch.save(agent.state_dict(), args.run_dir / f"{args.name}-s{args.seed}.pt")
    print(f"wrote {args.out} (best update {best[1]}, select {best[0]:.4f})", flush=True)
    return args.out


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv, prog="python -m training.gpu_ppo")
    given = sys.argv[1:] if argv is None else list(argv)
    train(args, "python -m training.gpu_ppo " + " ".join(given))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
