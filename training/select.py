"""Choose among trained ranking models on a common validation set (never the evaluation windows).

Every candidate (an ES run folder's ``best.npz``, or a shipped ranking model's folder) and every
heuristic is replayed on the same windows, drawn with their own seed from the training ranges of
each trace, or with ``--val-holdout`` from their held-out part (always disjoint from the paper's
evaluation windows, as in training).  Per trace the table gives each candidate's mean bsld
over the windows divided by the best heuristic's; the chosen candidate has the smallest worst
ratio over the traces (the acceptance's "never above the best heuristic" criterion), ties by the
mean ratio.

    python -m training.select --runs runs/a runs/b --backfill easy --trace ... --windows 10
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from app.domains.hpc.encoding import NUM_FEATURES
from training.es import (
    HEURISTICS,
    EsArgs,
    Evaluator,
    Shapes,
    Task,
    Windows,
    load_init_params,
    shrink_toward_sjf,
    write_model,
)


@dataclass
class SelectArgs:
    runs: tuple[str, ...]
    """ES run folders (``best.npz`` + ``meta.json``) or ranking model folders (``policy.onnx`` +
    ``card.json``, e.g. ``models/hpc-kernel/2``); all with the same hidden sizes"""
    trace: tuple[str, ...]
    """SWF traces (the candidates' training traces)"""
    backfill: Literal["easy", "none"] = "easy"
    semantics: Literal["kairos", "rlscheduler"] = "kairos"
    windows: int = 10
    """validation windows per trace"""
    seed: int = 777
    """seed of the validation windows"""
    val_holdout: float = 0.0
    """draw the windows from the held-out part of each trace (the candidates' ``--val-holdout``)"""
    val_split: Literal["tail", "segments"] = "tail"
    """how ``val_holdout`` holds out (the candidates' ``--val-split``)"""
    eval_slices: tuple[int, ...] = (0, 10_000)
    """the evaluation windows to keep out (the candidates' ``--eval-slices``)"""
    shrink: tuple[float, ...] = ()
    """also try each candidate blended with SJF: ``alpha * model + (1 - alpha) * sjf`` for each
    alpha given (``es.shrink_toward_sjf``); such a variant is named ``<candidate>~a<alpha>``"""
    workers: int = 2
    json_out: str | None = None
    """write the table here"""
    export: str | None = None
    """write the chosen candidate here as a model (``policy.onnx`` + ``card.json``)"""
    name: str = "hpc-kernel"
    """policy name of the exported model"""
    version: str = "1"
    """policy version of the exported model"""


def _training_record(candidate: str) -> dict[str, Any]:
    """A run folder's ``meta.json`` (without its history) or a model's ``card.json`` training."""
    folder = Path(candidate)
    if (folder / "meta.json").exists():
        meta: dict[str, Any] = json.loads((folder / "meta.json").read_text())
        meta.pop("history", None)
        return meta
    record: dict[str, Any] = json.loads((folder / "card.json").read_text())["training"]
    return record


def _hidden(candidate: str) -> tuple[int, int]:
    h1, h2 = _training_record(candidate)["hyperparameters"]["hidden"]
    return int(h1), int(h2)


def _parameters(candidate: str) -> str:
    best = Path(candidate) / "best.npz"
    return str(best) if best.exists() else candidate


def _variant(candidate: str, alpha: float) -> str:
    return f"{candidate}~a{alpha:g}"


def select(args: SelectArgs) -> dict[str, Any]:
    hidden = {_hidden(r) for r in args.runs}
    if len(hidden) != 1:
        raise ValueError(f"candidates differ in hidden sizes: {sorted(hidden)}")
    h1, h2 = next(iter(hidden))
    es = EsArgs(
        trace=args.trace,
        backfill=args.backfill,
        workers=args.workers,
        val_holdout=args.val_holdout,
        val_split=args.val_split,
        eval_slices=args.eval_slices,
    )
    windows = Windows.load(es).sample_validation(np.random.default_rng(args.seed), args.windows)
    shapes = Shapes(NUM_FEATURES, (h1, h2))
    evaluator = Evaluator(es, shapes)
    mode = f"{args.backfill}/{args.semantics}"
    thetas: dict[str, npt.NDArray[np.float64]] = {}
    for r in args.runs:
        theta = load_init_params(shapes, _parameters(r))
        thetas[r] = theta
        thetas.update({_variant(r, a): shrink_toward_sjf(shapes, theta, a) for a in args.shrink})
    try:
        specs: list[tuple[str, npt.NDArray[np.float64] | str]] = [(h, h) for h in HEURISTICS]
        specs += list(thetas.items())
        tasks: list[Task] = [(spec, k, s, 1024, mode) for _, spec in specs for k, s in windows]
        values = evaluator.run(tasks)
    finally:
        evaluator.close()
    w = len(windows)
    per: dict[str, dict[str, float]] = {}
    for i, (name, _) in enumerate(specs):
        row = values[i * w : (i + 1) * w]
        per[name] = {
            args.trace[k]: float(np.mean([row[j] for j, (t, _) in enumerate(windows) if t == k]))
            for k in range(len(args.trace))
        }
    best_heuristic = {t: min(per[h][t] for h in HEURISTICS) for t in args.trace}
    ratios = {r: {t: per[r][t] / best_heuristic[t] for t in args.trace} for r in thetas}

    def key(run: str) -> tuple[float, float]:
        values = list(ratios[run].values())
        return (max(values), float(np.mean(values)))

    chosen = min(thetas, key=key)
    return {
        "rule": (
            f"the smallest worst ratio over the traces of mean bsld to the best heuristic's "
            f"(ties: the mean ratio), on {args.windows} validation windows per trace drawn with "
            f"seed {args.seed}"
            + (
                (
                    f" from the held-out last {args.val_holdout:g} of each trace's allowed starts"
                    if args.val_split == "tail"
                    else f" from the held-out last {args.val_holdout:g} of every stretch of jobs"
                    " between evaluation windows that holds two windows"
                )
                if args.val_holdout
                else " from the training ranges"
            )
            + (
                f"; candidates also blended with SJF at alpha {list(args.shrink)}"
                if args.shrink
                else ""
            )
        ),
        "windows": [{"trace": args.trace[k], "start": s} for k, s in windows],
        "seed": args.seed,
        "bsld": per,
        "ratio_to_best_heuristic": ratios,
        "chosen": chosen,
        "_theta": thetas[chosen],
        "_shapes": shapes,
    }


def export_chosen(args: SelectArgs, result: dict[str, Any], out: Path) -> Path:
    """Write the chosen candidate as a ranking model; its card keeps the base model's training
    record and adds how it was derived and chosen."""
    chosen: str = result["chosen"]
    base, _, alpha = chosen.partition("~a")
    training = _training_record(base)
    key = "run_folder" if (Path(base) / "meta.json").exists() else "initialised_from_model"
    training[key] = base
    table = {k: v for k, v in result.items() if not k.startswith("_") and k != "windows"}
    training["selection"] = {
        **table,
        "blend_with_sjf": float(alpha) if alpha else None,
        "command": "python -m training.select " + " ".join(sys.argv[1:]),
    }
    return write_model(
        out,
        result["_shapes"],
        result["_theta"],
        name=args.name,
        version=args.version,
        training=training,
        seeds={"training": training.get("seed"), "validation_windows": args.seed},
        metrics={"validation": {t: result["bsld"][chosen][t] for t in args.trace}},
    )


def main(argv: Sequence[str] | None = None) -> int:
    import tyro

    args = tyro.cli(SelectArgs, args=list(argv) if argv is not None else None)
    result = select(args)
    for run, ratios in result["ratio_to_best_heuristic"].items():
        cells = " ".join(f"{Path(t).name.split('.')[0]}={v:.3f}" for t, v in ratios.items())
        print(f"{run}: {cells}")
    print(f"chosen: {result['chosen']}")
    if args.json_out:
        public = {k: v for k, v in result.items() if not k.startswith("_")}
        Path(args.json_out).write_text(json.dumps(public, indent=2) + "\n")
    if args.export:
        print(f"exported {export_chosen(args, result, Path(args.export))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
