"""Fine-tune the Decima network's two output layers with evolution strategies against the metric.

The network is :mod:`training.dag_ppo`'s (spark-sched-sim's architecture, warm-started from its
shipped weights); only the last layer of the stage-score head and of the executor-limit head
(``stage_policy_network.mlp_score.4`` and ``exec_policy_network.mlp_score.4``: 130 parameters)
move, the message-passing encoder stays as trained. Each generation draws ``--batch`` fresh
training sequences (seeds from ``--train-seed-base``), runs every antithetic candidate on the
same sequences (common random numbers: the sampler is seeded with the sequence's seed, as the
evaluator does), and scores a candidate by the mean over the sequences of its average JCT over
Fair's on the same sequence, the V6 metric. OpenAI-ES: centred ranks, Adam. The checkpoint kept
is the lowest mean ratio to Fair on ``--val-seeds`` (generation 0, the warm start, included).
Episodes run through :func:`app.domains.dag.simulate.run_episode`, the evaluator's decision path,
at the training configuration (50 executors, 200 TPC-H jobs, Poisson 25 s).

    python -m training.dag_es --generations 30 --workers 2 --out runs/dag-es/dag-v1/2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.domains.dag.env import TRAIN_EXECUTORS, TRAIN_INTERVAL_S, TRAIN_JOBS
from sim.dag_data import DEFAULT_DECIMA
from training.dag_ppo import F32, Best, EnvConfig, _load_init, _val_episode, write_model
from training.es import es_gradient
from training.paths import repo_relative

F64 = npt.NDArray[np.float64]

#: the tensors the search moves (the two heads' output layers)
TUNED: tuple[str, ...] = (
    "stage_policy_network.mlp_score.4.weight",
    "stage_policy_network.mlp_score.4.bias",
    "exec_policy_network.mlp_score.4.weight",
    "exec_policy_network.mlp_score.4.bias",
)


def flatten(weights: dict[str, F32]) -> F64:
    return np.concatenate([weights[k].astype(np.float64).ravel() for k in TUNED])


def with_flat(weights: dict[str, F32], flat: F64) -> dict[str, F32]:
    """``weights`` with the :data:`TUNED` tensors read from ``flat`` (in that order)."""
    out = dict(weights)
    i = 0
    for k in TUNED:
        n = weights[k].size
        out[k] = flat[i : i + n].reshape(weights[k].shape).astype(np.float32)
        i += n
    return out


def train(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    base = _load_init(args.init)
    cfg = EnvConfig(args.semantics, args.executors, args.jobs, args.interval_s, None)
    pool = ProcessPoolExecutor(max_workers=args.workers) if args.workers > 1 else None

    def run_map(items: list[Any]) -> list[float]:
        return (
            list(pool.map(_val_episode, items))
            if pool is not None
            else [_val_episode(i) for i in items]
        )

    started = time.monotonic()
    val_seeds = list(args.val_seeds)
    fair_val = run_map([(None, cfg, s, args.mode) for s in val_seeds])

    def validate(flat: F64) -> float:
        arrays = with_flat(base, flat)
        jct = run_map([(arrays, cfg, s, args.mode) for s in val_seeds])
        return float(np.mean([a / f for a, f in zip(jct, fair_val, strict=True)]))

    w = flatten(base)
    ratio = validate(w)
    best = Best(0, ratio, with_flat(base, w))
    log: list[dict[str, Any]] = [{"iteration": 0, "val_ratio": ratio}]
    print(f"generation 0: validation ratio to fair {ratio:.4f}", flush=True)
    m, v = np.zeros_like(w), np.zeros_like(w)
    ran = 0
    for gen in range(1, args.generations + 1):
        if time.monotonic() - started > args.time_budget_s:
            break
        t0 = time.monotonic()
        seeds = [args.train_seed_base + (gen - 1) * args.batch + i for i in range(args.batch)]
        eps = rng.standard_normal((args.pairs, len(w)))
        cands = [w + args.sigma * e for e in eps] + [w - args.sigma * e for e in eps]
        tasks: list[Any] = [(None, cfg, s, args.mode) for s in seeds]
        tasks += [(with_flat(base, c), cfg, s, args.mode) for c in cands for s in seeds]
        res = np.asarray(run_map(tasks))
        fair, jct = res[: args.batch], res[args.batch :].reshape(len(cands), args.batch)
        fit = (jct / fair).mean(1)
        grad = es_gradient(eps, fit, args.sigma)  # of the cost: the step descends it
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        w = w - args.lr * (m / (1 - 0.9**gen)) / (np.sqrt(v / (1 - 0.999**gen)) + 1e-8)
        entry: dict[str, Any] = {
            "iteration": gen,
            "train_ratio_mean": round(float(fit.mean()), 4),
            "train_ratio_best": round(float(fit.min()), 4),
            "seconds": round(time.monotonic() - t0, 1),
        }
        if gen % args.val_every == 0 or gen == args.generations:
            entry["val_ratio"] = ratio = validate(w)
            best.offer(gen, ratio, with_flat(base, w))
        log.append(entry)
        ran = gen
        print(json.dumps(entry), flush=True)
    if "val_ratio" not in log[-1]:
        log[-1]["val_ratio"] = ratio = validate(w)
        best.offer(ran, ratio, with_flat(base, w))
    if pool is not None:
        pool.shutdown()
    return {
        "best": best,
        "log": log,
        "fair_val_avg_jct_s": fair_val,
        "wall_s": time.monotonic() - started,
        "iterations": ran,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.dag_es", description=__doc__)
    p.add_argument("--out", type=Path, required=True, help="model directory to write")
    p.add_argument("--init", type=Path, default=DEFAULT_DECIMA, help="warm-start state dict")
    p.add_argument("--semantics", default="kairos", choices=["kairos", "spark-sched-sim-compat"])
    p.add_argument("--executors", type=int, default=TRAIN_EXECUTORS)
    p.add_argument("--jobs", type=int, default=TRAIN_JOBS)
    p.add_argument("--interval-s", type=float, default=TRAIN_INTERVAL_S)
    p.add_argument("--generations", type=int, default=30)
    p.add_argument("--pairs", type=int, default=8, help="antithetic pairs per generation")
    p.add_argument("--batch", type=int, default=4, help="training sequences per generation")
    p.add_argument("--sigma", type=float, default=0.02)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--mode", choices=["sample", "argmax"], default="sample")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-seed-base", type=int, default=100_000)
    p.add_argument("--val-seeds", type=int, nargs="+", default=list(range(50_000, 50_016)))
    p.add_argument("--val-every", type=int, default=5)
    p.add_argument("--time-budget-s", type=float, default=3600.0)
    p.add_argument("--workers", type=int, default=2)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(raw)
    train_range = range(args.train_seed_base, args.train_seed_base + args.generations * args.batch)
    overlap = set(args.val_seeds) & set(train_range)
    if overlap:
        print(f"validation seeds {sorted(overlap)} are training seeds", file=sys.stderr)
        return 2
    result = train(args)
    # the card of training.dag_ppo, with this run's algorithm, command and seeds
    args.from_scratch, args.time_limit = False, None
    args.iterations, args.sequences = args.generations, args.batch
    write_model(result, args, raw)
    path = args.out / "card.json"
    card = json.loads(path.read_text(encoding="utf-8"))
    training = card["training"]
    training["algorithm"] = (
        "OpenAI-ES (training/dag_es.py) on the two heads' output layers "
        f"({', '.join(TUNED)}; the encoder fixed at the warm start), antithetic pairs, "
        "centred ranks, Adam; objective: mean over a generation's training sequences of the "
        "average JCT over Fair's, every candidate on the same sequences, run_episode"
    )
    training["command"] = "python -m training.dag_es " + " ".join(
        repo_relative(Path(a)) if "/" in a else a for a in raw
    )
    training["environment"]["time_limit_mean_s"] = None
    training["tuned_parameters"] = int(flatten(_load_init(args.init)).size)
    path.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    print(
        f"wrote {args.out} (generation {result['best'].iteration}, "
        f"validation {result['best'].ratio:.4f})",
        flush=True,
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
