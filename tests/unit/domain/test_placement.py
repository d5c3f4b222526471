import pytest

from app.domains.hpc.types import (
    SINGLE_NODE_LABEL,
    Job,
    Node,
    NodeState,
    Placement,
    PlacementStrategy,
)
from app.kernel.placement import place

FF, BF, TT = PlacementStrategy.FIRST_FIT, PlacementStrategy.BEST_FIT, PlacementStrategy.TETRIS

# ids in id order: n1 < n2 < n3
NODES = (
    Node("n2", {"cpu": 8.0, "mem": 16.0}),
    Node("n1", {"cpu": 4.0, "mem": 8.0}),
    Node("n3", {"cpu": 2.0, "mem": 4.0}),
)


def job(tasks=1, cpu=1.0, mem=1.0, single=False, jid="j"):
    labels = {SINGLE_NODE_LABEL: "true"} if single else {}
    return Job(jid, {"cpu": cpu, "mem": mem}, 10.0, 0.0, tasks=tasks, labels=labels)


def placed(ps):
    return None if ps is None else [(p.node_id, p.tasks) for p in ps]


class TestStrategies:
    @pytest.mark.parametrize(
        ("strategy", "the_job", "expected"),
        [
            # first-fit: id order, pack as many as fit per node
            (FF, job(1), [("n1", 1)]),
            (FF, job(6), [("n1", 4), ("n2", 2)]),
            (FF, job(14), [("n1", 4), ("n2", 8), ("n3", 2)]),
            (FF, job(6, single=True), [("n2", 6)]),
            # best-fit: leftover normalised free after placing 2 tasks of (1 cpu, 1 mem):
            # n1 2/4+6/8=1.25, n2 6/8+14/16=1.625, n3 0/2+2/4=0.5 -> n3
            (BF, job(2), [("n3", 2)]),
            # 4 tasks: n3 cannot hold them all; nodes that can (n1 0+4/8=0.5, n2 0.5+0.75) first
            (BF, job(4), [("n1", 4)]),
            # 10 tasks: nobody holds all; left after packing each node full: n1 0+4/8, n2 0+8/16,
            # n3 0+2/4 all 0.5 -> id order
            (BF, job(10), [("n1", 4), ("n2", 6)]),
            # 5 tasks of (1 cpu, 3 mem): only n2 holds them all -> no split (first-fit splits)
            (BF, job(5, mem=3.0), [("n2", 5)]),
            (FF, job(5, mem=3.0), [("n1", 2), ("n2", 3)]),
            # tetris: alignment sum_r (d_r/c_r)(f_r/c_r): n1 .25+.125=.375, n2 .1875, n3 .75
            (TT, job(1), [("n3", 1)]),
            (TT, job(3), [("n3", 2), ("n1", 1)]),
            (TT, job(6, single=True), [("n2", 6)]),
        ],
    )
    def test_table(self, strategy, the_job, expected):
        assert placed(place(the_job, NODES, strategy=strategy)) == expected

    @pytest.mark.parametrize("strategy", list(PlacementStrategy))
    def test_all_or_nothing(self, strategy):
        assert place(job(15), NODES, strategy=strategy) is None  # 14 cpu in total
        assert place(job(9, single=True), NODES, strategy=strategy) is None
        assert place(job(1, mem=17.0), NODES, strategy=strategy) is None

    @pytest.mark.parametrize("strategy", list(PlacementStrategy))
    def test_only_up_nodes(self, strategy):
        nodes = (
            Node("a", {"cpu": 4.0}, state=NodeState.DOWN),
            Node("b", {"cpu": 4.0}, state=NodeState.DRAIN),
            Node("c", {"cpu": 4.0}),
        )
        j = Job("j", {"cpu": 1.0}, 1.0, 0.0, tasks=4)
        assert placed(place(j, nodes, strategy=strategy)) == [("c", 4)]
        assert place(Job("k", {"cpu": 1.0}, 1.0, 0.0, tasks=5), nodes, strategy=strategy) is None

    @pytest.mark.parametrize("strategy", list(PlacementStrategy))
    def test_ties_break_by_node_id(self, strategy):
        nodes = tuple(Node(f"n{i}", {"cpu": 4.0}) for i in (3, 1, 2))
        assert placed(place(Job("j", {"cpu": 1.0}, 1.0, 0.0), nodes, strategy=strategy)) == [
            ("n1", 1)
        ]

    def test_free_overrides_capacity_minus_allocated(self):
        nodes = (Node("n1", {"cpu": 4.0}, allocated={"cpu": 3.0}), Node("n2", {"cpu": 4.0}))
        assert placed(place(Job("j", {"cpu": 2.0}, 1.0, 0.0), nodes)) == [("n2", 1)]
        free = {"n1": {"cpu": 4.0}, "n2": {"cpu": 0.0}}
        assert placed(place(Job("j", {"cpu": 2.0}, 1.0, 0.0), nodes, free)) == [("n1", 1)]

    def test_best_fit_prefers_the_tightest_node(self):
        nodes = (
            Node("n1", {"cpu": 8.0}, allocated={"cpu": 2.0}),
            Node("n2", {"cpu": 8.0}, allocated={"cpu": 5.0}),
        )
        j = Job("j", {"cpu": 3.0}, 1.0, 0.0)
        assert placed(place(j, nodes, strategy=BF)) == [("n2", 1)]
        assert placed(place(j, nodes, strategy=FF)) == [("n1", 1)]
        assert placed(place(j, nodes, strategy=TT)) == [("n1", 1)]  # more free: better aligned

    def test_tetris_aligns_with_the_free_vector(self):
        nodes = (
            Node("cpuheavy", {"cpu": 8.0, "mem": 8.0}, allocated={"cpu": 0.0, "mem": 6.0}),
            Node("memheavy", {"cpu": 8.0, "mem": 8.0}, allocated={"cpu": 6.0, "mem": 0.0}),
        )
        mem_job = Job("j", {"cpu": 1.0, "mem": 2.0}, 1.0, 0.0)
        cpu_job = Job("k", {"cpu": 2.0, "mem": 1.0}, 1.0, 0.0)
        # mem job: cpuheavy (1/8)(8/8)+(2/8)(2/8)=.1875; memheavy (1/8)(2/8)+(2/8)(8/8)=.28125
        assert placed(place(mem_job, nodes, strategy=TT)) == [("memheavy", 1)]
        assert placed(place(cpu_job, nodes, strategy=TT)) == [("cpuheavy", 1)]


