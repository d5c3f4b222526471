"""What a DAG policy sees in one scheduling round and what it answers.

A round (Decima's semantics, spec 2.4) has a *source*: ``num_source`` free executors with a common
origin (the global pool, a job's pool or a stage's executors).  A policy answers one
:class:`Action` at a time: a selectable stage and how many of the source's executors to commit to
it, or ``None`` to leave the rest idle.  The simulator (every semantics) and
:func:`app.domains.dag.decision.decide` call the same policies on the same views.

Invariants of a view: ``jobs`` are in arrival order (ties by id); a stage is ``selectable`` only
if it is not saturated (``demand > 0``), all its parents are saturated and it was not picked
earlier in the round; ``runnable`` stages are selectable stages whose parents have all finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = ["Action", "DagPolicy", "JobView", "RoundView", "StageView"]

#: how the fair share counts jobs: decima-sim counts jobs with an unsaturated stage,
#: spark-sched-sim (and Kairos) every active job
FairCount = Literal["unsaturated", "active"]


@dataclass(frozen=True, slots=True)
class StageView:
    index: int
    #: tasks not launched yet
    unlaunched: int
    #: executors the stage can still take: unlaunched - committed - moving (clipped by its limit)
    demand: int
    selectable: bool
    runnable: bool
    finished: bool
    #: current per-task duration estimate in ms
    duration_ms: float
    children: tuple[int, ...]
    per_task: tuple[float, ...] = (1.0,)


@dataclass(frozen=True, slots=True)
class JobView:
    id: str
    arrival_ms: float
    #: executors at the job + moving to it + committed to it from other sources
    supply: int
    stages: tuple[StageView, ...]

    @property
    def unsaturated(self) -> bool:
        return any(s.demand > 0 for s in self.stages)

    def remaining_work_ms(self) -> float:
        """W_j: sum over unfinished stages of unlaunched tasks x duration estimate."""
        return sum(s.unlaunched * s.duration_ms for s in self.stages if not s.finished)

    def has_selectable(self) -> bool:
        return any(s.selectable for s in self.stages)


@dataclass(frozen=True, slots=True)
class RoundView:
    jobs: tuple[JobView, ...]
    #: index into ``jobs`` of the job releasing the executors, ``None`` for the global pool
    source_job: int | None
    num_source: int
    num_executors: int
    fair_count: FairCount = "active"
    #: per-executor capacity vector (packing heuristics)
    executor_capacity: tuple[float, ...] = (1.0,)


@dataclass(frozen=True, slots=True)
class Action:
    job: int
    stage: int
    executors: int
    #: the policy's executor cap for the job (Decima's parallelism limit), reported in decisions
    limit: int


@runtime_checkable
class DagPolicy(Protocol):
    name: str

    def reset(self) -> None:
        """Forget per-episode state (only stateful policies keep any)."""
        ...

    def choose(self, view: RoundView) -> Action | None: ...
