import importlib
import math

import pytest

from app.domains.hpc.heuristics import (
    HEURISTIC_DESCRIPTIONS,
    HEURISTICS,
    get_heuristic,
    job_size,
)
from app.domains.hpc.heuristics.base import ScoreHeuristic
from app.domains.hpc.policy import OrderingPolicy
from app.domains.hpc.types import Job, PolicyRef
from app.kernel.errors import UnknownHeuristicError

NOW = 2000.0
# id, submit s, walltime r, per-task cpu, tasks (n = tasks * cpu), priority
A = Job("a", {"cpu": 4.0}, walltime_s=3600.0, submit_time=1000.0, tasks=2)  # n = 8
B = Job("b", {"cpu": 1.0}, walltime_s=60.0, submit_time=1010.0, tasks=1)  # n = 1
C = Job("c", {"cpu": 2.0}, walltime_s=600.0, submit_time=1020.0, tasks=16)  # n = 32
D = Job("d", {"cpu": 1.0}, walltime_s=60.0, submit_time=1030.0, tasks=4, priority=5)  # n = 4
JOBS = [C, A, D, B]  # deliberately not in submit order
lg = math.log10

# Hand-written formula values (s, r, n, w = NOW - s per job), see domains.md / A.7.
EXPECTED_SCORES = {
    "fcfs": {"a": 1000.0, "b": 1010.0, "c": 1020.0, "d": 1030.0},
    "sjf": {"a": 3600.0, "b": 60.0, "c": 600.0, "d": 60.0},
    "smallest": {"a": 8.0, "b": 1.0, "c": 32.0, "d": 4.0},
    "priority": {"a": 0.0, "b": 0.0, "c": 0.0, "d": -5.0},
    "wfp3": {
        "a": -((1000 / 3600) ** 3) * 8,
        "b": -((990 / 60) ** 3) * 1,
        "c": -((980 / 600) ** 3) * 32,
        "d": -((970 / 60) ** 3) * 4,
    },
    "unicep": {
        "a": -1000 / (3 * 3600 + 1e-15),
        "b": -990 / 1e-15,  # log2(1) = 0: near-zero denominator, goes first
        "c": -980 / (5 * 600 + 1e-15),
        "d": -970 / (2 * 60 + 1e-15),
    },
    "f1": {
        "a": lg(3600) * 8 + 870 * lg(1000),
        "b": lg(60) * 1 + 870 * lg(1010),
        "c": lg(600) * 32 + 870 * lg(1020),
        "d": lg(60) * 4 + 870 * lg(1030),
    },
    "f2": {
        "a": math.sqrt(3600) * 8 + 25600 * lg(1000),
        "b": math.sqrt(60) * 1 + 25600 * lg(1010),
        "c": math.sqrt(600) * 32 + 25600 * lg(1020),
        "d": math.sqrt(60) * 4 + 25600 * lg(1030),
    },
    "f3": {
        "a": 3600 * 8 + 6860000 * lg(1000),
        "b": 60 * 1 + 6860000 * lg(1010),
        "c": 600 * 32 + 6860000 * lg(1020),
        "d": 60 * 4 + 6860000 * lg(1030),
    },
    "f4": {
        "a": 3600 * math.sqrt(8) + 530000 * lg(1000),
        "b": 60 * 1 + 530000 * lg(1010),
        "c": 600 * math.sqrt(32) + 530000 * lg(1020),
        "d": 60 * 2 + 530000 * lg(1030),
    },
}

EXPECTED_ORDERS = {
    "fcfs": "abcd",
    "sjf": "bdca",  # b and d tie on r = 60: submit time decides
    "smallest": "bdac",
    "priority": "dabc",
    "wfp3": "dbca",
    "unicep": "bdca",
    "f1": "bdac",
    "f2": "bdac",
    "f3": "abcd",
    "f4": "bdca",
}


class TestRegistry:
    def test_all_heuristics_listed(self):
        assert set(HEURISTICS) == set(EXPECTED_ORDERS)
        assert set(HEURISTIC_DESCRIPTIONS) == set(HEURISTICS)

    @pytest.mark.parametrize("name", sorted(EXPECTED_ORDERS))
    def test_refs_descriptions_and_module_names(self, name):
        policy = HEURISTICS[name]
        assert isinstance(policy, OrderingPolicy)
        assert policy.ref == PolicyRef(name, "1", "heuristic")
        assert HEURISTIC_DESCRIPTIONS[name].strip()
        assert "\n" not in HEURISTIC_DESCRIPTIONS[name]
        module = importlib.import_module(f"app.domains.hpc.heuristics.{name}")
        assert name == module.NAME

    def test_get_heuristic(self):
        assert get_heuristic("sjf") is HEURISTICS["sjf"]
        assert get_heuristic(" SJF ") is HEURISTICS["sjf"]
        gpu = get_heuristic("smallest", size_resource="gpu")
        assert gpu.ref == PolicyRef("smallest", "1", "heuristic")
        assert isinstance(gpu, ScoreHeuristic)
        assert gpu.size_resource == "gpu"

    def test_unknown_heuristic(self):
        with pytest.raises(UnknownHeuristicError) as info:
            get_heuristic("lifo")
        assert isinstance(info.value, KeyError)
        assert str(info.value).startswith("unknown heuristic 'lifo'; known: fcfs, sjf")


