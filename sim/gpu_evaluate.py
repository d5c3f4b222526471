"""``kairos evaluate --domain gpu``: GPU training-job workloads under one simulator semantics
(``pollux-compat``, ``philly-rigid``, ``kairos``), policies compared on the same jobs.

Workload files (CSV with a header row), detected by their columns:

* Pollux's ``name,time,application,num_replicas,batch_size`` (``pollux-compat`` only);
* rigid ``name,time,num_gpus,duration`` with optional ``user`` (the tenant) and ``estimate``
  (seconds); times in seconds from the first arrival.

One JSON row per (workload, policy): ``workload`` (file stem), ``semantics``, ``policy``,
``avg_jct_s``, ``p50_jct_s``, ``p99_jct_s``, ``makespan_s``, ``gpu_utilization``,
``preemptions`` and ``jcts_s`` (every job's JCT, in the file's row order).

``--policies`` takes heuristic names and learned GPU policies: a shipped model's name
(``gpu-v1``, ``gpu-v1@1``) or a model directory path, resolved by a registered GPU policy loader
(:func:`register_gpu_policy_loader`; ``kairos evaluate`` registers the one of
:mod:`kairos.policy_loader`, since this package may not import ``app.policy``). A learned policy
decides through the same ``decide()`` walk as the heuristics under every semantics.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.domains.gpu.heuristics import heuristic_names
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.metrics import RunResult, summary
from app.domains.gpu.simulate import COMPAT_ALIASES, Semantics, SimJob, simulate
from app.kernel.errors import UnknownHeuristicError

__all__ = [
    "GpuPolicyLoader",
    "GpuPolicyRefusedError",
    "UnknownGpuPolicyError",
    "WorkloadFormatError",
    "build_parser",
    "evaluate_gpu",
    "main",
    "read_workload",
    "register_gpu_policy_loader",
    "resolve_policy",
]

POLLUX_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
RIGID_COLUMNS = ("name", "time", "num_gpus", "duration")
REPORT_MD = "report.md"


class WorkloadFormatError(ValueError):
    """A workload file that is neither Pollux's format nor the rigid one."""


class UnknownGpuPolicyError(ValueError):
    """A ``--policies`` entry that is no heuristic and that no GPU policy loader knows (or one
    whose model was refused)."""


class GpuPolicyRefusedError(UnknownGpuPolicyError):
    """A loader found the model but cannot use it (refused, or a path that is no model
    directory); the message names why."""


#: a learned GPU policy by name or model directory path; ``None``: not known to this loader
GpuPolicyLoader = Callable[[str], ScoredPolicy | None]
_loaders: list[GpuPolicyLoader] = []


def register_gpu_policy_loader(loader: GpuPolicyLoader) -> None:
    """Add a resolver of learned GPU policy names (idempotent)."""
    if loader not in _loaders:
        _loaders.append(loader)


def resolve_policy(spec: str) -> str | ScoredPolicy:
    """A heuristic's name as it is, else the learned policy a registered loader finds."""
    if spec in heuristic_names() or spec in COMPAT_ALIASES:
        return spec
    for loader in _loaders:
        found = loader(spec)
        if found is not None:
            return found
    hint = "no GPU policy loader is registered" if not _loaders else "no loader knows it"
    raise UnknownGpuPolicyError(
        f"unknown policy {spec!r}: not a heuristic ({', '.join(heuristic_names())}) and {hint}"
    )


