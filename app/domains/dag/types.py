"""State and decision types of the DAG domain (spec 7.1-7.2) and the snapshot validation.

A DAG job is a set of stages with ``depends_on`` edges; a stage is ``tasks`` independent, identical
tasks (not a gang: any number may run at once, up to ``max_parallelism``).  Executors are identical
task slots of capacity ``executor_capacity``; a slot that runs a task of a stage keeps running the
stage's next task until it has none left (so ``running`` slots are already spoken for).

Invariants :func:`validate_state` enforces (each failure a
:class:`~app.kernel.errors.SnapshotError` naming the field):

* DAG ids unique, stage ids unique within their DAG, neither containing ``:``;
* ``depends_on`` names stages of the same DAG, and the stages form no cycle;
* ``tasks >= 1``, ``task_duration_s`` finite and > 0, ``max_parallelism >= 1`` when given;
* no stage is larger than the cluster: one task's ``per_task`` fits one executor slot;
* progress: ``0 <= finished <= launched <= tasks``, ``running <= launched - finished``, no task
  launched before every parent finished, progress only for known stages;
* ``free_slots + running slots <= executors``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from app.kernel.errors import SnapshotError
from app.kernel.resources import FIT_EPS
from app.kernel.types import Resources

__all__ = [
    "DEFAULT_PER_TASK",
    "DagClusterState",
    "DagConfig",
    "DagDecision",
    "DagSpec",
    "DagState",
    "StageGrant",
    "StageProgress",
    "StageSpec",
    "topological_order",
    "validate_state",
]

DEFAULT_PER_TASK: Final[Resources] = MappingProxyType({"cpu": 1.0})


@dataclass(frozen=True, slots=True)
class StageSpec:
    id: str
    tasks: int
    #: per-task duration estimate (s)
    task_duration_s: float
    depends_on: tuple[str, ...] = ()
    per_task: Resources = field(default_factory=lambda: DEFAULT_PER_TASK)
    max_parallelism: int | None = None


@dataclass(frozen=True, slots=True)
class DagSpec:
    id: str
    stages: tuple[StageSpec, ...]
    submit_time: float = 0.0


@dataclass(frozen=True, slots=True)
class StageProgress:
    stage_id: str
    launched: int = 0
    finished: int = 0
    #: slots currently running a task of this stage
    running: int = 0


@dataclass(frozen=True, slots=True)
class DagState:
    spec: DagSpec
    progress: tuple[StageProgress, ...] = ()

    def progress_of(self) -> dict[str, StageProgress]:
        return {p.stage_id: p for p in self.progress}


@dataclass(frozen=True, slots=True)
class DagClusterState:
    now: float
    #: total task slots
    executors: int
    #: idle slots: the round's source
    free_slots: int
    dags: tuple[DagState, ...]
    executor_capacity: Resources = field(default_factory=lambda: DEFAULT_PER_TASK)
    #: the DAG whose stage just released the free slots (the round's source job), if any
    trigger_dag: str | None = None


@dataclass(frozen=True, slots=True)
class DagConfig:
    """A round's options besides the snapshot and the policy."""

    #: the weight exponent of ``weighted_fair`` when a round's policy or fallback is that
    #: heuristic (0: plain fair shares)
    alpha: float = 0.0
    #: record, per step, the chosen stage with its score and the runners-up
    explain: bool = False


@dataclass(frozen=True, slots=True)
class StageGrant:
    dag_id: str
    stage_id: str
    #: slots granted now
    slots: int
    #: the policy's executor cap for the DAG (Decima's parallelism limit)
    parallelism_limit: int
    #: the policy's score of the stage, when it has one
    score: float | None = None


@dataclass(frozen=True, slots=True)
class DagDecision:
    policy: str
    #: grants to runnable stages (parents finished): start tasks now
    allocations: tuple[StageGrant, ...]
    #: grants to stages whose parents are saturated but not finished: honoured when they finish
    reservations: tuple[StageGrant, ...]
    idle_slots: int


def topological_order(spec: DagSpec) -> list[int]:
    """Stage positions in a topological order (ties: spec order); the spec must be valid."""
    index = {s.id: i for i, s in enumerate(spec.stages)}
    indeg = [len(s.depends_on) for s in spec.stages]
    children: list[list[int]] = [[] for _ in spec.stages]
    for i, s in enumerate(spec.stages):
        for p in s.depends_on:
            children[index[p]].append(i)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    out: list[int] = []
    while ready:
        ready.sort()
        i = ready.pop(0)
        out.append(i)
        for c in children[i]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    return out


def _find_cycle(spec: DagSpec) -> list[str] | None:
    index = {s.id: i for i, s in enumerate(spec.stages)}
    state = [0] * len(spec.stages)  # 0 new, 1 on stack, 2 done
    stack: list[int] = []

    def visit(i: int) -> list[str] | None:
        state[i] = 1
        stack.append(i)
        for p in spec.stages[i].depends_on:
            j = index[p]
            if state[j] == 1:
                cyc = stack[stack.index(j) :]
                return [spec.stages[k].id for k in cyc] + [spec.stages[j].id]
            if state[j] == 0 and (found := visit(j)) is not None:
                return found
        stack.pop()
        state[i] = 2
        return None

    for i in range(len(spec.stages)):
        if state[i] == 0 and (found := visit(i)) is not None:
            return found
    return None


