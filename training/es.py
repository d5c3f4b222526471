"""Train a *ranking* HPC policy with evolution strategies on the simulator's engine.

The policy is a per-job scorer (RLScheduler's shared "kernel", A.8) used as a queue order: at each
decision the service scores every pending job once from the decision's first view and walks the
jobs by descending score with its own backfilling (``decision_mode: rank``, ADR 0065).  That is
exactly what :func:`app.domains.hpc.simulate.simulate_workload` replays through the service's
EASY rules (ADR 0093), at heuristic speed, so the objective can be the
metric itself: the average bounded slowdown of whole 1024-job windows, relative to the best
heuristic on the same windows.  Evolution strategies (Salimans et al. 2017, OpenAI-ES: antithetic
Gaussian perturbations, centred-rank fitness shaping, Adam) optimise it without gradients through
the simulator; every candidate is judged on the same windows (common random numbers).

Network (per job row of ``obs[B, N, F]``, F = the encoder's 13 features)::

    score = w3 . tanh(W2 tanh(W1 x + b1) + b2) + b3 + v . x

The linear skip ``v`` starts as SJF (``-walltime``), the MLP's output layer at zero, so the first
candidate is SJF and the search moves away from it only where the windows say so.

Training windows are disjoint from the evaluation windows (``training.ppo.TrainingData``: the
paper's seed-1 protocol over the whole trace and over the first 10,000 jobs are excluded).
Checkpoint selection uses fixed validation windows drawn from the training ranges.

    kairos train --algo es --backfill easy --trace data/lublin_256.swf.gz ... \\
        --out models/hpc-rank/1 --time-budget-s 1500
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION, NUM_FEATURES
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.metrics import avg_bounded_slowdown
from app.domains.hpc.rlscheduler import simulate_sequence
from app.domains.hpc.simulate import simulate_workload as simulate_workload_fast
from app.domains.hpc.simulate import workload_from_trace
from app.domains.hpc.swf import SwfTrace, load_swf
from app.domains.hpc.types import Backfill
from app.policy.onnx_policy import describe_signature

# the scorer lives where torch is not needed (site tuning); re-exported for training's users
from app.tuning.scorer import OPSET, NumpyRanker, Shapes, build_onnx, initial_theta
from app.tuning.scorer import load_init_params as load_init_params
from app.tuning.scorer import shrink_toward_sjf as shrink_toward_sjf
from app.tuning.scorer import theta_from_onnx as theta_from_onnx
from sim.progress import Progress
from training.ppo import complement, evaluation_windows, merge_ranges, training_starts

HEURISTICS: tuple[str, ...] = ("fcfs", "sjf", "wfp3", "unicep", "f1")


@dataclass
class EsArgs:
    exp_name: str = "hpc-rank"
    """name of this experiment (the run folder is ``<run_dir>/<exp_name>__s<seed>__<time>``)"""
    seed: int = 0
    """seed of the parameter initialisation, the perturbations and the window sampler"""
    trace: tuple[str, ...] = ("data/lublin_256.swf.gz", "data/lublin_256_new2.swf.gz")
    """SWF traces to train on; every generation draws ``windows_per_trace`` windows of each"""
    backfill: Literal["easy", "none"] = "easy"
    """backfilling of the simulated cluster (train one model per mode)"""
    semantics: Literal["kairos", "rlscheduler"] = "kairos"
    """simulator: the service's decision code (``simulate_workload``, the default) or RLScheduler's
    (``app.domains.hpc.rlscheduler``: the model picks each job there, for the paper's comparison)"""
    episode_length: int = 1024
    """jobs per training window (the evaluation protocol's length)"""
    eval_seed: int = 1
    """seed of the evaluation protocol whose windows are excluded from training"""
    eval_sequences: int = 10
    """number of evaluation windows excluded from training"""
    eval_slices: tuple[int, ...] = (0, 10_000)
    """exclude the protocol's windows drawn over the first K jobs for each K (0: all jobs)"""

    hidden: tuple[int, int] = (16, 16)
    """hidden sizes of the scorer"""
    pairs: int = 12
    """antithetic pairs per generation (population = 2 x pairs)"""
    windows_per_trace: int = 2
    """training windows per trace per generation (shared by the whole population)"""
    sigma: float = 0.05
    """perturbation scale"""
    learning_rate: float = 0.03
    """Adam step size on the parameters"""
    weight_decay: float = 0.001
    """L2 pull towards zero of the MLP weights (not of the linear skip)"""
    worst_weight: float = 0.0
    """cost = (1 - w) * mean over traces + w * worst trace (w > 0 keeps every trace improving)"""
    window_loss_weight: float = 0.0
    """add this times the mean over windows of ``max(0, log(bsld / best heuristic's bsld))``:
    a price on every window the candidate loses, so wins on some windows cannot pay for large
    losses on others (the evaluation's few windows then rarely land above the heuristic)"""
    window_sampling: Literal["uniform", "reference"] = "uniform"
    """how training windows are drawn: ``uniform`` over the allowed starts; ``reference``, in
    proportion to the best heuristic's bsld on them (importance sampling: the protocol's ratio
    of sums weighs each window by that bsld, so congested windows are drawn as often as they
    weigh; each trace's cost is then the log of the mean per-window ratio, which estimates the
    same ratio of sums with less variance)"""
    sampling_stride: int = 64
    """with ``window_sampling=reference``: the grid of candidate starts (every this many allowed
    starts), each scored once by every heuristic before training"""
    init_params: str | None = None
    """start from these parameters instead of SJF: a run's ``best.npz``, or a shipped ranking
    model (its folder or its ``policy.onnx``, e.g. ``models/hpc-kernel/3`` to tune the default
    to a site's own trace); the hidden sizes must match"""
    generations: int = 60
    """upper bound on generations"""
    time_budget_s: float = 0.0
    """stop after this many wall-clock seconds (0: no limit)"""
    workers: int = 2
    """simulator processes"""

    val_windows_per_trace: int = 4
    """fixed validation windows per trace for checkpoint selection (from the training ranges, or
    from the held-out part with ``val_holdout``)"""
    val_holdout: float = 0.0
    """hold out the last fraction of each trace's allowed window starts for validation: training
    windows then end before the first held-out job, so checkpoint selection sees jobs training
    never saw (0: validation windows come from the training ranges themselves; a trace too short
    to split keeps shared windows, as the metadata says)"""
    val_split: Literal["tail", "segments"] = "tail"
    """where ``val_holdout`` takes its validation windows: ``tail``, the last fraction of the
    trace's allowed starts; ``segments``, the last fraction of every stretch of jobs between
    two evaluation windows that can hold both a training and a validation window, so that
    validation covers the same periods of the trace as the evaluation (a trace whose load
    changes over time is then not validated on its last weeks alone)"""
    val_every: int = 5
    """validate the mean parameters every this many generations"""
    run_dir: str = "runs"
    """where run folders go"""
    progress: bool = False
    """print one line per generation (a progress bar is drawn on stderr whenever it is a
    terminal, never in CI or a pipe)"""

    out: str | None = None
    """export the best parameters here (``policy.onnx`` + ``card.json``)"""
    name: str = "hpc-rank"
    """policy name in the card and the ONNX metadata"""
    version: str = "1"
    """policy version in the card and the ONNX metadata"""

    started: float = field(default=0.0, init=False)


# ----------------------------------------------------------------------------------------------
# windows and the simulator pool
# ----------------------------------------------------------------------------------------------


@dataclass
class Windows:
    """Allowed training starts per trace (disjoint from the evaluation windows), and the
    validation starts (held out from training when ``val_holdout`` > 0 and the trace is long
    enough; otherwise the same starts)."""

    paths: list[str]
    n_jobs: list[int]
    excluded: list[list[tuple[int, int]]]
    starts: list[npt.NDArray[np.int64]]
    val_starts: list[npt.NDArray[np.int64]]
    held_out: list[bool]
    #: jobs per window
    length: int = 1024

    @classmethod
    def load(cls, args: EsArgs) -> Windows:
        n_jobs, excluded, starts, val_starts, held_out = [], [], [], [], []
        for path in args.trace:
            n = load_swf(path).n_jobs
            wins = {
                w
                for k in args.eval_slices
                for w in evaluation_windows(
                    min(k, n) if k > 0 else n, args.eval_seed, args.eval_sequences, 1024
                )
            }
            ranges = merge_ranges([(w, w + 1024) for w in wins])
            allowed = training_starts(n, args.episode_length, ranges)
            if len(allowed) == 0:
                raise ValueError(f"{path}: no training window is disjoint from the evaluation")
            split = split_segments if args.val_split == "segments" else split_holdout
            train, val = split(allowed, args.episode_length, args.val_holdout)
            n_jobs.append(n)
            excluded.append(ranges)
            starts.append(train)
            val_starts.append(val)
            held_out.append(val is not train)
        return cls(
            list(args.trace), n_jobs, excluded, starts, val_starts, held_out, args.episode_length
        )

    def sample(self, rng: np.random.Generator, per_trace: int) -> list[tuple[int, int]]:
        """Training windows: ``per_trace`` starts of every trace."""
        return [
            (k, int(rng.choice(s))) for k, s in enumerate(self.starts) for _ in range(per_trace)
        ]

    def sample_validation(self, rng: np.random.Generator, per_trace: int) -> list[tuple[int, int]]:
        """Validation windows: ``per_trace`` held-out starts of every trace (without a hold-out,
        exactly what :meth:`sample` draws from the same generator)."""
        return [
            (k, int(rng.choice(s))) for k, s in enumerate(self.val_starts) for _ in range(per_trace)
        ]

    def describe(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path, n, ranges, starts, val, held in zip(
            self.paths,
            self.n_jobs,
            self.excluded,
            self.starts,
            self.val_starts,
            self.held_out,
            strict=True,
        ):
            if held:  # the jobs the windows cover: none is in both
                train_ranges = covered(starts, self.length)
                val_ranges = covered(val, self.length)
            else:
                train_ranges, val_ranges = complement(ranges, n), []
            out.append(
                {
                    "trace": path,
                    "jobs": n,
                    "excluded_job_ranges": [list(r) for r in ranges],
                    "training_job_ranges": [list(r) for r in train_ranges],
                    "window_starts": len(starts),
                    "validation_held_out": held,
                    "validation_first_start": int(val[0]) if held else None,
                    "validation_job_ranges": [list(r) for r in val_ranges],
                }
            )
        return out


def covered(starts: npt.NDArray[np.int64], length: int) -> list[tuple[int, int]]:
    """The job ranges that windows ``[s, s + length)`` for ``s`` in ``starts`` cover, merged."""
    return merge_ranges([(int(s), int(s) + length) for s in starts])


def split_segments(
    allowed: npt.NDArray[np.int64], length: int, fraction: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(training starts, validation starts)`` held out segment by segment.

    A segment is a maximal run of consecutive allowed starts (the jobs between two evaluation
    windows).  In every segment whose jobs can hold two disjoint windows, its last
    ``max(length, fraction * jobs)`` jobs validate and training windows end before them; shorter
    segments only train.  No job is in both a training and a validation window.  Returns
    ``(allowed, allowed)`` (the same object) when ``fraction`` is 0 or no segment splits.
    """
    if fraction <= 0.0 or len(allowed) == 0:
        return allowed, allowed
    breaks = np.flatnonzero(np.diff(allowed) != 1) + 1
    train_parts: list[npt.NDArray[np.int64]] = []
    val_parts: list[npt.NDArray[np.int64]] = []
    for run in np.split(allowed, breaks):
        jobs = int(run[-1]) + length - int(run[0])
        if jobs < 2 * length:
            train_parts.append(run)
            continue
        cut = int(run[-1]) + length - max(length, math.ceil(fraction * jobs))
        train_parts.append(run[run + length <= cut])
        val_parts.append(run[run >= cut])
    if not val_parts:
        return allowed, allowed
    return np.concatenate(train_parts), np.concatenate(val_parts)


def split_holdout(
    allowed: npt.NDArray[np.int64], length: int, fraction: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(training starts, validation starts)``: the last ``fraction`` of ``allowed`` validates,
    and a training window ``[s, s + length)`` must end at or before the first validation start,
    so no job is in both.  Returns ``(allowed, allowed)`` (the same object) when ``fraction`` is
    0 or either side would be empty."""
    if fraction <= 0.0:
        return allowed, allowed
    cut = int(allowed[min(len(allowed) - 1, math.floor(len(allowed) * (1.0 - fraction)))])
    val = allowed[allowed >= cut]
    train = allowed[allowed + length <= cut]
    if len(train) == 0 or len(val) == 0:
        return allowed, allowed
    return train, val


_traces: list[SwfTrace] = []
_shapes: Shapes | None = None


def _init_worker(paths: Sequence[str], shapes: Shapes) -> None:
    global _traces, _shapes
    _traces = [load_swf(p) for p in paths]
    _shapes = shapes


#: (heuristic name or parameters, trace index, start, length, "backfill/semantics")
Task = tuple[npt.NDArray[np.float64] | str, int, int, int, str]


def _bsld(task: Task) -> float:
    policy_spec, trace, start, length, mode = task
    backfill, semantics = mode.split("/")
    assert _shapes is not None
    ranker = None if isinstance(policy_spec, str) else NumpyRanker(_shapes, policy_spec)
    if semantics == "rlscheduler":
        res = simulate_sequence(
            _traces[trace], start, length, ranker or str(policy_spec), backfill=backfill == "easy"
        )
        return avg_bounded_slowdown(res)
    policy: Any = ranker if ranker is not None else get_heuristic(str(policy_spec))
    workload = workload_from_trace(_traces[trace], start, length)
    return avg_bounded_slowdown(simulate_workload_fast(workload, policy, Backfill(backfill)))


class Evaluator:
    """Runs simulations in a process pool (or inline with one worker)."""

    def __init__(self, args: EsArgs, shapes: Shapes) -> None:
        self.args = args
        self.pool: Any = None
        if args.workers > 1:
            ctx = mp.get_context("fork" if sys.platform == "linux" else "spawn")
            self.pool = ctx.Pool(args.workers, _init_worker, (list(args.trace), shapes))
        else:
            _init_worker(list(args.trace), shapes)

    def run(self, tasks: list[Task]) -> list[float]:
        if self.pool is None:
            return [_bsld(t) for t in tasks]
        chunk = max(1, len(tasks) // (4 * self.args.workers))
        return list(self.pool.map(_bsld, tasks, chunksize=chunk))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool.join()


def relative_cost(
    values: Sequence[float],
    reference: Sequence[float],
    traces: Sequence[int],
    worst_weight: float = 0.0,
    window_loss_weight: float = 0.0,
    importance: bool = False,
) -> float:
    """``(1 - w) * mean + w * max`` over traces of ``log(sum of the candidate's bsld / sum of
    the reference's)``, plus ``window_loss_weight`` times the mean over windows of
    ``max(0, log(candidate / reference))``.

    Summing per trace matches the protocol's mean over windows (heavy windows weigh more);
    the log ratio puts every trace on the same scale; ``worst_weight`` w > 0 stops one trace's
    gain from paying for another's loss, ``window_loss_weight`` one window's for another's.
    ``importance``: the windows were drawn in proportion to ``reference``, so the ratio of sums
    over all windows is estimated by the mean of the per-window ratios.
    """
    out = []
    for k in sorted(set(traces)):
        idx = [i for i, t in enumerate(traces) if t == k]
        if importance:
            out.append(math.log(float(np.mean([values[i] / reference[i] for i in idx]))))
        else:
            out.append(math.log(sum(values[i] for i in idx) / sum(reference[i] for i in idx)))
    cost = (1.0 - worst_weight) * np.mean(out) + worst_weight * np.max(out)
    if window_loss_weight:
        losses = [max(0.0, math.log(v / r)) for v, r in zip(values, reference, strict=True)]
        cost += window_loss_weight * np.mean(losses)
    return float(cost)


def best_reference(
    evaluator: Evaluator, windows: list[tuple[int, int]], length: int, mode: str
) -> tuple[list[float], dict[int, str]]:
    """Per window, the bsld of the heuristic that is best on its trace (over these windows)."""
    tasks: list[Task] = [(h, k, s, length, mode) for h in HEURISTICS for k, s in windows]
    values = evaluator.run(tasks)
    per = {h: values[i * len(windows) : (i + 1) * len(windows)] for i, h in enumerate(HEURISTICS)}
    ref = [0.0] * len(windows)
    best: dict[int, str] = {}
    for k in sorted({k for k, _ in windows}):
        idx = [i for i, (t, _) in enumerate(windows) if t == k]
        name = min(HEURISTICS, key=lambda h: sum(per[h][i] for i in idx))
        best[k] = name
        for i in idx:
            ref[i] = per[name][i]
    return ref, best


@dataclass
class ReferenceSampler:
    """Training windows drawn in proportion to the best heuristic's bsld on them.

    Every ``stride``-th allowed start of every trace is replayed once by every heuristic; the
    heuristic best on a trace's whole grid is its reference, and a window's draw probability
    within its trace is its reference bsld over the trace's total.
    """

    grid: list[list[int]]
    reference: list[npt.NDArray[np.float64]]
    best: dict[int, str]

    @classmethod
    def build(
        cls, evaluator: Evaluator, windows: Windows, stride: int, length: int, mode: str
    ) -> ReferenceSampler:
        cells = [(k, int(s)) for k, starts in enumerate(windows.starts) for s in starts[::stride]]
        ref, best = best_reference(evaluator, cells, length, mode)
        grid: list[list[int]] = [[] for _ in windows.starts]
        values: list[list[float]] = [[] for _ in windows.starts]
        for (k, s), r in zip(cells, ref, strict=True):
            grid[k].append(s)
            values[k].append(r)
        return cls(grid, [np.asarray(v, dtype=np.float64) for v in values], best)

    def sample(
        self, rng: np.random.Generator, per_trace: int
    ) -> tuple[list[tuple[int, int]], list[float]]:
        """``per_trace`` windows of every trace and their reference bsld."""
        batch: list[tuple[int, int]] = []
        ref: list[float] = []
        for k, (starts, values) in enumerate(zip(self.grid, self.reference, strict=True)):
            for i in rng.choice(len(starts), size=per_trace, p=values / values.sum()):
                batch.append((k, starts[int(i)]))
                ref.append(float(values[int(i)]))
        return batch, ref

    def describe(self) -> dict[str, Any]:
        return {
            "grid_windows": [len(g) for g in self.grid],
            "reference_heuristic": {str(k): h for k, h in self.best.items()},
        }


def centred_ranks(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    return ranks / (len(x) - 1) - 0.5


def es_gradient(
    eps: npt.NDArray[np.float64], costs: npt.NDArray[np.float64], sigma: float
) -> npt.NDArray[np.float64]:
    """OpenAI-ES estimate of the cost's gradient from antithetic pairs.

    ``costs`` holds the ``+eps`` candidates first, then the ``-eps`` ones; fitness shaping by
    centred ranks makes the step invariant to the cost's scale and robust to outliers.
    """
    pairs = len(eps)
    shaped = centred_ranks(costs)
    weights = shaped[:pairs] - shaped[pairs:]
    return np.asarray((weights @ eps) / (2 * pairs * sigma), dtype=np.float64)


# ----------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------


def train(args: EsArgs) -> tuple[Path, dict[str, Any]]:
    """Run ES; returns the run folder (``best.npz`` + ``meta.json``) and the metadata."""
    args.started = time.time()
    shapes = Shapes(NUM_FEATURES, args.hidden)
    run_path = Path(args.run_dir) / f"{args.exp_name}__s{args.seed}__{int(args.started)}"
    run_path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    windows = Windows.load(args)
    val_rng = np.random.default_rng(args.seed + 10_007)
    val_windows = windows.sample_validation(val_rng, args.val_windows_per_trace)
    evaluator = Evaluator(args, shapes)
    length, mode = args.episode_length, f"{args.backfill}/{args.semantics}"
    theta = initial_theta(shapes, args.seed)
    if args.init_params is not None:
        theta = load_init_params(shapes, args.init_params)
    decay = shapes.decayed()
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    beta1, beta2 = 0.9, 0.999
    history: list[dict[str, Any]] = []
    bar = Progress(args.generations, "es", "gen")  # drawn only on a terminal
    try:
        val_ref, val_best = best_reference(evaluator, val_windows, length, mode)
        val_traces = [k for k, _ in val_windows]

        def validate(params: npt.NDArray[np.float64]) -> tuple[float, list[float]]:
            tasks: list[Task] = [(params, k, s, length, mode) for k, s in val_windows]
            values = evaluator.run(tasks)
            cost = relative_cost(
                values, val_ref, val_traces, args.worst_weight, args.window_loss_weight
            )
            return cost, values

        importance = args.window_sampling == "reference"
        sampler = (
            ReferenceSampler.build(evaluator, windows, args.sampling_stride, length, mode)
            if importance
            else None
        )
        best_cost, best_values = validate(theta)
        best_theta, best_gen = theta.copy(), 0
        _log(args, 0, {"val_cost": best_cost}, bar)
        for gen in range(1, args.generations + 1):
            if args.time_budget_s and time.time() - args.started > args.time_budget_s:
                break
            if sampler is not None:
                batch, ref = sampler.sample(rng, args.windows_per_trace)
            else:
                batch = windows.sample(rng, args.windows_per_trace)
                ref, _ = best_reference(evaluator, batch, length, mode)
            traces = [k for k, _ in batch]
            eps = rng.standard_normal((args.pairs, theta.size))
            candidates = [theta + args.sigma * e for e in eps]
            candidates += [theta - args.sigma * e for e in eps]
            tasks: list[Task] = [(c, k, s, length, mode) for c in candidates for k, s in batch]
            values = evaluator.run(tasks)
            w = len(batch)
            costs = np.array(
                [
                    relative_cost(
                        values[i * w : (i + 1) * w],
                        ref,
                        traces,
                        args.worst_weight,
                        args.window_loss_weight,
                        importance,
                    )
                    for i in range(len(candidates))
                ]
            )
            grad = es_gradient(eps, costs, args.sigma) + args.weight_decay * theta * decay
            m = beta1 * m + (1 - beta1) * grad
            v = beta2 * v + (1 - beta2) * grad * grad
            step = m / (1 - beta1**gen) / (np.sqrt(v / (1 - beta2**gen)) + 1e-8)
            theta = theta - args.learning_rate * step
            row: dict[str, Any] = {
                "population_cost_mean": float(costs.mean()),
                "population_cost_min": float(costs.min()),
            }
            if gen % args.val_every == 0:
                cost, vals = validate(theta)
                row["val_cost"] = cost
                if cost < best_cost:
                    best_cost, best_values = cost, vals
                    best_theta, best_gen = theta.copy(), gen
                    np.savez(run_path / "best.npz", theta=best_theta)
            history.append({"generation": gen, **row})
            bar.update(1, postfix=f"best val {best_cost:.4f}")
            _log(args, gen, row, bar)
    finally:
        bar.close()
        evaluator.close()
    np.savez(run_path / "best.npz", theta=best_theta)
    per_trace = {}
    for k in sorted(set(val_traces)):
        idx = [i for i, t in enumerate(val_traces) if t == k]
        per_trace[args.trace[k]] = {
            "policy_bsld": float(np.mean([best_values[i] for i in idx])),
            "best_heuristic": val_best[k],
            "best_heuristic_bsld": float(np.mean([val_ref[i] for i in idx])),
        }
    meta: dict[str, Any] = {
        "algorithm": "evolution strategies (OpenAI-ES: antithetic sampling, centred ranks, Adam)"
        " on the simulator's engine (app/domains/hpc/simulate.py), objective: mean over traces of"
        " log(sum of bsld / sum of the best heuristic's bsld) on shared 1024-job windows"
        + (
            f" (windows drawn in proportion to the best heuristic's bsld on a grid of every"
            f" {args.sampling_stride}th allowed start, the ratio of sums estimated by the mean"
            " per-window ratio)"
            if importance
            else ""
        )
        + (f" (worst-trace weight {args.worst_weight})" if args.worst_weight else "")
        + (
            f", plus {args.window_loss_weight} x mean over windows of"
            " max(0, log(bsld / best heuristic's bsld))"
            if args.window_loss_weight
            else ""
        ),
        "command": reproduce_command(args),
        "hyperparameters": {k: v for k, v in asdict(args).items() if k != "started"},
        "seed": args.seed,
        "backfill": args.backfill,
        "semantics": args.semantics,
        "traces": windows.describe(),
        "validation_windows": [
            {"trace": args.trace[k], "start": s, "length": length} for k, s in val_windows
        ],
        "validation": per_trace,
        "validation_cost": best_cost,
        **({"window_sampling": sampler.describe()} if sampler is not None else {}),
        "best_generation": best_gen,
        "generations_run": len(history),
        "training_time_s": round(time.time() - args.started, 1),
        "cpu_count": os.cpu_count(),
        "history": history,
    }
    (run_path / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return run_path, meta


def reproduce_command(args: EsArgs) -> str:
    """The ``kairos train --algo es`` command line that repeats this run (output flags aside)."""
    skip = {"started", "run_dir", "progress", "out", "name", "version", "exp_name"}
    parts = ["kairos train --algo es"]
    for key, value in asdict(args).items():
        if key in skip or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, (tuple, list)):
            parts.append(f"{flag} {' '.join(str(v) for v in value)}")
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def _log(args: EsArgs, gen: int, row: dict[str, Any], bar: Progress) -> None:
    if args.progress:
        elapsed = time.time() - args.started
        text = " ".join(f"{k}={v:.4f}" for k, v in row.items())
        bar.write(f"gen {gen:4d} t={elapsed:7.1f}s {text}")


def write_model(
    out: Path,
    shapes: Shapes,
    theta: npt.NDArray[np.float64],
    *,
    name: str,
    version: str,
    training: dict[str, Any],
    seeds: dict[str, Any],
    metrics: dict[str, Any],
) -> Path:
    """Write ``policy.onnx`` + ``card.json`` (``decision_mode: rank``) for these parameters."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "policy.onnx").write_bytes(build_onnx(shapes, theta, {"name": name, "version": version}))
    card = {
        "name": name,
        "version": version,
        "domain": "hpc",
        "kind": "onnx",
        "decision_mode": "rank",
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        **describe_signature(),
        "opset": OPSET,
        "architecture": {
            "score": "w3 . tanh(W2 tanh(W1 x + b1) + b2) + b3 + v . x, per job row",
            "features": shapes.features,
            "hidden": list(shapes.hidden),
            "parameters": shapes.size,
        },
        "training": training,
        "seeds": seeds,
        "metrics": metrics,
    }
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return out / "policy.onnx"


def export(args: EsArgs, run_path: Path, meta: dict[str, Any], out: Path) -> Path:
    """Write ``policy.onnx`` + ``card.json`` (``decision_mode: rank``) from ``best.npz``."""
    return write_model(
        out,
        Shapes(NUM_FEATURES, args.hidden),
        np.load(run_path / "best.npz")["theta"],
        name=args.name,
        version=args.version,
        training={k: v for k, v in meta.items() if k != "history"},
        seeds={"training": args.seed, "evaluation_protocol": args.eval_seed},
        metrics={"validation": meta["validation"]},
    )


def main(argv: Sequence[str] | None = None) -> int:
    import tyro

    args = tyro.cli(
        EsArgs, args=list(argv) if argv is not None else None, prog="kairos train --algo es"
    )
    run_path, meta = train(args)
    print(f"run folder {run_path}")
    print(json.dumps(meta["validation"], indent=2))
    if args.out is not None:
        print(f"exported {export(args, run_path, meta, Path(args.out))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
