"""Evaluate policies on sequences of a trace (the engine behind ``kairos evaluate``).

Sequences follow RLScheduler's protocol (A.9): ``sequences`` start indices drawn with gym's
legacy seeding from ``seed`` (``randint(length, jobs - length - 1)``, or ``slice - length - 1``),
every policy runs on the identical sequences from an empty cluster, and a row reports the mean
over sequences of the per-sequence averages. ``start_job`` N > 0 draws the starts from
``randint(max(length, N), upper - length - 1)`` with the same generator, so every window lies in
jobs ``>= N`` (the part of a trace a model tuned on ``[0, N)`` did not see); N = 0 is exactly
the protocol above.

Policy names are heuristics (``app.domains.hpc.heuristics`` under ``kairos`` semantics,
RLScheduler's score functions under ``rlscheduler`` semantics) or, under ``kairos`` semantics,
learned policies
resolved by a **policy loader**: :func:`register_policy_loader` (called by whoever may import
``app.policy``, which this package must not), or an entry point in the group
``kairos.policy_loaders`` naming a ``Callable[[str], SteppingPolicy | OrderingPolicy | None]``.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from app.domains.hpc.heuristics import HEURISTIC_CLASSES, get_heuristic
from app.domains.hpc.metrics import (
    avg_bounded_slowdown,
    avg_wait,
    max_wait,
    user_fairness,
    utilization_makespan,
    utilization_rlscheduler,
)
from app.domains.hpc.policy import OrderingPolicy, RankingPolicy, SteppingPolicy
from app.domains.hpc.ranking import ScoringRanker
from app.domains.hpc.rlscheduler import (
    RlsPolicy,
    SequenceResult,
    legacy_gym_rng,
    sample_starts,
)
from app.domains.hpc.swf import SwfTrace, load_swf
from app.domains.hpc.types import Backfill
from app.kernel.errors import UnknownHeuristicError
from sim.engine import Semantics, run_sequence
from sim.progress import Progress

PolicyLoader = Callable[[str], OrderingPolicy | RankingPolicy | SteppingPolicy | None]
LOADER_ENTRY_POINT_GROUP = "kairos.policy_loaders"

ROW_KEYS = (
    "trace",
    "policy",
    "backfill",
    "semantics",
    "sequences",
    "length",
    "seed",
    "start_job",
    "bsld",
    "wait_s",
    "utilization",
    "per_sequence_bsld",
)

_loaders: list[PolicyLoader] = []


class UnknownPolicyError(ValueError):
    """A ``--policies`` name that is neither a heuristic nor known to any policy loader."""


class StartJobError(ValueError):
    """A ``start_job`` that leaves too few jobs for one sequence."""


def register_policy_loader(loader: PolicyLoader) -> None:
    """Add a resolver for non-heuristic policy names (e.g. ONNX models from ``app.policy``)."""
    if loader not in _loaders:
        _loaders.append(loader)


def _entry_point_loaders() -> list[PolicyLoader]:
    found: list[PolicyLoader] = []
    for ep in metadata.entry_points(group=LOADER_ENTRY_POINT_GROUP):
        found.append(ep.load())
    return found


def heuristic_names(semantics: Semantics) -> tuple[str, ...]:
    if semantics == "rlscheduler":
        return tuple(p.value for p in RlsPolicy)
    return tuple(HEURISTIC_CLASSES)


def resolve_policy(
    name: str, semantics: Semantics
) -> OrderingPolicy | RankingPolicy | SteppingPolicy | None:
    """The policy object for ``name`` (``None`` for a heuristic of ``rlscheduler`` semantics)."""
    key = name.strip().lower()
    loaders = [*_loaders, *_entry_point_loaders()]
    if semantics == "rlscheduler":
        if key in heuristic_names("rlscheduler"):
            return None
        for loader in loaders:
            policy = loader(name)
            if isinstance(policy, ScoringRanker):
                return policy
        raise UnknownPolicyError(
            f"unknown policy {name!r} for --semantics rlscheduler (heuristics: "
            f"{', '.join(heuristic_names('rlscheduler'))}, or a ranking ONNX model, card "
            "decision_mode: rank); stepping models run under --semantics kairos"
        )
    try:
        return get_heuristic(key)
    except UnknownHeuristicError:
        pass
    for loader in loaders:
        policy = loader(name)
        if policy is not None:
            return policy
    hint = (
        "no policy loader is registered (sim.evaluate.register_policy_loader or the "
        f"'{LOADER_ENTRY_POINT_GROUP}' entry point group)"
        if not loaders
        else "no registered policy loader knows it"
    )
    raise UnknownPolicyError(
        f"unknown policy {name!r}: not a heuristic ({', '.join(heuristic_names('kairos'))}) "
        f"and {hint}"
    )


@dataclass(frozen=True, slots=True)
class EvalSpec:
    trace_path: str
    policies: tuple[str, ...]
    backfill: Backfill
    semantics: Semantics
    sequences: int
    length: int
    seed: int
    batch_slice: int = 0
    #: sequences start at jobs >= start_job (0: RLScheduler's protocol, starts >= length)
    start_job: int = 0


def window_starts(
    n_jobs: int, length: int, count: int, seed: int, *, batch_slice: int = 0, start_job: int = 0
) -> list[int]:
    """Start indices of ``count`` sequences of ``length`` jobs, each at ``>= start_job``.

    ``start_job == 0`` is :func:`~app.domains.hpc.rlscheduler.sample_starts`; otherwise the
    same generator draws ``randint(max(length, start_job), upper - length - 1)``. Raises
    :class:`StartJobError` when no start is left, ``ValueError`` for a trace too short.
    """
    if start_job < 0:
        raise StartJobError(f"start_job must be >= 0, got {start_job}")
    if start_job == 0:
        return sample_starts(n_jobs, length, count, seed, batch_slice=batch_slice)
    upper = n_jobs if batch_slice == 0 else batch_slice
    low, high = max(length, start_job), upper - length - 1
    if high <= low:
        raise StartJobError(
            f"start_job {start_job} leaves too few jobs: sequences of {length} jobs starting at "
            f">= {low} need more than {low + length + 1} jobs, the trace"
            f"{' slice' if batch_slice else ''} has {upper}"
        )
    rng = legacy_gym_rng(seed)
    return [int(rng.randint(low, high)) for _ in range(count)]


@dataclass(frozen=True, slots=True)
class SequenceOutcome:
    policy: str
    sequence: int
    start: int
    bsld: float
    wait_s: float
    max_wait_s: float
    utilization: float
    utilization_makespan: float
    fairness: float
    waits: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Evaluation:
    rows: list[dict[str, Any]]
    outcomes: list[SequenceOutcome]
    starts: list[int]


# ---------------------------------------------------------------- worker side

_worker_trace: SwfTrace | None = None
_worker_path: str | None = None


def _trace_for(path: str) -> SwfTrace:
    global _worker_trace, _worker_path
    if _worker_trace is None or _worker_path != path:
        _worker_trace = load_swf(path)
        _worker_path = path
    return _worker_trace


def run_one(
    trace: SwfTrace,
    policy_name: str,
    start: int,
    length: int,
    backfill: Backfill,
    semantics: Semantics,
) -> SequenceResult:
    """One policy (by name, resolved as ``--policies`` does) on one sequence."""
    if semantics == "rlscheduler":
        learned = resolve_policy(policy_name, semantics)
        return run_sequence(
            trace, policy_name if learned is None else learned, start=start, length=length,
            backfill=backfill, semantics="rlscheduler",
        )  # fmt: skip
    policy = resolve_policy(policy_name, semantics)
    assert policy is not None
    return run_sequence(
        trace, policy, start=start, length=length, backfill=backfill, semantics="kairos"
    )


def _outcome(policy: str, sequence: int, start: int, res: SequenceResult) -> SequenceOutcome:
    return SequenceOutcome(
        policy=policy,
        sequence=sequence,
        start=start,
        bsld=avg_bounded_slowdown(res),
        wait_s=avg_wait(res),
        max_wait_s=max_wait(res),
        utilization=utilization_rlscheduler(res),
        utilization_makespan=utilization_makespan(res),
        fairness=user_fairness(res),
        waits=tuple((res.start - res.submit).tolist()),
    )


_Task = tuple[str, str, int, int, int, str, str]


def _work(task: _Task) -> SequenceOutcome:
    path, policy, sequence, start, length, backfill, semantics = task
    sem: Semantics = "rlscheduler" if semantics == "rlscheduler" else "kairos"
    res = run_one(_trace_for(path), policy, start, length, Backfill(backfill), sem)
    return _outcome(policy, sequence, start, res)


# ---------------------------------------------------------------- driver


def _results(tasks: list[_Task], workers: int) -> Iterator[SequenceOutcome]:
    if workers <= 1:
        for task in tasks:
            yield _work(task)
        return
    ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
    with ctx.Pool(processes=workers) as pool:
        yield from pool.imap(_work, tasks, chunksize=1)


def evaluate(spec: EvalSpec, *, workers: int = 1, progress: bool | None = None) -> Evaluation:
    """Run every policy on the same sequences; rows in the order of ``spec.policies``."""
    trace = _trace_for(spec.trace_path)
    for name in spec.policies:  # fail fast on unknown names, before any work
        resolve_policy(name, spec.semantics)
    starts = window_starts(
        trace.n_jobs,
        spec.length,
        spec.sequences,
        spec.seed,
        batch_slice=spec.batch_slice,
        start_job=spec.start_job,
    )
    tasks: list[_Task] = [
        (spec.trace_path, p, i, s, spec.length, spec.backfill.value, spec.semantics)
        for p in spec.policies
        for i, s in enumerate(starts)
    ]
    outcomes: list[SequenceOutcome] = []
    # progress=None: a bar on stderr when it is a terminal, nothing in CI or a pipe
    with Progress(len(tasks), "evaluate", "seq", enabled=progress) as bar:
        for outcome in _results(tasks, workers):
            outcomes.append(outcome)
            bar.update(1)
    rows = [
        _row(spec, trace.name, p, [o for o in outcomes if o.policy == p]) for p in spec.policies
    ]
    return Evaluation(rows=rows, outcomes=outcomes, starts=starts)


def _row(
    spec: EvalSpec, trace_name: str, policy: str, outcomes: Sequence[SequenceOutcome]
) -> dict[str, Any]:
    outcomes = sorted(outcomes, key=lambda o: o.sequence)
    return {
        "trace": trace_name,
        "policy": policy,
        "backfill": spec.backfill.value,
        "semantics": spec.semantics,
        "sequences": spec.sequences,
        "length": spec.length,
        "seed": spec.seed,
        "start_job": spec.start_job,
        "bsld": float(np.mean([o.bsld for o in outcomes])),
        "wait_s": float(np.mean([o.wait_s for o in outcomes])),
        "utilization": float(np.mean([o.utilization for o in outcomes])),
        "per_sequence_bsld": [o.bsld for o in outcomes],
    }


def write_json(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=2) + "\n")
