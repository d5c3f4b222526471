"""Site tuning: adapt the learned HPC policy to one cluster's own history, behind a guard.

Interface (``kairos tune`` and the service's tune task call exactly this)::

    tune(history, *, backfill, from_model, time_budget_s, workers, seed, out_dir,
         progress=None, machine=None, name="hpc-tuned", version="1", command=None,
         config=None) -> TuneResult

* ``history``: the site's finished jobs, in submit order: an
  :class:`~app.domains.hpc.swf.SwfTrace` (the machine from its header) or a sequence of
  :class:`HistoryJob` (then ``machine`` is required). All of it is history: nothing after it is
  read, so a later evaluation on jobs after the history sees jobs tuning never saw.
* ``backfill``: the cluster's backfilling mode; every simulation uses it.
* ``from_model``: a ranking model directory (``policy.onnx`` + ``card.json``, ES architecture) to
  start from; ``None``: the shipped default of ``backfill``
  (:func:`shipped_default_dir`: ``KAIROS_DEFAULT_POLICY`` or ``KAIROS_DEFAULT_POLICY_NO_BACKFILL``,
  newest version).
* ``time_budget_s``: wall-clock bound of the whole procedure (validation, training, output);
  ``workers``: simulator processes (1: in this process); ``seed``: the training's random stream.
* ``out_dir``: must not exist or be empty; receives the winner, written atomically (a sibling
  staging directory renamed into place): a model directory (``policy.onnx`` + ``card.json``,
  ``decision_mode: rank``) when a learned candidate wins, else a ``card.json`` of
  ``"kind": "heuristic"`` whose ``"recommendation"`` names the heuristic (served as that
  heuristic by the model registry and ``kairos evaluate --policies DIR``).
* ``progress(fraction, message)``: called as work completes (``fraction`` in [0, 1], rising).
* Raises :class:`TuneError` (with the reason) when the history is too short, the start model is
  not an ES ranking model, ``out_dir`` is taken, or the budget ends before every heuristic was
  validated; then nothing is written. Candidates the budget leaves no time for are left out
  of the comparison (the table lists those that ran).

The procedure (:class:`TuneConfig` holds its constants):

1. The latest ``val_fraction`` of the history (at least one window's worth of jobs) is held out:
   validation windows of ``window_length`` jobs, evenly spaced over those jobs. Training windows
   lie entirely before the first held-out job, so no job is in both.
2. Candidates on the validation windows, all on the identical windows: every heuristic, the
   start model(s) (``from_model`` and the shipped default), the models tuned by evolution
   strategies (OpenAI-ES on the simulator's engine, the metric itself relative to the best
   heuristic, as ``training/es.py``; snapshots along the run) and their blends with SJF
   (:func:`~app.tuning.scorer.shrink_toward_sjf`).
   Every candidate also runs on ``earlier_windows`` windows evenly spaced over the history
   before the held-out part (they may overlap training windows, so they can only count against
   a tuned model, never for it, in the guard below).
3. The guard: a candidate's score is the larger of its two ratios to the best heuristic (on
   the held-out latest windows, and on the earlier windows): it must hold in the latest period
   and across the history. The best heuristic is the heuristic of the smallest score; a
   learned candidate wins only when its score is at or below ``guard_ratio`` times that
   heuristic's, and the learned candidate of the smallest score is then the winner. A site's
   own history never promotes a learned policy it says is worse than a heuristic.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION, NUM_FEATURES
from app.domains.hpc.heuristics import HEURISTIC_CLASSES, get_heuristic
from app.domains.hpc.metrics import avg_bounded_slowdown
from app.domains.hpc.simulate import simulate_workload, workload_from_trace
from app.domains.hpc.swf import SwfTrace
from app.domains.hpc.types import Backfill
from app.policy.onnx_policy import CARD_FILE, MODEL_FILE, describe_signature
from app.policy.registry import PACKAGED_MODELS, version_key
from app.settings import Settings
from app.tuning.card import HEURISTIC_KIND, RECOMMENDATION_KEY
from app.tuning.scorer import (
    OPSET,
    NumpyRanker,
    Shapes,
    build_onnx,
    shrink_toward_sjf,
    theta_from_onnx,
)

Theta = npt.NDArray[np.float64]
Kind = Literal["model", "heuristic"]
Progress = Callable[[float, str], None]
#: the heuristics the training cost compares against (the evaluation protocol's)
REFERENCE_HEURISTICS: tuple[str, ...] = ("fcfs", "sjf", "wfp3", "unicep", "f1")


class TuneError(Exception):
    """Tuning could not run or produce a winner; ``reason`` says why (nothing was written)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class HistoryJob:
    """One finished job of a cluster's history (SWF's columns that scheduling uses)."""

    job_id: int
    submit_time: float
    #: actual run time (s), > 0
    run_time: float
    #: total processors (gang size x cpus per task), >= 1
    processors: int
    #: requested walltime (s); the run time when the site records none
    request_time: float
    user_id: int = -1


