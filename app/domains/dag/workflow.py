"""Scientific workflows (WfCommons instances) as DAG jobs of the simulator: the pure conversion
from plain task records to the simulator's DAG type, and the episode of a workflow stream.

Invariants of :func:`workflow_dag`:

* each task is one stage of one task whose every duration draw is the task's runtime, rounded
  to whole milliseconds (fresh, first-wave and rest-wave lists all hold that one value, so no
  warm-up delay is added); the duration estimate every semantics sees is that runtime;
* stages are in a topological order, ties by the tasks' order in the instance; ``edges`` are
  (parent, child) stage indices and ``task_ids[i]`` names stage ``i``;
* task ids are unique and non-empty, every parent is a task of the same workflow, a task is not
  its own parent, the graph has no cycle and runtimes are finite and >= 0; anything else is a
  :class:`WorkflowError` naming the task.

:func:`workflow_arrivals`: per seed, the instances in a random order (a permutation drawn from
``default_rng(seed)``), the first at t = 0 and the rest after exponential gaps of mean
``interval_ms`` from the same generator (all at t = 0 when the interval is 0).  The same arrival
process serves every semantics (decima-sim and spark-sched-sim have none for workflows).
Reading the files is :mod:`sim.dag_workflows`' job: no I/O here.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.domains.dag.policy import DagPolicy
from app.domains.dag.simulate import EpisodeResult, JobArrival, SimConfig, run_jobs
from app.domains.dag.tpch import EXECUTOR_LEVELS, StageRecord, TpchDag

__all__ = [
    "WorkflowDag",
    "WorkflowError",
    "WorkflowTask",
    "run_workflow_episode",
    "workflow_arrivals",
    "workflow_dag",
]


class WorkflowError(ValueError):
    """A workflow that cannot be a DAG job (unknown parent, cycle, bad runtime, duplicate id)."""


@dataclass(frozen=True, slots=True)
class WorkflowTask:
    id: str
    runtime_s: float
    parents: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkflowDag(TpchDag):
    """A workflow as the simulator's DAG: one one-task stage per workflow task."""

    label: str = ""
    #: the workflow task id of each stage
    task_ids: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.label


def _record(runtime_s: float) -> StageRecord:
    ms = round(runtime_s * 1000.0)
    one = (ms,)
    return StageRecord(
        num_tasks=1,
        first_wave={EXECUTOR_LEVELS[0]: one},
        rest_wave={EXECUTOR_LEVELS[0]: one},
        fresh={EXECUTOR_LEVELS[0]: one},
        rough_duration_ms=float(ms),
        raw_mean_ms=float(ms),
    )


def _cycle_through(start: str, parents: dict[str, tuple[str, ...]]) -> list[str]:
    """A cycle among the tasks left after Kahn's walk (each has a parent left)."""
    path: list[str] = []
    seen: dict[str, int] = {}
    node = start
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = next(p for p in parents[node] if p in parents)
    return [*path[seen[node] :], node]


def _checked(name: str, tasks: Sequence[WorkflowTask]) -> dict[str, int]:
    """Each task id's position; raises :class:`WorkflowError` on ids, runtimes or parents."""
    if not tasks:
        raise WorkflowError(f"workflow {name!r} has no task")
    position: dict[str, int] = {}
    for k, t in enumerate(tasks):
        if not t.id:
            raise WorkflowError(f"workflow {name!r}: task #{k} has an empty id")
        if t.id in position:
            raise WorkflowError(f"workflow {name!r}: task id {t.id!r} appears twice")
        position[t.id] = k
        if not (math.isfinite(t.runtime_s) and t.runtime_s >= 0):
            raise WorkflowError(
                f"workflow {name!r}: task {t.id!r} needs a finite runtime >= 0, got {t.runtime_s}"
            )
    for t in tasks:
        for p in t.parents:
            if p == t.id:
                raise WorkflowError(f"workflow {name!r}: task {t.id!r} is its own parent")
            if p not in position:
                raise WorkflowError(f"workflow {name!r}: task {t.id!r} has unknown parent {p!r}")
    return position


def _topological(
    name: str,
    tasks: Sequence[WorkflowTask],
    parents: list[tuple[str, ...]],
    position: dict[str, int],
) -> list[int]:
    """Kahn's walk, the smallest instance position first among the ready tasks."""
    indeg = [len(ps) for ps in parents]
    children: list[list[int]] = [[] for _ in tasks]
    for k, ps in enumerate(parents):
        for p in ps:
            children[position[p]].append(k)
    ready = [k for k, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for c in children[k]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    if len(order) < len(tasks):
        left = {tasks[k].id: parents[k] for k, d in enumerate(indeg) if d > 0}
        cycle = _cycle_through(next(iter(left)), left)
        raise WorkflowError(
            f"workflow {name!r} is cyclic: task {cycle[0]!r} depends on itself through "
            + " <- ".join(repr(c) for c in cycle)
        )
    return order


def workflow_dag(name: str, tasks: Sequence[WorkflowTask]) -> WorkflowDag:
    """The DAG job of a workflow (see the module doc for the invariants)."""
    position = _checked(name, tasks)
    parents = [tuple(dict.fromkeys(t.parents)) for t in tasks]
    order = _topological(name, tasks, parents, position)
    stage_of = {k: i for i, k in enumerate(order)}
    return WorkflowDag(
        query=0,
        size="workflow",
        stages=tuple(_record(tasks[k].runtime_s) for k in order),
        edges=tuple((stage_of[position[p]], stage_of[k]) for k in order for p in parents[k]),
        label=name,
        task_ids=tuple(tasks[k].id for k in order),
    )


def workflow_arrivals(dags: Sequence[TpchDag], seed: int, interval_ms: float) -> list[JobArrival]:
    """The seeded Poisson stream of the instances (see the module doc)."""
    if not (math.isfinite(interval_ms) and interval_ms >= 0):
        raise ValueError(f"interval_ms must be finite and >= 0, got {interval_ms}")
    rng = np.random.default_rng(seed)
    out: list[JobArrival] = []
    t = 0.0
    for k in rng.permutation(len(dags)).tolist():
        out.append(JobArrival(t, dags[int(k)]))
        if interval_ms > 0:
            t += float(rng.exponential(interval_ms))
    return out


def run_workflow_episode(
    dags: Sequence[TpchDag],
    cfg: SimConfig,
    policy: DagPolicy,
    *,
    seed: int,
    interval_ms: float,
    max_decisions: int | None = None,
) -> EpisodeResult:
    """One episode of the workflow stream of ``seed``; results are in arrival order."""
    if cfg.num_executors < 1:
        raise ValueError("num_executors must be >= 1")
    if not dags:
        raise ValueError("no workflow to run")
    jobs = workflow_arrivals(dags, seed, interval_ms)
    # the draws only pick among identical samples; seeded all the same
    return run_jobs(
        cfg, jobs, policy, rng=np.random.default_rng([seed, 1]), max_decisions=max_decisions
    )