def _fits(demand: Resources, capacity: Mapping[str, float]) -> bool:
    for name, amount in demand.items():
        cap = float(capacity.get(name, 0.0))
        if float(amount) > cap + FIT_EPS * max(1.0, cap):
            return False
    return True


def _validate_stage(st: StageSpec, f: str, capacity: Resources) -> None:
    if not st.id or ":" in st.id:
        raise SnapshotError(f"{f}.id", f"stage id {st.id!r} must be non-empty without ':'")
    if st.tasks < 1:
        raise SnapshotError(f"{f}.tasks", f"stage {st.id!r} needs tasks >= 1, got {st.tasks}")
    if not (math.isfinite(st.task_duration_s) and st.task_duration_s > 0):
        raise SnapshotError(
            f"{f}.task_duration_s",
            f"stage {st.id!r} needs a finite task_duration_s > 0, got {st.task_duration_s}",
        )
    if st.max_parallelism is not None and st.max_parallelism < 1:
        raise SnapshotError(f"{f}.max_parallelism", f"stage {st.id!r} needs max_parallelism >= 1")
    if any(not math.isfinite(float(v)) or float(v) < 0 for v in st.per_task.values()):
        raise SnapshotError(f"{f}.per_task", "per-task amounts must be finite and >= 0")
    if not _fits(st.per_task, capacity):
        raise SnapshotError(
            f"{f}.per_task",
            f"stage {st.id!r} is larger than the cluster: one task needs "
            f"{dict(st.per_task)} but an executor slot has {dict(capacity)}",
        )


def _validate_spec(spec: DagSpec, at: str, capacity: Resources) -> None:
    if not spec.id or ":" in spec.id:
        raise SnapshotError(f"{at}.id", f"DAG id {spec.id!r} must be non-empty without ':'")
    if not spec.stages:
        raise SnapshotError(f"{at}.stages", f"DAG {spec.id!r} has no stage")
    seen: dict[str, int] = {}
    for k, st in enumerate(spec.stages):
        _validate_stage(st, f"{at}.stages[{k}]", capacity)
        if st.id in seen:
            raise SnapshotError(
                f"{at}.stages[{k}].id", f"duplicate stage id {st.id!r} (also stages[{seen[st.id]}])"
            )
        seen[st.id] = k
    for k, st in enumerate(spec.stages):
        for j, p in enumerate(st.depends_on):
            if p not in seen:
                raise SnapshotError(
                    f"{at}.stages[{k}].depends_on[{j}]",
                    f"stage {st.id!r} depends on unknown stage {p!r} of DAG {spec.id!r}",
                )
    cycle = _find_cycle(spec)
    if cycle is not None:
        raise SnapshotError(
            f"{at}.stages", f"DAG {spec.id!r} is cyclic: {' -> '.join(reversed(cycle))}"
        )


def _validate_progress(dag: DagState, at: str) -> int:
    """The running slots of a DAG whose spec is valid."""
    stages = {s.id: s for s in dag.spec.stages}
    prog = dag.progress_of()
    seen: set[str] = set()
    running = 0
    for k, p in enumerate(dag.progress):
        f = f"{at}.progress[{k}]"
        if p.stage_id not in stages:
            raise SnapshotError(f"{f}.stage_id", f"unknown stage {p.stage_id!r}")
        if p.stage_id in seen:
            raise SnapshotError(f"{f}.stage_id", f"duplicate progress for {p.stage_id!r}")
        seen.add(p.stage_id)
        st = stages[p.stage_id]
        if not 0 <= p.finished <= p.launched <= st.tasks:
            raise SnapshotError(
                f"{f}.launched",
                f"need 0 <= finished <= launched <= tasks ({st.tasks}), got "
                f"finished {p.finished}, launched {p.launched}",
            )
        if not 0 <= p.running <= p.launched - p.finished:
            raise SnapshotError(
                f"{f}.running",
                f"running {p.running} exceeds launched - finished ({p.launched - p.finished})",
            )
        if p.launched > 0:
            for parent in st.depends_on:
                pp = prog.get(parent)
                if pp is None or pp.finished < stages[parent].tasks:
                    raise SnapshotError(
                        f"{f}.launched",
                        f"stage {st.id!r} launched tasks before its parent {parent!r} finished",
                    )
        running += p.running
    return running


def validate_state(state: DagClusterState) -> None:
    """Raise :class:`SnapshotError` on a snapshot that cannot be decided (see module doc)."""
    if state.executors < 1:
        raise SnapshotError("executors", f"need at least one executor, got {state.executors}")
    if state.free_slots < 0:
        raise SnapshotError("free_slots", f"must be >= 0, got {state.free_slots}")
    running = 0
    dag_ids: dict[str, int] = {}
    for i, dag in enumerate(state.dags):
        at = f"dags[{i}]"
        if dag.spec.id in dag_ids:
            raise SnapshotError(
                f"{at}.spec.id",
                f"duplicate DAG id {dag.spec.id!r} (also dags[{dag_ids[dag.spec.id]}])",
            )
        dag_ids[dag.spec.id] = i
        _validate_spec(dag.spec, f"{at}.spec", state.executor_capacity)
        running += _validate_progress(dag, at)
    if state.free_slots + running > state.executors:
        raise SnapshotError(
            "free_slots",
            f"free slots ({state.free_slots}) + running ({running}) exceed executors "
            f"({state.executors})",
        )
    if state.trigger_dag is not None and state.trigger_dag not in dag_ids:
        raise SnapshotError("trigger_dag", f"unknown DAG {state.trigger_dag!r}")