class TestFormulas:
    @pytest.mark.parametrize("name", sorted(EXPECTED_SCORES))
    def test_scores(self, name):
        policy = HEURISTICS[name]
        assert isinstance(policy, ScoreHeuristic)
        for job in JOBS:
            assert policy.score(job, NOW) == pytest.approx(EXPECTED_SCORES[name][job.id], rel=1e-12)

    @pytest.mark.parametrize(("name", "expected"), sorted(EXPECTED_ORDERS.items()))
    def test_orders(self, name, expected):
        order = HEURISTICS[name].order(JOBS, NOW)
        assert "".join(j.id for j in order) == expected
        assert "".join(j.id for j in HEURISTICS[name].order(list(reversed(JOBS)), NOW)) == expected

    def test_orders_match_sorting_by_the_expected_scores(self):
        for name, scores in EXPECTED_SCORES.items():
            by_score = sorted(JOBS, key=lambda j, s=scores: (s[j.id], j.submit_time, j.id))
            assert [j.id for j in by_score] == list(EXPECTED_ORDERS[name]), name

    def test_wfp3_uses_textbook_wait(self):
        # RLScheduler's quirk would use w = -1 - s; the textbook form grows with the wait.
        early = HEURISTICS["wfp3"].order([A], 1000.0 + 3600.0)
        assert early == [A]
        assert HEURISTICS["wfp3"].score(A, NOW + 1000) < HEURISTICS["wfp3"].score(A, NOW)
        # a job submitted after `now` has not waited: w clamps to 0
        assert HEURISTICS["wfp3"].score(A, 0.0) == 0.0


class TestTiesAndGuards:
    def test_ties_break_by_submit_then_id(self):
        x = Job("x", {"cpu": 1.0}, 10.0, 5.0)
        y = Job("y", {"cpu": 1.0}, 10.0, 5.0)
        z = Job("z", {"cpu": 1.0}, 10.0, 4.0)
        for name, policy in HEURISTICS.items():
            ids = [j.id for j in policy.order([y, x, z], 100.0)]
            assert ids.index("x") < ids.index("y"), name  # identical but for the id
        assert [j.id for j in HEURISTICS["sjf"].order([y, x, z], 100.0)] == ["z", "x", "y"]
        assert [j.id for j in HEURISTICS["fcfs"].order([y, x, z], 100.0)] == ["z", "x", "y"]

    def test_f1_guards(self):
        zero = Job("z", {"cpu": 2.0}, walltime_s=0.0, submit_time=0.0)
        assert HEURISTICS["f1"].score(zero, 10.0) == pytest.approx(lg(0.1) * 2 + 870 * lg(0.1))
        neg = Job("n", {"cpu": 2.0}, walltime_s=-5.0, submit_time=-3.0)
        assert HEURISTICS["f1"].score(neg, 10.0) == HEURISTICS["f1"].score(zero, 10.0)

    @pytest.mark.parametrize("name", sorted(EXPECTED_ORDERS))
    def test_scores_finite_for_degenerate_inputs(self, name):
        weird = [
            Job("w0", {"cpu": 0.0}, walltime_s=0.0, submit_time=0.0, tasks=1),
            Job("w1", {}, walltime_s=-1.0, submit_time=-10.0, tasks=3),
            Job("w2", {"cpu": 0.5}, walltime_s=1e-300, submit_time=1e-300, tasks=1),
            Job("w3", {"cpu": math.nan}, walltime_s=math.nan, submit_time=1.0, tasks=1),
            Job("w4", {"cpu": 1e300}, walltime_s=1e300, submit_time=1e300, tasks=1000),
        ]
        policy = HEURISTICS[name]
        assert isinstance(policy, ScoreHeuristic)
        for job in weird:
            assert not math.isnan(policy.score(job, 100.0)), job.id
        order = policy.order(weird, 100.0)
        assert sorted(j.id for j in order) == sorted(j.id for j in weird)
        assert policy.order(list(reversed(weird)), 100.0) == order

    def test_job_size(self):
        assert job_size(A) == 8.0
        assert job_size(Job("g", {"gpu": 2.0}, 1.0, 0.0, tasks=3)) == 3.0  # no cpu: n = tasks
        assert job_size(Job("g", {"gpu": 2.0}, 1.0, 0.0, tasks=3), "gpu") == 6.0
        assert job_size(Job("m", {"cpu": -1.0}, 1.0, 0.0)) == 0.0

    def test_size_resource_changes_order(self):
        g1 = Job("g1", {"cpu": 1.0, "gpu": 4.0}, 10.0, 0.0)
        g2 = Job("g2", {"cpu": 8.0, "gpu": 1.0}, 10.0, 1.0)
        assert [j.id for j in get_heuristic("smallest").order([g1, g2], 5.0)] == ["g1", "g2"]
        by_gpu = get_heuristic("smallest", "gpu").order([g1, g2], 5.0)
        assert [j.id for j in by_gpu] == ["g2", "g1"]