def read_workload(path: Path) -> tuple[str, list[SimJob]]:
    """``("pollux" | "rigid", jobs in row order)``."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        cols = tuple(reader.fieldnames or ())
        rows = list(reader)
    try:
        if all(c in cols for c in POLLUX_COLUMNS):
            return "pollux", [
                SimJob(
                    id=r["name"],
                    arrival=float(r["time"]),
                    min_gpus=int(r["num_replicas"]),
                    max_gpus=int(r["num_replicas"]),
                    app=r["application"],
                    batch_size=int(r["batch_size"]),
                )
                for r in rows
            ]
        if all(c in cols for c in RIGID_COLUMNS):
            return "rigid", [
                SimJob(
                    id=r["name"],
                    arrival=float(r["time"]),
                    min_gpus=int(r["num_gpus"]),
                    max_gpus=int(r["num_gpus"]),
                    duration_s=float(r["duration"]),
                    estimate_s=float(r["estimate"]) if r.get("estimate") else None,
                    tenant=r.get("user") or "default",
                )
                for r in rows
            ]
    except (KeyError, ValueError) as exc:
        raise WorkloadFormatError(f"{path}: bad row ({exc})") from None
    raise WorkloadFormatError(
        f"{path}: columns {','.join(cols)} are neither Pollux's ({','.join(POLLUX_COLUMNS)}) "
        f"nor rigid ({','.join(RIGID_COLUMNS)}[,user][,estimate])"
    )


@dataclass(frozen=True, slots=True)
class GpuEvaluation:
    rows: list[dict[str, Any]]
    runs: dict[tuple[str, str], RunResult]


def evaluate_gpu(
    workloads: Sequence[Path],
    policies: Sequence[str],
    semantics: Semantics,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
) -> GpuEvaluation:
    """Every policy on every workload."""
    apps = None
    if semantics is Semantics.POLLUX_COMPAT:
        from sim.gpu_data import load_applications

        apps = load_applications()
    resolved = {p: resolve_policy(p) for p in policies}
    rows: list[dict[str, Any]] = []
    runs: dict[tuple[str, str], RunResult] = {}
    for path in workloads:
        kind, jobs = read_workload(path)
        if (kind == "pollux") != (semantics is Semantics.POLLUX_COMPAT):
            raise WorkloadFormatError(
                f"{path}: a {kind} workload; pollux-compat takes Pollux's format, "
                "philly-rigid and kairos the rigid one"
            )
        for policy in policies:
            res = simulate(
                jobs,
                resolved[policy],
                semantics,
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                apps=apps,
            )
            runs[(path.stem, policy)] = res
            rows.append(
                {
                    "workload": path.stem,
                    "semantics": semantics.value,
                    "policy": policy,
                    **summary(res),
                    "jcts_s": res.jcts,
                }
            )
    return GpuEvaluation(rows=rows, runs=runs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kairos evaluate --domain gpu",
        description="Simulate GPU training-job workloads and compare scheduling policies.",
    )
    p.add_argument("--domain", choices=["gpu"], required=True)
    p.add_argument("--semantics", choices=[s.value for s in Semantics], required=True)
    p.add_argument("--workload", type=Path, nargs="+", required=True, help="workload CSV files")
    p.add_argument("--nodes", type=int, help="nodes (pollux-compat 16, otherwise 8)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node (pollux-compat 4, otherwise 8)")
    p.add_argument(
        "--policies",
        required=True,
        help=f"comma-separated: {','.join(heuristic_names())}; under pollux-compat also the "
        "artifact's own tiresias and optimus and the elastic goodput; a learned GPU policy's "
        "name (gpu-v1) or model directory",
    )
    p.add_argument("--seed", type=int, default=0, help="accepted for symmetry; runs are seedless")
    p.add_argument("--json", type=Path, help="write the result rows here (JSON)")
    p.add_argument("--report", type=Path, help="write a Markdown report (with plots) here")
    return p


def _policies(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, ...]:
    policies = tuple(_spec(p) for p in args.policies.split(",") if p.strip())
    if not policies:
        parser.error("--policies names no policy")
    known = set(heuristic_names())
    if args.semantics == Semantics.POLLUX_COMPAT.value:
        known |= set(COMPAT_ALIASES)
    unknown = _unknown(parser, policies, known)
    if unknown:
        parser.error(
            f"--policies: unknown under {args.semantics}: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    for path in args.workload:
        if not path.is_file():
            parser.error(f"--workload: no such file: {path}")
    for name in ("nodes", "gpus_per_node"):
        v = getattr(args, name)
        if v is not None and v < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.json is None and args.report is None:
        parser.error("give --json FILE (the result rows), --report DIR (a Markdown report) or both")
    return policies


def _unknown(
    parser: argparse.ArgumentParser, policies: Sequence[str], known: set[str]
) -> list[str]:
    """The entries neither a heuristic nor a learned policy (a refused model: an error)."""
    unknown = []
    for p in policies:
        if p in known:
            continue
        try:
            if isinstance(resolve_policy(p), str):  # a heuristic not of these semantics
                unknown.append(p)
        except GpuPolicyRefusedError as exc:
            parser.error(f"--policies: {exc}")
        except UnknownGpuPolicyError:
            unknown.append(p)
    return unknown


def _spec(raw: str) -> str:
    """A heuristic's name lowercased; a model name or path as given."""
    p = raw.strip()
    return p.lower() if p.lower() in heuristic_names() or p.lower() in COMPAT_ALIASES else p


def text_table(rows: Sequence[dict[str, Any]]) -> str:
    width = max([len("policy"), *(len(str(r["policy"])) for r in rows)])
    head = (
        f"{'workload':<14} {'policy':<{width}} {'avg JCT s':>11} {'p50 s':>9} {'p99 s':>9} "
        f"{'makespan s':>11} {'util':>6} {'preempt':>8}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['workload']:<14} {r['policy']:<{width}} {r['avg_jct_s']:>11.2f} "
            f"{r['p50_jct_s']:>9.0f} {r['p99_jct_s']:>9.0f} {r['makespan_s']:>11.0f} "
            f"{r['gpu_utilization']:>6.3f} {r['preemptions']:>8d}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] == "evaluate":
        args_in = args_in[1:]
    parser = build_parser()
    args = parser.parse_args(args_in)
    policies = _policies(parser, args)
    try:
        result = evaluate_gpu(
            args.workload,
            policies,
            Semantics(args.semantics),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
    except (WorkloadFormatError, UnknownHeuristicError, UnknownGpuPolicyError, ValueError) as exc:
        print(f"kairos evaluate: error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result.rows, indent=1) + "\n")
    if args.report is not None:
        from sim.gpu_report import write_report

        write_report(result.rows, result.runs, args.report)
    print(text_table(result.rows))  # noqa: T201
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
