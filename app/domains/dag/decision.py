"""One scheduling round on a DAG cluster snapshot: grant task slots to stages.

The round's source is the snapshot's ``free_slots`` (the job of ``trigger_dag`` as the source job
when given).  The policy is asked for one :class:`~app.domains.dag.policy.Action` at a time on a
:class:`~app.domains.dag.policy.RoundView` built with the simulator's rules, until the free slots
are all granted or it answers ``None``.

Per stage: ``demand = tasks - launched - running - granted`` (running slots keep working on their
stage), clipped by ``max_parallelism - running - granted``; saturated when ``demand <= 0``;
selectable when unsaturated, every parent saturated, not granted earlier in the round and its DAG's
supply (running + granted slots) is below the cluster size (the source DAG excepted).  Grants to a
stage whose parents all finished are allocations, the others reservations.  Invariants of the
result: no stage gets more than its demand, the grants sum to at most ``free_slots``, and the
decision depends only on the snapshot (DAGs in submit-time order, ties by id).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domains.dag.policy import DagPolicy, JobView, RoundView, StageView
from app.domains.dag.types import (
    DagClusterState,
    DagDecision,
    DagState,
    StageGrant,
    topological_order,
    validate_state,
)
from app.kernel.errors import InvalidPickError
from app.kernel.resources import to_tuple

__all__ = ["decide"]


@dataclass(slots=True)
class _StageRow:
    id: str
    tasks: int
    launched: int
    finished: int
    running: int
    limit: int | None
    duration_ms: float
    parents: list[int]
    children: list[int]
    per_task: tuple[float, ...]
    granted: int = 0

    def demand(self) -> int:
        d = self.tasks - self.launched - self.running - self.granted
        if self.limit is not None:
            d = min(d, self.limit - self.running - self.granted)
        return d

    @property
    def done(self) -> bool:
        return self.finished >= self.tasks


@dataclass(slots=True)
class _DagRow:
    id: str
    submit: float
    stages: list[_StageRow]

    def supply(self) -> int:
        return sum(s.running + s.granted for s in self.stages)


def _rows(dag: DagState, names: tuple[str, ...]) -> _DagRow:
    spec = dag.spec
    order = topological_order(spec)
    pos = {spec.stages[i].id: k for k, i in enumerate(order)}
    prog = dag.progress_of()
    rows: list[_StageRow] = []
    for i in order:
        st = spec.stages[i]
        p = prog.get(st.id)
        rows.append(
            _StageRow(
                id=st.id,
                tasks=st.tasks,
                launched=p.launched if p else 0,
                finished=p.finished if p else 0,
                running=p.running if p else 0,
                limit=st.max_parallelism,
                duration_ms=st.task_duration_s * 1000.0,
                parents=[pos[q] for q in st.depends_on],
                children=[],
                per_task=to_tuple(st.per_task, names),
            )
        )
    for k, row in enumerate(rows):
        for q in row.parents:
            rows[q].children.append(k)
    return _DagRow(spec.id, spec.submit_time, rows)


def _resource_names(state: DagClusterState) -> tuple[str, ...]:
    names = set(state.executor_capacity)
    for dag in state.dags:
        for st in dag.spec.stages:
            names.update(st.per_task)
    return tuple(sorted(names))


def _job_view(
    j: int, dag: _DagRow, state: DagClusterState, picked: set[tuple[int, int]]
) -> JobView:
    """DAG ``j``'s view: it changes only when one of its own stages is granted."""
    n = state.executors
    supply = dag.supply()
    stages: list[StageView] = []
    for k, st in enumerate(dag.stages):
        demand = st.demand()
        selectable = (
            demand > 0
            and (j, k) not in picked
            and all(dag.stages[q].demand() <= 0 for q in st.parents)
            and (supply < n or dag.id == state.trigger_dag)
        )
        stages.append(
            StageView(
                index=k,
                unlaunched=st.tasks - st.launched,
                demand=max(demand, 0),
                selectable=selectable,
                runnable=selectable and all(dag.stages[q].done for q in st.parents),
                finished=st.done,
                duration_ms=st.duration_ms,
                children=tuple(st.children),
                per_task=st.per_task,
            )
        )
    return JobView(dag.id, dag.submit * 1000.0, supply, tuple(stages))


def decide(state: DagClusterState, policy: DagPolicy) -> DagDecision:
    """Grant the snapshot's free slots to stages, one policy action at a time."""
    validate_state(state)
    names = _resource_names(state)
    order = sorted(state.dags, key=lambda d: (d.spec.submit_time, d.spec.id))
    dags = [_rows(d, names) for d in order]
    remaining = state.free_slots
    picked: set[tuple[int, int]] = set()
    grants: list[tuple[int, int, int, int]] = []
    # a grant changes its own DAG's view only: the others are kept from step to step
    jobs = [_job_view(j, dag, state, picked) for j, dag in enumerate(dags)]
    source = next((j for j, dag in enumerate(dags) if dag.id == state.trigger_dag), None)
    capacity = to_tuple(state.executor_capacity, names)
    policy.reset()
    while remaining > 0:
        view = RoundView(
            jobs=tuple(jobs),
            source_job=source,
            num_source=remaining,
            num_executors=state.executors,
            fair_count="active",
            executor_capacity=capacity,
        )
        action = policy.choose(view)
        if action is None:
            break
        if not 0 <= action.job < len(dags) or not 0 <= action.stage < len(dags[action.job].stages):
            raise InvalidPickError(f"action {action} is out of range")
        sv = view.jobs[action.job].stages[action.stage]
        if not sv.selectable:
            raise InvalidPickError(f"stage {sv.index} of job {action.job} is not selectable")
        slots = min(action.executors, sv.demand, remaining)
        if slots <= 0:
            raise InvalidPickError("an action must grant at least one slot")
        dags[action.job].stages[action.stage].granted += slots
        picked.add((action.job, action.stage))
        jobs[action.job] = _job_view(action.job, dags[action.job], state, picked)
        grants.append((action.job, action.stage, slots, action.limit))
        remaining -= slots
    allocations: list[StageGrant] = []
    reservations: list[StageGrant] = []
    for j, k, slots, limit in grants:
        dag = dags[j]
        st = dag.stages[k]
        grant = StageGrant(dag.id, st.id, slots, limit)
        if all(dag.stages[q].done for q in st.parents):
            allocations.append(grant)
        else:
            reservations.append(grant)
    return DagDecision(
        policy=getattr(policy, "name", type(policy).__name__),
        allocations=tuple(allocations),
        reservations=tuple(reservations),
        idle_slots=remaining,
    )