@dataclass(frozen=True, slots=True)
class Machine:
    """The cluster: ``max_nodes`` whole nodes holding ``max_procs`` processors in all."""

    max_nodes: int
    max_procs: int


@dataclass(frozen=True, slots=True)
class TuneConfig:
    """The procedure's constants (the defaults are the ones ``kairos tune`` uses)."""

    window_length: int = 1024
    #: the latest fraction of the history held out for validation
    val_fraction: float = 0.3
    val_windows: int = 16
    #: windows evenly spaced over the history before the held-out part (0: none); the guard
    #: also asks a candidate to hold there, so one recent period cannot decide alone
    earlier_windows: int = 16
    #: a learned candidate wins only at or below this times the best heuristic's validation bsld
    guard_ratio: float = 0.98
    heuristics: tuple[str, ...] = tuple(HEURISTIC_CLASSES)
    #: SJF blends of each learned candidate (1.0 is the candidate itself)
    blends: tuple[float, ...] = (0.5,)
    #: tuned snapshots validated (evenly spaced over the generations run, the last included)
    snapshots: int = 2
    pairs: int = 8
    windows_per_generation: int = 4
    sigma: float = 0.04
    learning_rate: float = 0.02
    weight_decay: float = 0.001
    window_loss_weight: float = 1.0
    max_generations: int = 100_000


@dataclass(frozen=True, slots=True)
class ValidationRow:
    candidate: str
    kind: Kind
    #: mean over the validation windows of each window's average bounded slowdown
    avg_bsld: float
    #: ``avg_bsld`` over the best heuristic's
    ratio: float
    #: the same ratio on the earlier history's windows (``None`` without them)
    earlier_ratio: float | None = None
    #: what the guard compares: the larger of the two ratios
    score: float = 0.0


@dataclass(frozen=True, slots=True)
class TuneResult:
    winner: str
    kind: Kind
    table: list[ValidationRow]
    card: dict[str, Any]
    model_dir: Path


@dataclass(frozen=True, slots=True)
class Split:
    """Job ranges of a history of ``jobs`` jobs: training windows end at or before
    ``val_first``; validation windows start at or after it."""

    jobs: int
    length: int
    val_first: int
    train_starts: npt.NDArray[np.int64]
    val_starts: tuple[int, ...]
    #: windows over the history before ``val_first`` (they may overlap training windows)
    early_starts: tuple[int, ...] = ()


def history_trace(jobs: Sequence[HistoryJob], machine: Machine, name: str = "history") -> SwfTrace:
    """``jobs`` as a trace ordered by submit time, then id (the order SWF loading gives)."""
    if machine.max_nodes < 1 or machine.max_procs < machine.max_nodes:
        raise TuneError(f"machine {machine} needs max_nodes >= 1 and max_procs >= max_nodes")
    rows = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
    for j in rows:
        if not (j.run_time > 0 and j.processors >= 1 and j.processors <= machine.max_procs):
            raise TuneError(
                f"history job {j.job_id}: run_time must be > 0 and processors in "
                f"[1, {machine.max_procs}] (got {j.run_time}, {j.processors})"
            )

    def col(values: Sequence[float | int]) -> npt.NDArray[np.int64]:
        return np.asarray(values, dtype=np.int64).reshape(len(rows))

    none = col([-1] * len(rows))
    return SwfTrace(
        name=name,
        job_id=col([j.job_id for j in rows]),
        submit_time=col([math.floor(j.submit_time) for j in rows]),
        run_time=col([max(1, round(j.run_time)) for j in rows]),
        processors=col([j.processors for j in rows]),
        request_time=col([max(0, round(j.request_time)) for j in rows]),
        request_memory=none,
        user_id=col([j.user_id for j in rows]),
        group_id=none,
        executable=none,
        max_nodes=machine.max_nodes,
        max_procs=machine.max_procs,
        max_exec_time=max((max(1, round(j.run_time)) for j in rows), default=0),
    )


