"""The DAG round keeps each DAG's view from step to step and rebuilds only the granted DAG's:
every view a policy is shown equals the view rebuilt from scratch after the grants so far (a
frozen copy of the rebuild-everything construction, the oracle)."""

from __future__ import annotations

import random

import pytest

from app.domains.dag import decision
from app.domains.dag.heuristics import get_heuristic
from app.domains.dag.policy import Action, DagPolicy, JobView, RoundView, StageView
from app.domains.dag.types import DagClusterState, DagSpec, DagState, StageProgress, StageSpec
from app.kernel.resources import to_tuple


def _oracle_view(
    dags: list[decision._DagRow],
    state: DagClusterState,
    names: tuple[str, ...],
    num_source: int,
    picked: set[tuple[int, int]],
) -> RoundView:
    n = state.executors
    jobs: list[JobView] = []
    source: int | None = None
    for j, dag in enumerate(dags):
        if dag.id == state.trigger_dag:
            source = j
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
        jobs.append(JobView(dag.id, dag.submit * 1000.0, supply, tuple(stages)))
    return RoundView(
        jobs=tuple(jobs),
        source_job=source,
        num_source=num_source,
        num_executors=n,
        fair_count="active",
        executor_capacity=to_tuple(state.executor_capacity, names),
    )


class _Recorder:
    def __init__(self, inner: DagPolicy) -> None:
        self.inner = inner
        self.name = inner.name
        self.steps: list[tuple[RoundView, Action | None]] = []

    def reset(self) -> None:
        self.inner.reset()

    def choose(self, view: RoundView) -> Action | None:
        action = self.inner.choose(view)
        self.steps.append((view, action))
        return action


def _state(seed: int) -> DagClusterState:
    rng = random.Random(seed)
    dags = []
    for i in range(rng.randint(2, 20)):
        n = rng.randint(1, 7)
        stages = tuple(
            StageSpec(
                f"s{k}",
                rng.randint(1, 15),
                rng.uniform(1.0, 20.0),
                tuple(f"s{p}" for p in range(k) if rng.random() < 0.4),
                max_parallelism=rng.choice([None, 2]),
            )
            for k in range(n)
        )
        running = rng.choice([0, 1])
        progress = (StageProgress("s0", launched=running, running=running),) if running else ()
        dags.append(DagState(DagSpec(f"d{i}", stages, submit_time=float(i)), progress))
    free = rng.randint(1, 60)
    busy = sum(p.running for d in dags for p in d.progress)
    return DagClusterState(
        now=100.0,
        executors=free + busy + rng.choice([0, 0, 5]),
        free_slots=free,
        dags=tuple(dags),
        trigger_dag=rng.choice([None, "d1"]),
    )


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("name", ["fair", "fifo", "sjf_cp", "packer"])
def test_every_view_equals_the_rebuilt_one(seed: int, name: str) -> None:
    state = _state(seed)
    recorder = _Recorder(get_heuristic(name))
    decision.decide(state, recorder)
    assert recorder.steps
    names = decision._resource_names(state)
    order = sorted(state.dags, key=lambda d: (d.spec.submit_time, d.spec.id))
    rows = [decision._rows(d, names) for d in order]
    remaining = state.free_slots
    picked: set[tuple[int, int]] = set()
    for view, action in recorder.steps:
        assert view == _oracle_view(rows, state, names, remaining, picked)
        if action is None:
            break
        slots = min(action.executors, view.jobs[action.job].stages[action.stage].demand, remaining)
        rows[action.job].stages[action.stage].granted += slots
        picked.add((action.job, action.stage))
        remaining -= slots


@pytest.mark.parametrize("seed", range(6))
def test_the_encoder_cache_gives_the_fresh_observation_at_every_step(seed: int) -> None:
    """``encode(view, cache)`` over a round's views (most jobs' views the same objects from step
    to step, the source slots shrinking) equals ``encode(view)`` field by field."""
    import numpy as np

    from app.domains.dag.decima import EncodeCache, encode

    recorder = _Recorder(get_heuristic("fair"))
    decision.decide(_state(seed), recorder)
    cache = EncodeCache()
    for view, _ in [*recorder.steps, *recorder.steps[:1]]:  # and back to the first view
        cached, fresh = encode(view, cache), encode(view)
        for name in ("x", "adj", "stage_mask", "select_mask", "job_mask", "exec_mask"):
            np.testing.assert_array_equal(getattr(cached, name), getattr(fresh, name))
        assert (cached.slots, cached.height) == (fresh.slots, fresh.height)
