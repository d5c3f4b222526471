"""``kairos evaluate --domain dag``: TPC-H DAG episodes under one simulator semantics, policies
compared on the same seeds.

``--jobs J --arrival-interval-s T``: J jobs, the first at t = 0 and the rest a Poisson stream of
mean gap T (decima-compat: 1 initial job + J - 1 streamed); ``T = 0`` puts all J at t = 0 (a
batch).  ``--seeds A-B`` runs every policy on each seed of the range (decima-compat seed k is
decima-sim's ``env.seed(10,000,000 + k)``).  One JSON row per policy: the means over seeds of each
episode's metrics, the per-seed average JCTs, their 95 % interval half-width and, when ``fair`` is
among the policies, the paired mean of per-seed ratios to it.

``--workflows FILE [FILE ...]`` instead of ``--tpch``: each WfCommons instance is one DAG job of
one-task stages (:mod:`sim.dag_workflows`); per seed they arrive in a random order, the first at
t = 0 and the rest a Poisson stream of mean gap T
(:func:`app.domains.dag.workflow.workflow_arrivals`); ``jobs`` is the number of files (a file
given twice is two jobs), so ``--jobs`` with ``--workflows`` is a usage error (exit 2).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, cast

import numpy as np

from app.domains.dag.decima import DecimaPolicy
from app.domains.dag.heuristics import get_heuristic
from app.domains.dag.metrics import EpisodeMetrics, episode_metrics
from app.domains.dag.policy import DagPolicy
from app.domains.dag.simulate import SEMANTICS, Semantics, SimConfig, run_episode
from app.domains.dag.workflow import run_workflow_episode
from app.kernel.errors import UnknownHeuristicError
from sim.dag_data import DEFAULT_TPCH, load_decima, load_tpch
from sim.dag_workflows import WorkflowFileError, load_workflows

__all__ = [
    "DagEvalSpec",
    "DagPolicyRefusedError",
    "build_parser",
    "evaluate_dag",
    "main",
    "parse_seeds",
    "register_dag_policy_loader",
]


#: TPC-H jobs per episode when ``--jobs`` is not given
DEFAULT_TPCH_JOBS: Final = 50


@dataclass(frozen=True, slots=True)
class DagEvalSpec:
    semantics: Semantics
    executors: int
    jobs: int
    arrival_interval_s: float
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    tpch_path: str = str(DEFAULT_TPCH)
    #: WfCommons instance files: the workload instead of TPC-H when not empty
    workflows: tuple[str, ...] = ()


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"A-B"`` (inclusive), ``"A"`` or ``"A,B,C"``."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            a, b = int(lo), int(hi)
            if b < a:
                raise ValueError(f"seed range {part!r} is empty")
            out.extend(range(a, b + 1))
        else:
            out.append(int(part))
    if not out or any(s < 0 for s in out):
        raise ValueError(f"--seeds {text!r}: give A-B or a comma list of seeds >= 0")
    return tuple(out)


#: learned policies: spark-sched-sim's shipped Decima, sampled or greedy decoding
DECIMA_POLICIES: Final = {"decima": "sample", "decima_argmax": "argmax"}


#: resolves a learned DAG policy (a model name or a model directory) to a factory of policies
#: seeded per episode, ``None`` when it knows no such model; :mod:`kairos.dag_policy_loader`
#: registers the ONNX models' (``sim`` may not import ``app.policy``)
DagPolicyLoader = Callable[[str], Callable[[int], DagPolicy] | None]
_DAG_LOADERS: list[DagPolicyLoader] = []


class DagPolicyRefusedError(ValueError):
    """A learned DAG policy that exists but cannot be used (refused model, not a model
    directory); the message names it."""


def register_dag_policy_loader(loader: DagPolicyLoader) -> None:
    """Let ``--policies`` name learned DAG models (idempotent)."""
    if loader not in _DAG_LOADERS:
        _DAG_LOADERS.append(loader)


def make_policy(name: str, seed: int = 0) -> DagPolicy:
    """A heuristic, the shipped Decima (``decima`` samples with a generator seeded by the
    episode seed, ``decima_argmax`` is greedy), or a learned model a registered loader knows
    (its card's decoding mode, sampling seeded by the episode seed)."""
    if name in DECIMA_POLICIES:
        mode = cast(Literal["sample", "argmax"], DECIMA_POLICIES[name])
        return DecimaPolicy(load_decima(), mode=mode, seed=seed, name=name)
    try:
        return get_heuristic(name)
    except UnknownHeuristicError:
        for loader in _DAG_LOADERS:
            factory = loader(name)
            if factory is not None:
                return factory(seed)
        raise


def _episode(args: tuple[DagEvalSpec, str, int]) -> EpisodeMetrics:
    spec, policy, seed = args
    interval_ms = spec.arrival_interval_s * 1000.0
    if spec.workflows:
        return episode_metrics(
            run_workflow_episode(
                load_workflows(spec.workflows),
                SimConfig(spec.semantics, spec.executors),
                make_policy(policy, seed),
                seed=seed,
                interval_ms=interval_ms,
            )
        )
    lib = load_tpch(Path(spec.tpch_path))
    if interval_ms > 0:
        num_init, num_stream = 1, spec.jobs - 1
    else:
        num_init, num_stream = spec.jobs, 0
    res = run_episode(
        lib,
        SimConfig(spec.semantics, spec.executors),
        make_policy(policy, seed),
        seed=seed,
        num_init=num_init,
        num_stream=num_stream,
        interval_ms=interval_ms,
    )
    return episode_metrics(res)


def _ci95(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    return float(1.96 * np.std(values, ddof=1) / math.sqrt(len(values)))


def evaluate_dag(spec: DagEvalSpec, workers: int = 1) -> list[dict[str, Any]]:
    for name in spec.policies:
        make_policy(name)  # unknown names fail before any episode
    if spec.workflows:
        load_workflows(spec.workflows)  # so does a bad workflow file
    tasks = [(spec, p, s) for p in spec.policies for s in spec.seeds]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_episode, tasks, chunksize=1))
    else:
        results = [_episode(t) for t in tasks]
    by_policy: dict[str, list[EpisodeMetrics]] = {p: [] for p in spec.policies}
    for (_, p, _), m in zip(tasks, results, strict=True):
        by_policy[p].append(m)
    fair = by_policy.get("fair")
    seeds = spec.seeds
    rows: list[dict[str, Any]] = []
    for p in spec.policies:
        ms = by_policy[p]
        per_seed = [m.avg_jct_s for m in ms]
        row: dict[str, Any] = {
            "semantics": spec.semantics,
            "policy": p,
            "seed": f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0]),
            "seeds": list(seeds),
            "executors": spec.executors,
            "jobs": spec.jobs,
            "arrival_interval_s": spec.arrival_interval_s,
            "avg_jct_s": float(np.mean(per_seed)),
            "ci95_avg_jct_s": _ci95(per_seed),
            "p50_jct_s": float(np.mean([m.p50_jct_s for m in ms])),
            "p95_jct_s": float(np.mean([m.p95_jct_s for m in ms])),
            "makespan_s": float(np.mean([m.makespan_s for m in ms])),
            "executor_utilization": float(np.mean([m.executor_utilization for m in ms])),
            "avg_jobs_in_system": float(np.mean([m.avg_jobs_in_system for m in ms])),
            "finished_jobs": int(sum(m.finished for m in ms)),
            "per_seed_avg_jct_s": per_seed,
        }
        if spec.workflows:
            row["workflows"] = [Path(w).name for w in spec.workflows]
        if fair is not None:
            ratios = [m.avg_jct_s / f.avg_jct_s for m, f in zip(ms, fair, strict=True)]
            row["ratio_to_fair"] = float(np.mean(ratios))
            row["wins_vs_fair"] = int(sum(r < 1.0 for r in ratios))
        rows.append(row)
    return rows


