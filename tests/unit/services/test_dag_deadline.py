"""A dag round's default deadline: the snapshot's size plus one allowance per stage pick the
learned policy may make (at most one per free slot and per stage)."""

from __future__ import annotations

import pytest

from app.domains.dag.types import DagClusterState, DagSpec, DagState, StageSpec
from app.services.dag_rounds import _deadline_s
from app.settings import Settings


def _state(free_slots: int) -> DagClusterState:
    return DagClusterState(now=0.0, executors=64, free_slots=free_slots, dags=())


def test_a_deadline_in_the_body_wins() -> None:
    assert _deadline_s(250.0, Settings(), _state(10)) == pytest.approx(0.25)


def test_the_default_grows_with_the_picks_a_round_can_make() -> None:
    settings = Settings(DEFAULT_DEADLINE_MS=50.0, DEADLINE_MS_PER_DAG_STEP=5.0)
    assert _deadline_s(None, settings, _state(10)) == pytest.approx(0.05)  # no stages: no picks
    assert _deadline_s(None, settings, _state(0)) == pytest.approx(0.05)


def _dag(dag_id: str, stages: int) -> DagState:
    return DagState(
        DagSpec(
            dag_id, tuple(StageSpec(f"s{i}", tasks=4, task_duration_s=1.0) for i in range(stages))
        )
    )


def test_picks_are_bounded_by_free_slots_and_by_stages() -> None:
    settings = Settings(
        DEFAULT_DEADLINE_MS=50.0, DEADLINE_MS_PER_1K_ITEMS=0.0, DEADLINE_MS_PER_DAG_STEP=5.0
    )
    dags = (_dag("a", 10), _dag("b", 20))
    few_slots = DagClusterState(now=0.0, executors=64, free_slots=4, dags=dags)
    many_slots = DagClusterState(now=0.0, executors=64, free_slots=64, dags=dags)
    assert _deadline_s(None, settings, few_slots) == pytest.approx(0.05 + 4 * 0.005)
    assert _deadline_s(None, settings, many_slots) == pytest.approx(0.05 + 30 * 0.005)
