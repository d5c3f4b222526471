"""``kairos evaluate``: replay a trace and compare policies (see :mod:`sim.evaluate`).

``main(argv)`` receives ``argv[0] == "evaluate"`` from the ``kairos`` dispatcher.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from app.domains.hpc.swf import SwfFormatError
from app.domains.hpc.types import Backfill
from sim.evaluate import EvalSpec, StartJobError, UnknownPolicyError, evaluate, write_json

COMMAND = "evaluate"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kairos evaluate",
        description="Replay job sequences of an SWF trace and compare scheduling policies.",
    )
    p.add_argument("--trace", required=True, help="SWF trace (.swf or .swf.gz)")
    p.add_argument(
        "--policies",
        required=True,
        help="comma-separated: heuristics (fcfs,sjf,wfp3,unicep,f1,...), ONNX policy names "
        "(name or name@version) and model directories (policy.onnx + card.json)",
    )
    p.add_argument("--backfill", choices=["none", "easy"], default="none")
    p.add_argument(
        "--semantics",
        choices=["kairos", "rlscheduler"],
        default="kairos",
        help="kairos: the service's decision code; rlscheduler: RLScheduler's simulator, quirks "
        "included (reproduces the published tables)",
    )
    p.add_argument("--sequences", type=int, default=10, help="number of job sequences")
    p.add_argument("--length", type=int, default=1024, help="jobs per sequence")
    p.add_argument("--seed", type=int, default=1, help="sequence sampling seed (gym legacy)")
    p.add_argument(
        "--slice", type=int, default=0, help="draw sequences from the first K jobs only (0: all)"
    )
    p.add_argument(
        "--start-job",
        type=int,
        default=0,
        help="draw sequences from jobs >= N only, e.g. the part of the trace a tuned model "
        "did not see (0: RLScheduler's protocol)",
    )
    p.add_argument("--json", type=Path, help="write the result rows here (JSON)")
    p.add_argument(
        "--report",
        type=Path,
        help="write a Markdown report here (a directory), with plots when matplotlib (the sim "
        "extra) is installed; give --json, --report or both",
    )
    p.add_argument(
        "--workers", type=int, default=1, help="run sequences in N processes (default 1)"
    )
    return p


def _checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, ...]:
    """The policies named; exits with a usage error for an option out of range, and warns
    when the report will have no plots."""
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    if not policies:
        parser.error("--policies names no policy")
    for name, value, low in (("sequences", args.sequences, 1), ("length", args.length, 1)):
        if value < low:
            parser.error(f"--{name} must be >= {low}")
    if args.seed < 0 or args.slice < 0 or args.workers < 1:
        parser.error("--seed and --slice must be >= 0, --workers >= 1")
    if args.start_job < 0:
        parser.error("--start-job must be >= 0")
    if not Path(args.trace).is_file():
        parser.error(f"--trace: no such file: {args.trace}")
    if args.json is None and args.report is None:
        parser.error("give --json FILE (the result rows), --report DIR (a Markdown report) or both")
    if args.report is not None:
        from sim.report import NO_PLOTS, can_plot

        if not can_plot():  # said before the run, which may take minutes
            print(f"kairos evaluate: {NO_PLOTS}", file=sys.stderr)  # noqa: T201
    return policies


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] == COMMAND:
        args_in = args_in[1:]
    if "--domain=dag" in args_in or " --domain dag " in f" {' '.join(args_in)} ":
        from sim.dag_evaluate import main as dag_main

        return dag_main(args_in)
    if "--domain=gpu" in args_in or " --domain gpu " in f" {' '.join(args_in)} ":
        from sim.gpu_evaluate import main as gpu_main

        return gpu_main(args_in)
    parser = build_parser()
    args = parser.parse_args(args_in)
    policies = _checked(parser, args)
    spec = EvalSpec(
        trace_path=str(args.trace),
        policies=policies,
        backfill=Backfill(args.backfill),
        semantics=args.semantics,
        sequences=args.sequences,
        length=args.length,
        seed=args.seed,
        batch_slice=args.slice,
        start_job=args.start_job,
    )
    try:
        result = evaluate(spec, workers=args.workers)
    except StartJobError as exc:
        print(f"kairos evaluate: error: --start-job: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except (UnknownPolicyError, SwfFormatError, ValueError) as exc:
        print(f"kairos evaluate: error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    if args.json is not None:
        write_json(result.rows, args.json)
    if args.report is not None:
        from sim.report import write_report

        write_report(result, args.report)
    from sim.report import text_table

    print(text_table(result.rows))  # noqa: T201
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
