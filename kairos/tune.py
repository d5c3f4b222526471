"""``kairos tune``: tune the learned HPC policy on a site's history (:mod:`app.tuning.procedure`).

    kairos tune --trace FILE --until-job N --backfill easy|none [--from MODEL]
        [--time-budget-s S] [--workers W] [--seed S] --out DIR

Jobs ``[0, N)`` of the trace are the history; ``DIR`` receives the winner (a model directory,
or a card naming the heuristic that won). A progress bar is drawn on stderr when it is a
terminal; the validation table goes to stdout. ``kairos evaluate --start-job N --policies DIR``
then measures the winner on jobs the tune never saw.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from app.domains.hpc.swf import SwfFormatError, load_swf
from app.domains.hpc.types import Backfill
from app.tuning.procedure import (
    TuneConfig,
    TuneError,
    TuneResult,
    ValidationRow,
    first_jobs,
    tune,
)
from sim.progress import Progress

COMMAND = "tune"
#: progress bar resolution (units of the bar)
_STEPS = 1000


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kairos tune",
        description="Tune the learned HPC policy on jobs [0, N) of a trace, validate it against "
        "every heuristic on the latest of those jobs, and write the winner.",
    )
    p.add_argument("--trace", required=True, type=Path, help="SWF trace (.swf or .swf.gz)")
    p.add_argument(
        "--until-job", required=True, type=int, help="the history is jobs [0, N) of the trace"
    )
    p.add_argument("--backfill", required=True, choices=["easy", "none"])
    p.add_argument(
        "--from",
        dest="from_model",
        type=Path,
        help="start from this ranking model directory (default: the shipped default of the "
        "backfill mode)",
    )
    p.add_argument("--time-budget-s", type=float, default=600.0, help="wall-clock bound (s)")
    p.add_argument("--workers", type=int, default=2, help="simulator processes")
    p.add_argument("--seed", type=int, default=0, help="seed of the training")
    p.add_argument(
        "--window-length",
        type=int,
        default=TuneConfig().window_length,
        help="jobs per training and validation window (the evaluation protocol's: 1024)",
    )
    p.add_argument("--name", default="hpc-tuned", help="policy name in the card")
    p.add_argument("--version", default="1", help="policy version in the card")
    p.add_argument("--out", required=True, type=Path, help="output directory (new or empty)")
    return p


def format_table(rows: Sequence[ValidationRow]) -> str:
    """The validation table, best first."""
    width = max(len("candidate"), *(len(r.candidate) for r in rows))
    head = f"{'candidate':<{width}}  {'kind':<9}  {'avg bsld':>10}  {'ratio':>7}  {'earlier':>7}"
    lines = [f"{head}  {'score':>7}"]
    for r in rows:
        early = "" if r.earlier_ratio is None else f"{r.earlier_ratio:.3f}"
        lines.append(
            f"{r.candidate:<{width}}  {r.kind:<9}  {r.avg_bsld:>10.3f}  {r.ratio:>7.3f}  "
            f"{early:>7}  {r.score:>7.3f}"
        )
    lines.append(
        "ratio: to the best heuristic on the held-out latest history; earlier: on the history"
        " before it; score: the larger (the guard's)"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace, argv: Sequence[str]) -> TuneResult:
    trace = load_swf(args.trace)
    if not 0 < args.until_job <= trace.n_jobs:
        raise TuneError(f"--until-job must be in [1, {trace.n_jobs}] (the trace's jobs)")
    history = first_jobs(trace, args.until_job)
    with Progress(_STEPS, "tune", "‰") as bar:

        def report(fraction: float, message: str) -> None:
            bar.update(int(fraction * _STEPS) - bar.done, postfix=message)

        return tune(
            history,
            backfill=Backfill(args.backfill),
            from_model=args.from_model,
            time_budget_s=args.time_budget_s,
            workers=args.workers,
            seed=args.seed,
            out_dir=args.out,
            progress=report,
            name=args.name,
            version=args.version,
            command=shlex.join(["kairos", COMMAND, *argv]),
            config=TuneConfig(window_length=args.window_length),
        )


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] == COMMAND:
        args_in = args_in[1:]
    parser = build_parser()
    args = parser.parse_args(args_in)
    if args.workers < 1 or args.time_budget_s <= 0 or args.window_length < 1:
        parser.error("--workers and --window-length must be >= 1, --time-budget-s > 0")
    if not args.trace.is_file():
        parser.error(f"--trace: no such file: {args.trace}")
    try:
        result = run(args, args_in)
    except (TuneError, SwfFormatError) as exc:
        print(f"kairos tune: error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    print(format_table(result.table))  # noqa: T201
    print(  # noqa: T201
        f"winner: {result.winner} ({result.kind}); written to {result.model_dir} "
        f"in {result.card['tuning']['wall_s']} s"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
