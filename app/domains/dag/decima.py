"""Decima's network (spark-sched-sim's architecture, spec 4.2) as a dense numpy forward pass, and
the policy that runs it.

Observation (feature schema ``dag-v1``, spec 7.3), padded to J jobs x S active stages:

* ``x[j, s]``: (commit cap_j / N, +1 if j is the source job else -1, supply_j / N,
  unlaunched / 200, unlaunched x duration estimate (ms) / 1e5); cap_j = min(max(N - supply_j, 0),
  num_source), the source job's cap = num_source;
* ``adj[j, v, c] = 1`` iff active stage c is a child of active stage v;
* ``stage_mask`` (active stage), ``select_mask`` (selectable), ``job_mask``, ``exec_mask[j, k]``
  (k + 1 <= cap_j).

Message passing: h_init = prep(x); leaves (no active child) h = update(h_init), every other stage
h = h_init + update(sum over children of msg(h_child)), computed with K synchronous dense
iterations (exact once K >= the largest height); when the observation has no edge at all,
h = h_init (the port's rule).  DAG summary = sum over active stages of dag([x, h]); global =
sum over jobs of glob(h_dag).  Stage logits = stage([x, h, h_dag, h_glob]) over selectable stages;
executor logits for job j and k = 0..N-1: exec([x_j[:3], h_dag_j, h_glob, k / N]); the action
commits k + 1 executors.  Masked logits are ``MASKED_LOGIT`` (finite, so an all-masked row is
not NaN).  GNN MLPs use LeakyReLU(0.2), policy MLPs tanh, no activation on outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

import numpy as np
import numpy.typing as npt

from app.domains.dag.policy import Action, JobView, RoundView

__all__ = [
    "MASKED_LOGIT",
    "DecimaObs",
    "DecimaPolicy",
    "DecimaWeights",
    "EncodeCache",
    "Scorer",
    "StagedScorer",
    "choice_mask",
    "decima_forward",
    "encode",
]

F32 = npt.NDArray[np.float32]
B = npt.NDArray[np.bool_]
MASKED_LOGIT: Final = -1e9
NUM_TASKS_SCALE: Final = 200.0
WORK_SCALE: Final = 1e5
_LEAK: Final = 0.2

_MLPS: Final = {
    "prep": "encoder.node_encoder.mlp_prep",
    "msg": "encoder.node_encoder.mlp_msg",
    "update": "encoder.node_encoder.mlp_update",
    "dag": "encoder.dag_encoder.mlp",
    "glob": "encoder.global_encoder.mlp",
    "stage": "stage_policy_network.mlp_score",
    "exec": "exec_policy_network.mlp_score",
}


@dataclass(frozen=True, slots=True)
class DecimaWeights:
    """The 42 tensors of the shipped state dict, by their state-dict names."""

    tensors: Mapping[str, F32]

    def layers(self, mlp: str) -> list[tuple[F32, F32]]:
        prefix = _MLPS[mlp]
        return [
            (self.tensors[f"{prefix}.{i}.weight"], self.tensors[f"{prefix}.{i}.bias"])
            for i in (0, 2, 4)
        ]


def _mlp(layers: list[tuple[F32, F32]], x: F32, act: Literal["leaky", "tanh"]) -> F32:
    for i, (w, b) in enumerate(layers):
        x = (x @ w.T + b).astype(np.float32)
        if i < len(layers) - 1:
            x = np.where(x > 0, x, _LEAK * x) if act == "leaky" else np.tanh(x)
    return x


@dataclass(frozen=True, slots=True)
class DecimaObs:
    x: F32  # [J, S, 5]
    adj: F32  # [J, S, S]
    stage_mask: B  # [J, S]
    select_mask: B  # [J, S]
    job_mask: B  # [J]
    exec_mask: B  # [J, E]
    #: (view job index, view stage index) of each padded slot, (-1, -1) for padding
    slots: tuple[tuple[tuple[int, int], ...], ...] = field(default=())
    #: the largest stage height (edges to a leaf) among active stages
    height: int = 0


@dataclass(frozen=True, slots=True)
class _JobBlock:
    """The parts of one job's observation that only its own view determines (``x``'s columns
    2-4, its adjacency, which stages are selectable, their view indices, its height)."""

    job: JobView
    n: int
    x: F32  # [k, 5], columns 0 and 1 left for the step
    adj: F32  # [k, k]
    select: B  # [k]
    indices: tuple[int, ...]
    height: int


def _block(job: JobView, n: int) -> _JobBlock:
    active = [s for s in job.stages if not s.finished]
    k = len(active)
    x = np.zeros((k, 5), np.float32)
    adj = np.zeros((k, k), np.float32)
    select = np.zeros(k, bool)
    pos = {s.index: i for i, s in enumerate(active)}
    kids: list[list[int]] = [[] for _ in active]
    for i, st in enumerate(active):
        select[i] = st.selectable
        x[i, 2:] = (
            job.supply / n,
            st.unlaunched / NUM_TASKS_SCALE,
            st.unlaunched * st.duration_ms / WORK_SCALE,
        )
        for c in st.children:
            if c in pos:
                adj[i, pos[c]] = 1.0
                kids[i].append(pos[c])
    return _JobBlock(job, n, x, adj, select, tuple(s.index for s in active), _longest_path(kids))


class EncodeCache:
    """The per-job blocks of the last observation encoded, reused for a job whose view is the
    very same object (a DAG round keeps the views of the DAGs a step did not grant to). It holds
    the jobs of one observation at a time, and only by identity: a view rebuilt equal is
    encoded again."""

    __slots__ = ("_blocks",)

    def __init__(self) -> None:
        self._blocks: dict[int, _JobBlock] = {}

    def blocks(self, jobs: tuple[JobView, ...], n: int) -> list[_JobBlock]:
        found = self._blocks
        out = []
        for job in jobs:
            b = found.get(id(job))
            out.append(b if b is not None and b.job is job and b.n == n else _block(job, n))
        # each block holds its view, so an id here is never a later object's
        self._blocks = {id(b.job): b for b in out}
        return out

    def clear(self) -> None:
        self._blocks = {}


def encode(view: RoundView, cache: EncodeCache | None = None) -> DecimaObs:
    """The padded ``dag-v1`` observation of a round (active = unfinished stages); ``cache``
    reuses the blocks of jobs whose views are the same objects as in the last call."""
    n = view.num_executors
    jobs = view.jobs
    blocks = cache.blocks(jobs, n) if cache is not None else [_block(job, n) for job in jobs]
    num_j = max(1, len(jobs))
    num_s = max([1, *(len(b.indices) for b in blocks)])
    x = np.zeros((num_j, num_s, 5), np.float32)
    adj = np.zeros((num_j, num_s, num_s), np.float32)
    stage_mask = np.zeros((num_j, num_s), bool)
    select_mask = np.zeros((num_j, num_s), bool)
    job_mask = np.zeros(num_j, bool)
    exec_mask = np.zeros((num_j, n), bool)
    slots: list[tuple[tuple[int, int], ...]] = []
    height = 0
    for j, (job, b) in enumerate(zip(jobs, blocks, strict=True)):
        job_mask[j] = True
        if j == view.source_job:
            cap = view.num_source
        else:
            cap = min(max(n - job.supply, 0), view.num_source)
        exec_mask[j, : max(0, min(cap, n))] = True
        k = len(b.indices)
        if k:
            x[j, :k] = b.x
            x[j, :k, 0] = cap / n
            x[j, :k, 1] = 1.0 if j == view.source_job else -1.0
            adj[j, :k, :k] = b.adj
            stage_mask[j, :k] = True
            select_mask[j, :k] = b.select
        slots.append(tuple((j, i) for i in b.indices))
        height = max(height, b.height)
    return DecimaObs(x, adj, stage_mask, select_mask, job_mask, exec_mask, tuple(slots), height)


def _height(adj: F32, count: int) -> int:
    """The longest path (in edges) of the graph ``adj[:count, :count]``."""
    return _longest_path([np.flatnonzero(adj[v, :count]).tolist() for v in range(count)])


def _longest_path(kids: list[list[int]]) -> int:
    """The longest path (in edges) of the DAG whose node ``v`` has children ``kids[v]``;
    iterative, so a DAG of any depth is fine."""
    memo: dict[int, int] = {}
    for root in range(len(kids)):
        stack = [root]
        while stack:
            v = stack[-1]
            if v in memo:
                stack.pop()
                continue
            todo = [c for c in kids[v] if c not in memo]
            if todo:
                stack.extend(todo)
                continue
            memo[v] = 1 + max([memo[c] for c in kids[v]]) if kids[v] else 0
            stack.pop()
    return max(memo.values(), default=0)


def decima_forward(
    w: DecimaWeights, obs: DecimaObs, iterations: int | None = None
) -> tuple[F32, F32]:
    """(stage_logits [J, S], exec_logits [J, E]) of one observation."""
    k_iter = obs.height if iterations is None else iterations
    x, adj = obs.x, obs.adj
    n = obs.exec_mask.shape[1]
    h_init = _mlp(w.layers("prep"), x, "leaky")
    nonleaf = (adj.sum(-1) > 0)[..., None]
    h = np.where(nonleaf, np.float32(0.0), _mlp(w.layers("update"), h_init, "leaky"))
    for _ in range(k_iter):
        agg = (adj @ _mlp(w.layers("msg"), h, "leaky")).astype(np.float32)
        h = np.where(nonleaf, h_init + _mlp(w.layers("update"), agg, "leaky"), h)
    if not adj.any():
        h = h_init
    smask = obs.stage_mask[..., None]
    h_dag = np.where(smask, _mlp(w.layers("dag"), np.concatenate([x, h], -1), "leaky"), 0).sum(1)
    h_dag = h_dag.astype(np.float32)
    g = _mlp(w.layers("glob"), h_dag, "leaky")
    h_glob = np.where(obs.job_mask[:, None], g, 0).sum(0).astype(np.float32)
    num_j, num_s = obs.stage_mask.shape
    stage_in = np.concatenate(
        [
            x,
            h,
            np.broadcast_to(h_dag[:, None, :], (num_j, num_s, h_dag.shape[-1])),
            np.broadcast_to(h_glob, (num_j, num_s, h_glob.shape[-1])),
        ],
        -1,
    )
    stage_logits = _mlp(w.layers("stage"), stage_in, "tanh")[..., 0]
    stage_logits = np.where(obs.select_mask, stage_logits, np.float32(MASKED_LOGIT))
    levels = (np.arange(n, dtype=np.float32) / np.float32(n))[None, :, None]
    job_in = np.concatenate([x[:, 0, :3], h_dag], -1)
    exec_in = np.concatenate(
        [
            np.broadcast_to(job_in[:, None, :], (num_j, n, job_in.shape[-1])),
            np.broadcast_to(h_glob, (num_j, n, h_glob.shape[-1])),
            np.broadcast_to(levels, (num_j, n, 1)),
        ],
        -1,
    )
    exec_logits = _mlp(w.layers("exec"), exec_in, "tanh")[..., 0]
    exec_logits = np.where(obs.exec_mask, exec_logits, np.float32(MASKED_LOGIT))
    return stage_logits.astype(np.float32), exec_logits.astype(np.float32)


def choice_mask(obs: DecimaObs) -> B:
    """Selectable stages of jobs with at least one allowed executor count ``[J, S]``."""
    has_row = np.asarray(obs.exec_mask.any(axis=-1), dtype=bool)
    out: B = obs.select_mask & has_row[:, None]
    return out


def _softmax(logits: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    z = np.exp(logits - logits.max())
    out: npt.NDArray[np.float64] = z / z.sum()
    return out


#: the network's logits of one observation: (stage_logits [J, S], exec_logits [J, E])
Scorer = Callable[[DecimaObs], tuple[F32, F32]]


class StagedScorer(Protocol):
    """The two heads scored apart: :meth:`stage` gives the stage logits ``[J, S]`` of every job
    (and what the executor head needs of that pass), :meth:`exec_row` the executor logits
    ``[E]`` of job row ``j`` alone. Equal to a full :data:`Scorer`'s outputs (row ``j`` of its
    executor logits), at the cost of one executor row instead of ``J``: in a large cluster
    (``E`` executors) the executor head over every job is most of a full pass."""

    def stage(self, obs: DecimaObs) -> tuple[F32, object]: ...

    def exec_row(self, obs: DecimaObs, j: int, context: object) -> F32: ...


@dataclass(slots=True)
class DecimaPolicy:
    """Decima's two-step action: a stage (softmax over selectable stages of jobs with an allowed
    executor count), then k + 1 executors from the chosen job's row.  ``mode`` ``sample`` draws
    from the softmax with a generator seeded by ``seed`` (reset per episode and per
    :func:`~app.domains.dag.decision.decide` call), ``argmax`` is greedy (ties: lowest index).
    The logits come from ``scorer`` when given (an ONNX session, say), else from
    :func:`decima_forward` on ``weights``; exactly one of the two is needed."""

    weights: DecimaWeights | None = None
    mode: Literal["sample", "argmax"] = "sample"
    seed: int = 0
    name: str = "decima"
    scorer: Scorer | None = None
    #: the same model's heads scored apart (used by :meth:`choose` when given)
    staged: StagedScorer | None = None
    rng: np.random.Generator = field(init=False)
    _encoded: EncodeCache = field(init=False, default_factory=EncodeCache)

    def __post_init__(self) -> None:
        if (self.weights is None) == (self.scorer is None):
            raise ValueError("DecimaPolicy needs exactly one of weights and scorer")
        self.rng = np.random.default_rng(self.seed)

    def reset(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self._encoded.clear()

    def _pick(self, logits: npt.NDArray[np.float64]) -> int:
        if self.mode == "argmax":
            return int(np.argmax(logits))
        p = _softmax(logits)
        i = int(np.searchsorted(np.cumsum(p), self.rng.random(), side="right"))
        return min(i, p.size - 1)

    def logits(self, obs: DecimaObs) -> tuple[F32, F32]:
        if self.scorer is not None:
            return self.scorer(obs)
        assert self.weights is not None
        return decima_forward(self.weights, obs)

    def stage_logits(self, obs: DecimaObs) -> F32:
        """The stage logits alone (``[J, S]``)."""
        if self.staged is not None:
            return self.staged.stage(obs)[0]
        return self.logits(obs)[0]

    def choose(self, view: RoundView) -> Action | None:
        obs = encode(view, self._encoded)
        allowed = choice_mask(obs)
        if view.num_source <= 0 or not allowed.any():
            return None
        if self.staged is not None:
            stage_logits, context = self.staged.stage(obs)
        else:
            stage_logits, exec_logits = self.logits(obs)
        cand = np.flatnonzero(allowed.reshape(-1))
        i = cand[self._pick(stage_logits.reshape(-1)[cand].astype(np.float64))]
        j, s = divmod(int(i), obs.select_mask.shape[1])
        row = np.flatnonzero(obs.exec_mask[j])
        if self.staged is not None:
            exec_row = self.staged.exec_row(obs, j, context)
        else:
            exec_row = exec_logits[j]
        k = row[self._pick(exec_row[row].astype(np.float64))]
        job_idx, stage_idx = obs.slots[j][s]
        cap = int(row.size)
        return Action(job_idx, stage_idx, int(k) + 1, cap)
