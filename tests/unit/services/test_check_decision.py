"""``check_decision``: the last guard before a pipeline decision is served.

Each invariant is broken on its own and must be named; decisions the core makes must pass.
"""

from __future__ import annotations

import random

import pytest

from app.domains.hpc.decision import DecisionConfig, decide
from app.domains.hpc.heuristics import HEURISTICS
from app.domains.hpc.types import (
    SINGLE_NODE_LABEL,
    Allocation,
    ClusterState,
    Decision,
    Job,
    Node,
    NodeState,
    Placement,
    PolicyRef,
)
from app.services.decision import check_decision

REF = PolicyRef("test", "1", "heuristic")


def state() -> ClusterState:
    return ClusterState(
        now=100.0,
        nodes=(
            Node("a", {"cpu": 8.0, "mem": 16.0}, allocated={"cpu": 2.0}),
            Node("b", {"cpu": 8.0, "mem": 16.0}),
            Node("down", {"cpu": 8.0, "mem": 16.0}, state=NodeState.DOWN),
        ),
        pending=(
            Job("j1", {"cpu": 2.0, "mem": 1.0}, 60.0, 1.0, tasks=2),
            Job("j2", {"cpu": 1.0}, 60.0, 2.0, tasks=2, labels={SINGLE_NODE_LABEL: "true"}),
            Job("j3", {"cpu": 1.0}, 60.0, 3.0, depends_on=("j0",)),
            Job("j4", {"cpu": 1.0}, 60.0, 4.0, depends_on=("done",)),
        ),
        finished=frozenset({"done"}),
    )


def decision(*allocations: Allocation) -> Decision:
    return Decision(allocations=allocations, reservations=(), queue_length=4, policy=REF)


def alloc(job: str, *placements: tuple[str, int]) -> Allocation:
    return Allocation(job, tuple(Placement(n, t) for n, t in placements))


def test_a_valid_decision_has_no_problems() -> None:
    ok = decision(
        alloc("j1", ("a", 1), ("b", 1)),
        alloc("j2", ("b", 2)),
        alloc("j4", ("a", 1)),
    )
    assert check_decision(state(), ok) == []
    assert check_decision(state(), decision()) == []


@pytest.mark.parametrize(
    ("allocations", "expected"),
    [
        ((alloc("nope", ("a", 1)),), "'nope' is not pending or allocated twice"),
        ((alloc("j4", ("a", 1)), alloc("j4", ("b", 1))), "'j4' is not pending or allocated twice"),
        ((alloc("j3", ("a", 1)),), "'j3' has unfinished dependencies"),
        ((alloc("j1", ("a", 1)),), "'j1': placements do not hold exactly 2 tasks"),
        ((alloc("j1", ("a", 3), ("b", -1)),), "'j1': placements do not hold exactly 2 tasks"),
        ((alloc("j1", ("a", 2), ("b", 0)),), "'j1': placements do not hold exactly 2 tasks"),
        ((alloc("j2", ("a", 1), ("b", 1)),), "'j2' is single-node but spans nodes"),
        ((alloc("j4", ("down", 1)),), "placed on unavailable node 'down'"),
        ((alloc("j4", ("gone", 1)),), "placed on unavailable node 'gone'"),
        # a: 8 cpu, 2 already allocated; 2 x 2 + 2 x 1 = 6 more fills it exactly, one more does not
        ((alloc("j1", ("a", 2)), alloc("j2", ("a", 2)), alloc("j4", ("b", 1))), None),
        (
            (alloc("j1", ("a", 2)), alloc("j2", ("a", 2)), alloc("j4", ("a", 1))),
            "node 'a' over capacity on cpu",
        ),
    ],
)
def test_each_broken_invariant_is_named(
    allocations: tuple[Allocation, ...], expected: str | None
) -> None:
    problems = check_decision(state(), decision(*allocations))
    if expected is None:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems


def test_over_capacity_counts_what_is_already_allocated() -> None:
    s = state()
    # 2 allocated + 2 x 2 (j1) + 2 x 1 (j2) + 1 (j4) = 9 > 8 on node a
    big = Job("j5", {"cpu": 3.0}, 60.0, 5.0, tasks=1)
    s = ClusterState(now=s.now, nodes=s.nodes, pending=(*s.pending, big), finished=s.finished)
    over = decision(alloc("j1", ("a", 2)), alloc("j5", ("a", 1)))
    assert check_decision(s, over) == ["node 'a' over capacity on cpu"]
    # a resource the node does not have at all
    gpu = Job("g", {"gpu": 1.0}, 60.0, 6.0)
    s2 = ClusterState(now=s.now, nodes=s.nodes, pending=(gpu,))
    assert check_decision(s2, decision(alloc("g", ("b", 1)))) == ["node 'b' over capacity on gpu"]


def test_an_already_overfull_node_is_not_blamed_when_it_gets_nothing_more() -> None:
    s = ClusterState(
        now=0.0,
        nodes=(Node("a", {"cpu": 4.0}, allocated={"cpu": 6.0}), Node("b", {"cpu": 4.0})),
        pending=(Job("j", {"cpu": 0.0, "mem": 0.0}, 60.0, 0.0), Job("k", {"cpu": 4.0}, 60.0, 1.0)),
    )
    assert check_decision(s, decision(alloc("j", ("a", 1)), alloc("k", ("b", 1)))) == []


@pytest.mark.parametrize("seed", range(20))
def test_every_core_decision_passes(seed: int) -> None:
    rng = random.Random(seed)
    nodes = tuple(
        Node(
            f"n{k}",
            {"cpu": float(rng.choice((8, 16, 32))), "mem": float(rng.choice((32, 64)))},
            allocated={"cpu": float(rng.randint(0, 4))},
            state=NodeState.UP if rng.random() > 0.1 else NodeState.DRAIN,
        )
        for k in range(rng.randint(1, 8))
    )
    pending = tuple(
        Job(
            f"j{i}",
            {"cpu": float(rng.randint(1, 8)), "mem": float(rng.randint(1, 16))},
            float(rng.randint(60, 3600)),
            float(rng.randint(0, 1000)),
            tasks=rng.randint(1, 6),
            labels={SINGLE_NODE_LABEL: "true"} if rng.random() < 0.3 else {},
        )
        for i in range(rng.randint(1, 40))
    )
    s = ClusterState(now=2000.0, nodes=nodes, pending=pending)
    policy = list(HEURISTICS.values())[seed % len(HEURISTICS)]
    made = decide(s, policy, DecisionConfig())
    assert check_decision(s, made) == []
