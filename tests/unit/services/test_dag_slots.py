"""Executor-slot arithmetic of dag clusters (app/services/dags.py) and the round's snapshot of a
DAG decide body (app/services/dag_rounds.py: free slots, executors, first-fit placement)."""

from __future__ import annotations

from typing import Any

import pytest

from app.domains.dag.types import StageGrant
from app.kernel.errors import InvalidPickError
from app.services.dag_rounds import place, snapshot_of
from app.services.dags import (
    add_slots,
    free_slots_of,
    held_slots,
    node_slots,
    slot_amounts,
    take_slots,
)

SLOT = {"cpu": 2.0, "memory_gb": 4.0}


@pytest.mark.parametrize(
    ("capacity", "slots"),
    [
        ({"cpu": 8, "memory_gb": 16}, 4),
        ({"cpu": 8, "memory_gb": 10}, 2),  # memory binds
        ({"cpu": 7.999999999999, "memory_gb": 16}, 4),  # float noise is not a lost slot
        ({"cpu": 1, "memory_gb": 64}, 0),
        ({"memory_gb": 64}, 0),  # a resource of the slot missing
    ],
)
def test_node_slots(capacity: dict[str, float], slots: int) -> None:
    assert node_slots(capacity, SLOT) == slots


def test_held_and_free_slots_round_trip() -> None:
    capacity = {"cpu": 8.0, "memory_gb": 16.0}
    for held in range(5):
        allocated = slot_amounts(SLOT, held)
        assert held_slots(allocated, SLOT) == held
        assert free_slots_of(capacity, allocated, SLOT) == 4 - held


def test_take_slots_prefers_the_named_node_then_the_last_placements() -> None:
    placements = [{"node_id": "a", "tasks": 2}, {"node_id": "b", "tasks": 1}]
    left, freed = take_slots(placements, 2, None)
    assert (left, freed) == ([{"node_id": "a", "tasks": 1}], {"b": 1, "a": 1})
    left, freed = take_slots(placements, 2, "a")
    assert (left, freed) == ([{"node_id": "b", "tasks": 1}], {"a": 2})
    assert add_slots(left, [{"node_id": "a", "tasks": 1}, {"node_id": "b", "tasks": 2}]) == [
        {"node_id": "b", "tasks": 3},
        {"node_id": "a", "tasks": 1},
    ]


def _body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "now": 0.0,
        "nodes": [
            {"id": "n2", "capacity": {"cpu": 4}, "allocated": {"cpu": 1}},
            {"id": "n1", "capacity": {"cpu": 3}},
            {"id": "d", "capacity": {"cpu": 4}, "allocated": {"cpu": 2}, "state": "drain"},
        ],
        "executor_capacity": {"cpu": 1},
        "dags": [
            {
                "spec": {
                    "id": "q",
                    "stages": [{"id": "s", "tasks": 9, "task_duration_s": 1.0}],
                },
                "stage_progress": [
                    {"stage_id": "s", "launched": 3, "finished": 0, "running_slots": 3}
                ],
            }
        ],
    }
    body.update(over)
    return body


def test_the_snapshot_counts_free_slots_on_up_nodes_and_held_ones_everywhere() -> None:
    snap = snapshot_of(_body())
    assert snap.free == (("n1", 3), ("n2", 3))  # node-id order, up nodes only
    assert snap.state.free_slots == 6
    assert snap.state.executors == 3 + 4 + 2  # up nodes' slots + the drained node's held ones
    assert snap.state.trigger_dag is None
    triggered = snapshot_of(_body(trigger={"type": "stage_released", "job_id": "q:s"}))
    assert triggered.state.trigger_dag == "q"
    periodic = snapshot_of(_body(trigger={"type": "periodic", "job_id": "q:s"}))
    assert periodic.state.trigger_dag is None


def test_placement_is_first_fit_and_never_exceeds_a_node() -> None:
    grants = [StageGrant("q", "a", 2, 6), StageGrant("q", "b", 3, 6)]
    assert place((("n1", 3), ("n2", 3)), grants) == [[["n1", 2]], [["n1", 1], ["n2", 2]]]
    with pytest.raises(InvalidPickError):
        place((("n1", 1),), grants)
