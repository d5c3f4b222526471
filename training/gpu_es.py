"""Train ``gpu-v1``'s scorer with evolution strategies under ``pollux-compat``.

The scorer is :class:`training.gpu_ppo.Agent` with its linear term (``skip``) and the MLP's
output layer at zero, so the policy is ``score = s . x`` over the ``kairos-gpu-v1`` features of
each candidate row, walked by ``decide()``'s preemptive admission (the same walk as the
heuristics). The search starts from a heuristic's key written as such a linear score
(:data:`INITIAL_KEYS`: 2D-LAS is ``-4 las_queue + 2 running + wait``, exact with the card's LAS
threshold), and moves away from it only where whole episodes say so. The objective is the metric
itself: the mean over a batch of training workloads of a candidate's average JCT over the
artifact's Tiresias's on the same workload (common random numbers inside a generation).
OpenAI-ES: antithetic Gaussian perturbations, centred-rank fitness shaping, Adam.

Data as in :mod:`training.gpu_ppo`: workloads generated from the Philly weeks 0-9 (training) and
10-11 (validation: the checkpoint kept is the lowest mean ratio to Tiresias there, checked every
``val_every`` generations and at generation 0, the heuristic itself); weeks 12-15 and the 8
Pollux evaluation workloads are never read.

    python -m training.gpu_es --seed 1 --generations 24 --out runs/gpu-es-s1
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tyro

from app.domains.gpu.encoding import FEATURE_NAMES, NUM_FEATURES, EncodingConstants
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.pollux import Application
from app.domains.gpu.simulate import SimJob, simulate_pollux
from sim.gpu_data import load_applications
from training.es import centred_ranks
from training.gpu_ppo import (
    Args,
    agent_of,
    heuristic_validation,
    initial_weights,
    load_data,
    make_card,
    selection_metric,
    write_model,
)

F64 = npt.NDArray[np.float64]


@dataclass
class EsArgs:
    seed: int = 1
    """seed of the perturbations, the batches and the training workloads"""
    generations: int = 24
    train_workloads: int = 64
    """training workloads generated from weeks 0-9 (each generation draws ``batch`` of them)"""
    batch: int = 8
    pairs: int = 6
    """antithetic pairs per generation"""
    sigma: float = 0.2
    learning_rate: float = 0.05
    val_workloads: int = 48
    """validation workloads generated from weeks 10-11"""
    jobs_per_workload: int = 160
    val_every: int = 4
    init: str = "tiresias-2dlas"
    """the heuristic key the search starts from (see INITIAL_KEYS)"""
    las_threshold_gpu_s: float = 57600.0
    """the ``las_queue`` feature's threshold: 2D-LAS's under pollux-compat"""
    workers: int = 2
    out: Path = Path("runs/gpu-es")
    name: str = "gpu-v1"
    version: str = "4"


@dataclass(frozen=True)
class _Worker:
    apps: dict[str, Application]
    train: list[list[SimJob]]
    val: list[list[SimJob]]
    constants: EncodingConstants


_W: _Worker | None = None


def _init(ppo_args: Args) -> None:
    global _W
    data = load_data(ppo_args)
    _W = _Worker(
        load_applications(),
        data.train,
        data.val,
        EncodingConstants(las_threshold_gpu_s=ppo_args.las_threshold_gpu_s),
    )


def linear_policy(w: npt.ArrayLike, constants: EncodingConstants) -> ScoredPolicy:
    """The scorer ``obs @ w`` (masked rows are left out by the walk itself)."""
    ws = np.asarray(w, dtype=np.float32)

    def score(obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_]) -> F64:
        del mask
        return np.asarray(obs @ ws, dtype=np.float64)

    return ScoredPolicy("es", "0", score, constants)


def _episode(task: tuple[str, int, list[float] | None]) -> float:
    """Average JCT of one workload (``t``raining or ``v``alidation) under the linear scorer
    ``w``, or under the artifact's Tiresias when ``w`` is None."""
    assert _W is not None
    kind, i, w = task
    rows = _W.train[i] if kind == "t" else _W.val[i]
    pol: str | ScoredPolicy = "tiresias" if w is None else linear_policy(w, _W.constants)
    return float(np.mean(simulate_pollux(rows, _W.apps, pol).jcts))