def text_table(rows: Sequence[dict[str, Any]]) -> str:
    head = f"{'policy':<22}{'avg JCT s':>12}{'+-95%':>9}{'p95 s':>10}{'makespan s':>12}{'util':>7}"
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['policy']:<22}{r['avg_jct_s']:>12.1f}{r['ci95_avg_jct_s']:>9.1f}"
            f"{r['p95_jct_s']:>10.1f}{r['makespan_s']:>12.1f}{r['executor_utilization']:>7.3f}"
        )
    return "\n".join(lines)


def write_report(rows: Sequence[dict[str, Any]], spec: DagEvalSpec, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    workload = (
        f"{spec.jobs} WfCommons workflows ({', '.join(Path(w).name for w in spec.workflows)})"
        if spec.workflows
        else f"{spec.jobs} TPC-H jobs"
    )
    lines = [
        "# DAG evaluation",
        "",
        f"Semantics `{spec.semantics}`, {spec.executors} executors, {workload}, "
        f"mean arrival gap {spec.arrival_interval_s:g} s, seeds {rows[0]['seed']}.",
        "",
        "| policy | avg JCT (s) | +- 95 % | p50 (s) | p95 (s) | makespan (s) | utilisation "
        "| ratio to fair |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio_to_fair']:.3f}" if "ratio_to_fair" in r else "-"
        lines.append(
            f"| {r['policy']} | {r['avg_jct_s']:.1f} | {r['ci95_avg_jct_s']:.1f} "
            f"| {r['p50_jct_s']:.1f} | {r['p95_jct_s']:.1f} | {r['makespan_s']:.1f} "
            f"| {r['executor_utilization']:.3f} | {ratio} |"
        )
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kairos evaluate --domain dag",
        description="Run DAG episodes (TPC-H or WfCommons workflows) and compare DAG scheduling "
        "policies.",
    )
    p.add_argument("--domain", choices=["dag"], default="dag")
    p.add_argument("--semantics", choices=list(SEMANTICS), default="kairos")
    p.add_argument("--tpch", action="store_true", help="Decima's TPC-H DAGs (the workload)")
    p.add_argument("--tpch-file", type=Path, default=DEFAULT_TPCH, help=argparse.SUPPRESS)
    p.add_argument(
        "--workflows",
        nargs="+",
        metavar="FILE",
        help="WfCommons instances (WfFormat 1.5/1.6 JSON), each one DAG job of one-task stages",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="TPC-H jobs per episode (default 50); not with --workflows (each file is one job)",
    )
    p.add_argument(
        "--arrival-interval-s",
        type=float,
        default=25.0,
        help="mean Poisson gap in seconds; 0 puts every job at t = 0 (default 25)",
    )
    p.add_argument("--executors", type=int, required=True)
    p.add_argument(
        "--policies",
        required=True,
        help="comma-separated: heuristics (fair,fifo,fifo_static,sjf_cp,sjf_capped,"
        "weighted_fair(A),packer), decima / decima_argmax (the shipped Decima weights) and "
        "learned DAG models by name (dag-v1, dag-v1@1) or model directory",
    )
    p.add_argument("--seeds", default="0-9", help="A-B (inclusive) or a comma list")
    p.add_argument("--json", type=Path, help="write the result rows here (JSON)")
    p.add_argument("--report", type=Path, help="write a Markdown report into this directory")
    p.add_argument("--workers", type=int, default=1, help="episodes in N processes")
    return p


def _workload(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, ...]:
    """The ``--workflows`` files (empty for ``--tpch``); a usage error unless exactly one
    workload is given and, for TPC-H, its file exists."""
    if args.tpch == bool(args.workflows):
        parser.error("give --tpch or --workflows FILE [FILE ...] (one workload)")
    if args.tpch and not Path(args.tpch_file).is_file():
        parser.error(f"no TPC-H file at {args.tpch_file}")
    if args.workflows and args.jobs is not None:
        parser.error(
            "--jobs conflicts with --workflows: each workflow file is one job (drop --jobs, "
            "or give a file twice for two jobs)"
        )
    return tuple(str(w) for w in args.workflows or ())


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] == "evaluate":
        args_in = args_in[1:]
    parser = build_parser()
    args = parser.parse_args(args_in)
    workflows = _workload(parser, args)
    if args.jobs is None:
        args.jobs = len(workflows) if workflows else DEFAULT_TPCH_JOBS
    if args.executors < 1 or args.jobs < 1 or args.workers < 1:
        parser.error("--executors, --jobs and --workers must be >= 1")
    if args.arrival_interval_s < 0 or not math.isfinite(args.arrival_interval_s):
        parser.error("--arrival-interval-s must be a finite number >= 0")
    if args.json is None and args.report is None:
        parser.error("give --json FILE (the result rows), --report DIR (a Markdown report) or both")
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    if not policies:
        parser.error("--policies names no policy")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        parser.error(str(exc))
    spec = DagEvalSpec(
        semantics=cast(Semantics, args.semantics),
        executors=args.executors,
        jobs=args.jobs,
        arrival_interval_s=args.arrival_interval_s,
        policies=policies,
        seeds=seeds,
        tpch_path=str(args.tpch_file),
        workflows=workflows,
    )
    try:
        rows = evaluate_dag(spec, workers=args.workers)
    except (UnknownHeuristicError, WorkflowFileError, DagPolicyRefusedError) as exc:
        print(f"kairos evaluate: error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    if args.report is not None:
        write_report(rows, spec, args.report)
    print(text_table(rows))  # noqa: T201
    return 0