def first_jobs(trace: SwfTrace, n: int) -> SwfTrace:
    """Jobs ``[0, n)`` of ``trace`` (in its order), the machine and its header unchanged."""
    if not 0 < n <= trace.n_jobs:
        raise TuneError(f"the history must be jobs [0, N) with N in [1, {trace.n_jobs}], got {n}")
    cut = {
        f.name: getattr(trace, f.name)[:n]
        for f in fields(trace)
        if isinstance(getattr(trace, f.name), np.ndarray)
    }
    return replace(trace, **cut)


def split_history(jobs: int, config: TuneConfig) -> Split:
    """Hold out the latest jobs for validation (see the module docstring); raises
    :class:`TuneError` when the history cannot hold a training and a validation window."""
    length = config.window_length
    held = max(length, math.ceil(config.val_fraction * jobs))
    val_first = jobs - held
    if val_first < length or config.val_windows < 1:
        raise TuneError(
            f"too little history: {jobs} jobs; tuning needs at least "
            f"{max(2 * length, math.ceil(length / (1 - config.val_fraction)))} (one window of "
            f"{length} jobs to train on before the held-out latest {config.val_fraction:.0%})"
        )
    last = jobs - length
    count = min(config.val_windows, last - val_first + 1)
    val = sorted({round(float(s)) for s in np.linspace(val_first, last, count)})
    train = np.arange(0, val_first - length + 1, dtype=np.int64)
    early_count = min(config.earlier_windows, val_first - length + 1)
    early = sorted({round(float(s)) for s in np.linspace(0, val_first - length, early_count)})
    return Split(jobs, length, val_first, train, tuple(val), tuple(early))


def shipped_default_dir(backfill: Backfill, settings: Settings | None = None) -> Path:
    """The newest version directory of the service's default policy for ``backfill``
    (``MODELS_DIR`` first, then the models installed with the package)."""
    conf = settings if settings is not None else Settings()
    name = conf.default_policy_for(backfill.value)
    homes = [Path(conf.MODELS_DIR) / name]
    if conf.SHIPPED_MODELS:
        homes.append(PACKAGED_MODELS / name)
    for home in homes:
        versions = [p for p in home.glob("*/") if (p / MODEL_FILE).is_file()]
        if versions:
            return max(versions, key=lambda p: version_key(p.name))
    raise TuneError(f"no shipped default model {name!r} for backfill {backfill.value}")


def load_ranker(directory: Path) -> tuple[Shapes, Theta]:
    """The ES ranking model in ``directory``: its shapes (from the card) and parameters."""
    try:
        card = json.loads((directory / CARD_FILE).read_text())
        hidden = tuple(int(h) for h in card["architecture"]["hidden"])
        features = int(card["architecture"].get("features", NUM_FEATURES))
        if card.get("decision_mode") != "rank" or len(hidden) != 2 or features != NUM_FEATURES:
            raise ValueError("not a ranking scorer of the encoder's features")
        shapes = Shapes(features, (hidden[0], hidden[1]))
        return shapes, theta_from_onnx(shapes, directory / MODEL_FILE)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TuneError(
            f"{directory}: not an ES ranking model directory (policy.onnx + card.json with "
            f"decision_mode rank and architecture.hidden): {exc}"
        ) from exc


# ---------------------------------------------------------------- simulations (pool or inline)

_trace: SwfTrace | None = None
_shapes: Shapes | None = None

#: (heuristic name or scorer parameters, window start, window length, backfill)
Task = tuple[str | Theta, int, int, str]


def _init(trace: SwfTrace, shapes: Shapes) -> None:
    global _trace, _shapes
    _trace, _shapes = trace, shapes


def _bsld(task: Task) -> float:
    spec, start, length, backfill = task
    assert _trace is not None
    assert _shapes is not None
    policy: Any = get_heuristic(spec) if isinstance(spec, str) else NumpyRanker(_shapes, spec)
    workload = workload_from_trace(_trace, start, length)
    return avg_bounded_slowdown(simulate_workload(workload, policy, Backfill(backfill)))