def train(args: EsArgs, command: str = "") -> Path:
    ppo_args = Args(
        seed=args.seed,
        semantics="pollux-compat",
        train_workloads=args.train_workloads,
        val_workloads=args.val_workloads,
        jobs_per_workload=args.jobs_per_workload,
        las_threshold_gpu_s=args.las_threshold_gpu_s,
        skip=True,
        bc_episodes=0,
        bc_teacher=args.init,
        out=args.out,
        name=args.name,
        version=args.version,
    )
    t0 = time.monotonic()
    data = load_data(ppo_args)
    heur = heuristic_validation(ppo_args, data, load_applications())
    rng = np.random.default_rng(args.seed)
    with mp.Pool(args.workers, initializer=_init, initargs=(ppo_args,)) as pool:
        tiresias = np.asarray(
            pool.map(_episode, [("t", i, None) for i in range(args.train_workloads)])
        )

        def validate(w: F64) -> list[float]:
            n = len(data.val)
            return list(pool.map(_episode, [("v", i, w.tolist()) for i in range(n)]))

        w = initial_weights(args.init)
        val = validate(w)
        best = (selection_metric(val, heur), 0, val, w.copy())
        print(f"gen 0 ({args.init}) val {best[0]:.4f} ({time.monotonic() - t0:.0f}s)", flush=True)
        m, v = np.zeros_like(w), np.zeros_like(w)
        for gen in range(1, args.generations + 1):
            idx = rng.choice(args.train_workloads, args.batch, replace=False)
            eps = rng.standard_normal((args.pairs, len(w)))
            cands = [w + args.sigma * e for e in eps] + [w - args.sigma * e for e in eps]
            tasks = [("t", int(i), c.tolist()) for c in cands for i in idx]
            res = np.asarray(pool.map(_episode, tasks)).reshape(len(cands), args.batch)
            fit = (res / tiresias[idx]).mean(1)
            r = centred_ranks(-fit)
            grad = ((r[: args.pairs] - r[args.pairs :])[:, None] * eps).sum(0) / (
                2 * args.pairs * args.sigma
            )
            m = 0.9 * m + 0.1 * grad
            v = 0.999 * v + 0.001 * grad**2
            w = w + args.learning_rate * (m / (1 - 0.9**gen)) / (
                np.sqrt(v / (1 - 0.999**gen)) + 1e-8
            )
            line = f"gen {gen} train ratio mean {fit.mean():.4f} best {fit.min():.4f}"
            if gen % args.val_every == 0 or gen == args.generations:
                val = validate(w)
                sel = selection_metric(val, heur)
                line += f" val {sel:.4f}"
                if sel < best[0]:
                    best = (sel, gen, val, w.copy())
            print(f"{line} ({time.monotonic() - t0:.0f}s)", flush=True)
    agent = agent_of(best[3])
    meta: dict[str, Any] = {
        "agent": agent,
        "command": command,
        "best_update": best[1],
        "updates": args.generations,
        "training_time_s": round(time.monotonic() - t0, 1),
        "env_steps": 0,
    }
    constants = EncodingConstants(las_threshold_gpu_s=args.las_threshold_gpu_s)
    card = make_card(ppo_args, data, constants, best[2], heur, meta)
    card["architecture"]["score"] = "s . x per candidate row (the MLP's output layer is zero)"
    card["architecture"]["parameters"] = NUM_FEATURES
    card["architecture"]["weights"] = dict(zip(FEATURE_NAMES, map(float, best[3]), strict=True))
    training = card["training"]
    training["algorithm"] = (
        "OpenAI-ES (training/gpu_es.py) on the linear score, from the key of "
        f"{args.init}, on the fixed-step cluster of app/domains/gpu/simulate.py "
        "simulate_pollux, pollux-compat semantics, 16 x 4 GPUs; objective: mean average JCT "
        "over the artifact's Tiresias's on a batch of training workloads"
    )
    training["hyperparameters"] = {
        k: str(val_) if isinstance(val_, Path) else val_ for k, val_ in vars(args).items()
    }
    training["best_update"] = best[1]
    training["generations_run"] = args.generations
    training.pop("env_steps", None)
    write_model(agent, args.out, card)
    print(f"wrote {args.out} (best generation {best[1]}, select {best[0]:.4f})", flush=True)
    return args.out


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(EsArgs, args=argv, prog="python -m training.gpu_es")
    given = sys.argv[1:] if argv is None else list(argv)
    train(args, "python -m training.gpu_es " + " ".join(given))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