class TestEdgeCases:
    def test_zero_demand_goes_to_the_first_up_node(self):
        nodes = (Node("b", {"cpu": 1.0}), Node("a", {"cpu": 1.0}, state=NodeState.DOWN))
        assert placed(place(Job("z", {}, 1.0, 0.0, tasks=3), nodes)) == [("b", 3)]

    def test_epsilon(self):
        nodes = (Node("n", {"cpu": 1.0}, allocated={"cpu": 0.7}),)
        assert placed(place(Job("e", {"cpu": 0.1}, 1.0, 0.0, tasks=3), nodes)) == [("n", 3)]
        assert place(Job("e", {"cpu": 0.1}, 1.0, 0.0, tasks=4), nodes) is None

    def test_invalid_jobs_are_not_placed(self):
        assert place(Job("t", {"cpu": 1.0}, 1.0, 0.0, tasks=0), NODES) is None
        assert place(Job("n", {"cpu": -1.0}, 1.0, 0.0), NODES) is None
        assert place(Job("x", {"cpu": 1.0}, 1.0, 0.0), ()) is None

    def test_placements_are_value_objects(self):
        assert place(job(1), NODES) == (Placement("n1", 1),)


class TestDeterminism:
    @pytest.mark.parametrize("strategy", [BF, TT])
    def test_scores_equal_up_to_float_noise_tie_by_id(self, strategy):
        # 0.2 + 0.4 != 0.6 in floats: both nodes have the same free share up to noise
        nodes = (
            Node("b", {"cpu": 1.0}, allocated={"cpu": 0.2 + 0.4}),
            Node("a", {"cpu": 1.0}, allocated={"cpu": 0.6}),
        )
        assert placed(place(Job("j", {"cpu": 0.05}, 1.0, 0.0), nodes, strategy=strategy)) == [
            ("a", 1)
        ]