class _Simulator:
    """Runs tasks in ``workers`` processes (forkserver: safe from a threaded service)."""

    def __init__(self, trace: SwfTrace, shapes: Shapes, workers: int) -> None:
        self.workers = workers
        self.pool: Any = None
        if workers > 1:
            ctx = mp.get_context(
                "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
            )
            self.pool = ctx.Pool(workers, _init, (trace, shapes))
        else:
            _init(trace, shapes)

    def run(self, tasks: list[Task]) -> list[float]:
        if self.pool is None:
            return [_bsld(t) for t in tasks]
        chunk = max(1, len(tasks) // (4 * self.workers))
        return list(self.pool.map(_bsld, tasks, chunksize=chunk))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


# ---------------------------------------------------------------- the procedure


@dataclass
class _Candidate:
    name: str
    kind: Kind
    spec: str | Theta
    values: list[float] = field(default_factory=list)
    early: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def early_mean(self) -> float:
        return float(np.mean(self.early)) if self.early else math.nan


@dataclass
class _Clock:
    budget_s: float
    report: Progress | None
    started: float = field(default_factory=time.monotonic)
    fraction: float = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def tell(self, message: str, fraction: float | None = None) -> None:
        share = self.elapsed() / self.budget_s if fraction is None else fraction
        self.fraction = min(1.0, max(self.fraction, share))
        if self.report is not None:
            self.report(self.fraction, message)


def _blends(base: str, theta: Theta, shapes: Shapes, config: TuneConfig) -> list[_Candidate]:
    out = [_Candidate(base, "model", theta)]
    for alpha in config.blends:
        if 0.0 <= alpha < 1.0:
            out.append(
                _Candidate(
                    f"{base}+sjf@{alpha:g}", "model", shrink_toward_sjf(shapes, theta, alpha)
                )
            )
    return out


def _validate(
    sim: _Simulator, cands: list[_Candidate], split: Split, backfill: Backfill, clock: _Clock
) -> tuple[list[_Candidate], float]:
    """Run ``cands`` one by one on every validation window while the budget allows the next
    (expected to take as long as the last); returns those run and the seconds of the last."""
    starts = [*split.val_starts, *split.early_starts]
    v = len(split.val_starts)
    done: list[_Candidate] = []
    last_s = 0.0
    for c in cands:
        if clock.left() <= last_s:
            break
        t0 = time.monotonic()
        values = sim.run([(c.spec, s, split.length, backfill.value) for s in starts])
        c.values, c.early = values[:v], values[v:]
        done.append(c)
        last_s = time.monotonic() - t0
    return done, last_s


def _rows(heur: list[_Candidate], learned: list[_Candidate]) -> list[ValidationRow]:
    """Every candidate's ratios to the best heuristic of each window set, best score first."""
    best = min(c.mean for c in heur)
    best_early = min(c.early_mean for c in heur) if heur[0].early else math.nan
    rows = []
    for c in [*heur, *learned]:
        ratio = c.mean / best
        early = c.early_mean / best_early if c.early else None
        score = ratio if early is None else max(ratio, early)
        rows.append(ValidationRow(c.name, c.kind, c.mean, ratio, early, score))
    return sorted(rows, key=lambda r: (r.score, r.avg_bsld, r.candidate))


def _cost(values: Sequence[float], ref: Sequence[float], window_loss_weight: float) -> float:
    """``log(sum / reference sum)`` plus the weight times the mean per-window loss
    ``max(0, log(value / reference))`` (the objective of ``training/es.py``)."""
    cost = math.log(sum(values) / sum(ref))
    losses = [max(0.0, math.log(v / r)) for v, r in zip(values, ref, strict=True)]
    return cost + window_loss_weight * float(np.mean(losses))


def _centred_ranks(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    return ranks / (len(x) - 1) - 0.5


@dataclass
class _EsRun:
    snapshots: list[tuple[int, Theta]]
    generations: int


def _evolve(
    sim: _Simulator,
    theta0: Theta,
    shapes: Shapes,
    split: Split,
    backfill: Backfill,
    config: TuneConfig,
    seed: int,
    deadline: Callable[[float], bool],
    clock: _Clock,
    first_gen_s: float,
) -> _EsRun:
    """OpenAI-ES (antithetic pairs, centred ranks, Adam) from ``theta0`` on training windows,
    while ``deadline(expected generation seconds)`` is false (the first is expected to take
    ``first_gen_s``, each later one as long as the last)."""
    rng = np.random.default_rng(seed)
    theta = theta0.copy()
    decay = shapes.decayed()
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    beta1, beta2 = 0.9, 0.999
    history: list[tuple[int, Theta]] = []
    gen_s = first_gen_s
    gen = 0
    while gen < config.max_generations and not deadline(gen_s):
        t0 = time.monotonic()
        gen += 1
        batch = [int(s) for s in rng.choice(split.train_starts, size=config.windows_per_generation)]
        ref_tasks: list[Task] = [
            (h, s, split.length, backfill.value) for h in REFERENCE_HEURISTICS for s in batch
        ]
        ref_values = sim.run(ref_tasks)
        w = len(batch)
        per = [ref_values[i * w : (i + 1) * w] for i in range(len(REFERENCE_HEURISTICS))]
        ref = min(per, key=sum)
        eps = rng.standard_normal((config.pairs, theta.size))
        cands = [theta + config.sigma * e for e in eps] + [theta - config.sigma * e for e in eps]
        values = sim.run([(c, s, split.length, backfill.value) for c in cands for s in batch])
        costs = np.array(
            [
                _cost(values[i * w : (i + 1) * w], ref, config.window_loss_weight)
                for i in range(len(cands))
            ]
        )
        shaped = _centred_ranks(costs)
        weights = shaped[: config.pairs] - shaped[config.pairs :]
        grad = (weights @ eps) / (2 * config.pairs * config.sigma)
        grad = grad + config.weight_decay * theta * decay
        m = beta1 * m + (1 - beta1) * grad
        v = beta2 * v + (1 - beta2) * grad * grad
        step = m / (1 - beta1**gen) / (np.sqrt(v / (1 - beta2**gen)) + 1e-8)
        theta = theta - config.learning_rate * step
        history.append((gen, theta.copy()))
        gen_s = time.monotonic() - t0
        clock.tell(f"training: generation {gen}, population cost {float(costs.mean()):.4f}")
    if not history:
        return _EsRun([], 0)
    k = max(1, config.snapshots)
    picks = sorted({round(i * len(history) / k) - 1 for i in range(1, k + 1)})
    return _EsRun([history[i] for i in picks if i >= 0], gen)


def tune(
    history: SwfTrace | Sequence[HistoryJob],
    *,
    backfill: Backfill,
    from_model: Path | None,
    time_budget_s: float,
    workers: int,
    seed: int,
    out_dir: Path,
    progress: Progress | None = None,
    machine: Machine | None = None,
    name: str = "hpc-tuned",
    version: str = "1",
    command: str | None = None,
    config: TuneConfig | None = None,
) -> TuneResult:
    """Tune, validate with the guard and write the winner (see the module docstring)."""
    conf = config if config is not None else TuneConfig()
    clock = _Clock(time_budget_s, progress)
    if time_budget_s <= 0 or workers < 1:
        raise TuneError("time_budget_s must be > 0 and workers >= 1")
    trace = _as_trace(history, machine)
    split = split_history(trace.n_jobs, conf)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise TuneError(f"{out_dir} exists and is not an empty directory")
    default_dir = shipped_default_dir(backfill)
    start_dir = from_model if from_model is not None else default_dir
    shapes, theta0 = load_ranker(start_dir)
    starts = _start_models(start_dir, default_dir, shapes, theta0)
    sim = _Simulator(trace, shapes, workers)
    try:
        clock.tell("validating the heuristics", 0.0)
        heur = [_Candidate(h, "heuristic", h) for h in conf.heuristics]
        if len(_validate(sim, heur, split, backfill, clock)[0]) < len(heur):
            raise TuneError(
                f"the time budget of {time_budget_s:g} s ended before every heuristic was validated"
            )
        clock.tell("validating the start models")
        learned = [c for label, theta in starts for c in _blends(label, theta, shapes, conf)]
        learned, per_candidate_s = _validate(sim, learned, split, backfill, clock)
        # training stops in time to validate the last snapshot and its blends; earlier
        # snapshots are validated after them while the budget allows
        reserve_s = 1.25 * per_candidate_s * (1 + len(conf.blends)) + 2.0
        window_s = per_candidate_s / (len(split.val_starts) + len(split.early_starts))
        sims = (2 * conf.pairs + len(REFERENCE_HEURISTICS)) * conf.windows_per_generation
        clock.tell("training")

        def deadline(gen_s: float) -> bool:
            return clock.left() < reserve_s + gen_s

        run = _evolve(
            sim, theta0, shapes, split, backfill, conf, seed, deadline, clock, window_s * sims
        )
        tuned: list[_Candidate] = []
        for gen, theta in reversed(run.snapshots):
            tuned += _blends(f"tuned@{gen}", theta, shapes, conf)
        if tuned:
            clock.tell("validating the tuned models")
            learned += _validate(sim, tuned, split, backfill, clock)[0]
    finally:
        sim.close()
    table = _rows(heur, learned)
    best_h = next(r for r in table if r.kind == "heuristic")
    best_l = next((r for r in table if r.kind == "model"), None)
    guarded = best_l is not None and best_l.score <= conf.guard_ratio * best_h.score
    winner_row = best_l if guarded and best_l is not None else best_h
    winner = next(c for c in [*heur, *learned] if c.name == winner_row.candidate)
    record: dict[str, Any] = {
        "procedure": "app.tuning.procedure.tune",
        "command": command,
        "history_jobs": split.jobs,
        "history_first_job_id": int(trace.job_id[0]),
        "history_last_job_id": int(trace.job_id[-1]),
        "training_job_range": [0, split.val_first],
        "validation_job_range": [split.val_first, split.jobs],
        "validation_window_starts": list(split.val_starts),
        "earlier_window_starts": list(split.early_starts),
        "window_length": split.length,
        "backfill": backfill.value,
        "started_from": str(start_dir),
        "shipped_default": str(default_dir),
        "seed": seed,
        "workers": workers,
        "time_budget_s": time_budget_s,
        "generations": run.generations,
        "guard": "score = the larger of a candidate's ratios to the best heuristic on the "
        "held-out latest windows and on the earlier windows; a learned candidate wins only at "
        f"or below {conf.guard_ratio} x the best heuristic's score",
        "best_heuristic": best_h.candidate,
        "winner": winner.name,
        "table": [asdict(r) for r in table],
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(conf).items()},
        "wall_s": round(clock.elapsed(), 1),
    }
    card = _card(name, version, winner, shapes, record)
    _write(out_dir, card, shapes, winner, name, version)
    clock.tell(f"winner: {winner.name}", 1.0)
    return TuneResult(winner.name, winner.kind, table, card, out_dir)


def _as_trace(history: SwfTrace | Sequence[HistoryJob], machine: Machine | None) -> SwfTrace:
    if isinstance(history, SwfTrace):
        return history
    if machine is None:
        raise TuneError("a history of jobs needs its machine (max_nodes, max_procs)")
    return history_trace(history, machine)


def _start_models(
    start_dir: Path, default_dir: Path, shapes: Shapes, theta0: Theta
) -> list[tuple[str, Theta]]:
    """The start model, and the shipped default beside it when tuning starts elsewhere."""
    out = [(f"start:{_label(start_dir)}", theta0)]
    if default_dir.resolve() != start_dir.resolve():
        d_shapes, d_theta = load_ranker(default_dir)
        if d_shapes == shapes:
            out.append((f"default:{_label(default_dir)}", d_theta))
    return out


def _label(directory: Path) -> str:
    return f"{directory.parent.name}@{directory.name}"


def _card(
    name: str, version: str, winner: _Candidate, shapes: Shapes, record: dict[str, Any]
) -> dict[str, Any]:
    if winner.kind == "heuristic":
        return {
            "name": name,
            "version": version,
            "domain": "hpc",
            "kind": HEURISTIC_KIND,
            RECOMMENDATION_KEY: winner.name,
            "tuning": record,
        }
    return {
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
        "training": {
            "algorithm": "site tuning (app.tuning.procedure): evolution strategies (OpenAI-ES:"
            " antithetic sampling, centred ranks, Adam) on the simulator's engine from"
            f" {record['started_from']}, objective: log(sum of bsld / the best heuristic's) on"
            " the site's history windows plus the mean per-window loss; chosen on the held-out"
            " latest history behind the guard",
            "command": record["command"],
            "generations": record["generations"],
        },
        "seeds": {"training": record["seed"]},
        "metrics": {"validation": [r for r in record["table"] if r["candidate"] == winner.name]},
        "tuning": record,
    }


def _write(
    out_dir: Path,
    card: dict[str, Any],
    shapes: Shapes,
    winner: _Candidate,
    name: str,
    version: str,
) -> None:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        if winner.kind == "model":
            assert not isinstance(winner.spec, str)
            model = build_onnx(shapes, winner.spec, {"name": name, "version": version})
            (staging / MODEL_FILE).write_bytes(model)
        (staging / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
        if out_dir.exists():
            out_dir.rmdir()  # checked empty before any work
        os.rename(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
