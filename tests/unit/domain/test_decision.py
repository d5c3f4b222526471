import math
from typing import ClassVar

import pytest

from app.domains.hpc.decision import (
    DecisionConfig,
    DecisionRun,
    apply_decision,
    decide,
    earliest_start,
    validate_snapshot,
)
from app.domains.hpc.heuristics import HEURISTICS
from app.domains.hpc.policy import Phase, StepView
from app.domains.hpc.types import (
    SINGLE_NODE_LABEL,
    Backfill,
    ClusterState,
    Job,
    Node,
    NodeState,
    Placement,
    PlacementStrategy,
    PolicyRef,
    Reservation,
    RunningJob,
)
from app.kernel.errors import DecisionFinishedError, InvalidPickError, SnapshotError

FCFS = HEURISTICS["fcfs"]
SJF = HEURISTICS["sjf"]
EASY = DecisionConfig(backfill=Backfill.EASY, explain=True)
NONE = DecisionConfig(backfill=Backfill.NONE, explain=True)


def cpu_job(jid, cpus, walltime, submit, **kw):
    return Job(jid, {"cpu": 1.0}, walltime_s=walltime, submit_time=submit, tasks=cpus, **kw)


def running(jid, node_cpus, start, walltime):
    tasks = sum(node_cpus.values())
    job = cpu_job(jid, tasks, walltime, start)
    return RunningJob(job, tuple(Placement(n, t) for n, t in node_cpus.items()), start)


def cluster(now, caps, runs=(), pending=(), finished=frozenset(), states=None):
    used: dict[str, float] = {}
    for r in runs:
        for p in r.placements:
            used[p.node_id] = used.get(p.node_id, 0.0) + p.tasks * r.job.per_task["cpu"]
    states = states or {}
    nodes = tuple(
        Node(
            nid,
            {"cpu": float(c)},
            allocated={"cpu": used.get(nid, 0.0)},
            state=states.get(nid, NodeState.UP),
        )
        for nid, c in caps.items()
    )
    return ClusterState(now, nodes, tuple(runs), tuple(pending), frozenset(finished))


def allocated(decision):
    return {a.job_id: [(p.node_id, p.tasks) for p in a.placements] for a in decision.allocations}


class FirstMasked:
    """A stepping policy that always picks the first allowed candidate."""

    ref = PolicyRef("first-masked", "test", "onnx")

    def __init__(self):
        self.views: list[StepView] = []

    def pick(self, view):
        self.views.append(view)
        return view.mask.index(True)


class TestEasyBackfilling:
    """3 nodes x 4 cpu; r1 holds n1 until 100, r2 holds 2 cpu of n2 until 200; now = 10.

    Free now: n1 0, n2 2, n3 4 (6 cpu).  ``big`` (8 cpu) cannot start; releasing r1 at t=100
    gives 10 free cpu -> shadow time 100 with 2 cpu to spare.
    """

    RUNS = (running("r1", {"n1": 4}, 0.0, 100.0), running("r2", {"n2": 2}, 0.0, 200.0))
    CAPS: ClassVar[dict[str, int]] = {"n1": 4, "n2": 4, "n3": 4}
    BIG = cpu_job("big", 8, 1000.0, 1.0)
    LONG = cpu_job("long", 2, 500.0, 2.0)  # ends 510 > 100 but uses only the 2 spare cpu
    LONG2 = cpu_job("long2", 1, 500.0, 3.0)  # ends after the shadow time and no spare left
    SHORT = cpu_job("short", 1, 50.0, 4.0)  # ends 60 <= 100

    def state(self, *pending):
        return cluster(
            10.0, self.CAPS, self.RUNS, pending or (self.BIG, self.LONG, self.LONG2, self.SHORT)
        )

    def test_easy(self):
        d = decide(self.state(), FCFS, EASY)
        assert d.reservations == (Reservation("big", 100.0),)
        assert allocated(d) == {"long": [("n2", 2)], "short": [("n3", 1)]}
        assert d.explain["not_started"] == {
            "big": "does not fit; reserved to start at 1970-01-01T00:01:40+00:00 (in 1 min 30 s)",
            "long2": "blocked by reservation",
        }
        assert d.explain["order"] == ["big", "long", "long2", "short"]
        assert d.queue_length == 4
        assert d.policy == FCFS.ref

    def test_backfills_because_it_ends_before_the_shadow_time(self):
        d = decide(self.state(self.BIG, self.SHORT), FCFS, EASY)
        assert list(allocated(d)) == ["short"]

    def test_backfills_because_it_leaves_enough_for_the_reserved_job(self):
        d = decide(self.state(self.BIG, self.LONG), FCFS, EASY)
        assert list(allocated(d)) == ["long"]

    def test_refused_when_it_would_delay_the_reserved_job(self):
        wide = cpu_job("wide", 3, 500.0, 2.0)  # fits now (n3) but leaves 7 < 8 at t=100
        d = decide(self.state(self.BIG, wide), FCFS, EASY)
        assert allocated(d) == {}
        assert d.explain["not_started"]["wide"] == "blocked by reservation"

    def test_ends_exactly_at_the_shadow_time(self):
        exact = cpu_job("exact", 4, 90.0, 2.0)  # 10 + 90 == 100: allowed ("at or before")
        d = decide(self.state(self.BIG, exact), FCFS, EASY)
        assert list(allocated(d)) == ["exact"]

    def test_placement_matters_for_the_extra_resources_rule(self):
        # best-fit puts 'long' on n2 (tight), first-fit too; tetris prefers the emptier n3:
        # held on n3 it still leaves n1 4 + n2 2 + n3 2 = 8 at t=100 -> allowed either way
        for strategy in PlacementStrategy:
            cfg = DecisionConfig(placement=strategy)
            d = decide(self.state(self.BIG, self.LONG), FCFS, cfg)
            assert list(allocated(d)) == ["long"], strategy

    def test_no_backfilling_blocks_the_queue(self):
        d = decide(self.state(), FCFS, NONE)
        assert d.reservations == (Reservation("big", 100.0),)
        assert d.allocations == ()
        assert d.explain["not_started"]["short"] == "blocked by reservation"

    def test_head_jobs_start_before_the_reservation(self):
        d = decide(self.state(), SJF, EASY)
        # SJF: short, long, long2 start in HEAD order (6 free cpu), then big is reserved; its
        # earliest start counts the three jobs started by this decision: free 2 now, 3 at 60
        # (short ends), 7 at 100 (r1), 9 at 200 (r2) -> 200.
        assert list(allocated(d)) == ["short", "long", "long2"]
        assert d.reservations == (Reservation("big", 200.0),)

    def test_shadow_time_counts_jobs_started_in_this_decision(self):
        a = cpu_job("a", 6, 300.0, 1.0)  # starts now on n2+n3, ends 310
        b = cpu_job("b", 8, 10.0, 2.0)  # needs 8: at 100 only 4 free, at 200 6, at 310 12
        d = decide(self.state(a, b), FCFS, EASY)
        assert list(allocated(d)) == ["a"]
        assert d.reservations == (Reservation("b", 310.0),)

    def test_overdue_running_jobs_are_released_first(self):
        runs = (running("late", {"n1": 4}, 0.0, 5.0),)  # requested end 5 < now 10
        state = cluster(10.0, {"n1": 4}, runs, (cpu_job("j", 2, 10.0, 1.0),))
        d = decide(state, FCFS, EASY)
        assert d.reservations == (Reservation("j", 10.0),)  # never before now

    def test_equal_end_times_release_together(self):
        runs = (running("x", {"n1": 2}, 0.0, 50.0), running("y", {"n1": 2}, 0.0, 50.0))
        state = cluster(10.0, {"n1": 4}, runs, (cpu_job("j", 4, 10.0, 1.0),))
        assert earliest_start(state, state.pending[0]) == 50.0


class TestEligibility:
    def test_unfinished_dependencies_block(self):
        dep = cpu_job("d", 1, 10.0, 1.0, depends_on=("x",))
        state = cluster(0.0, {"n1": 4}, pending=(dep,))
        d = decide(state, FCFS, EASY)
        assert d.allocations == ()
        assert d.reservations == ()
        assert d.explain["not_started"] == {"d": "dependencies unfinished: x"}
        done = cluster(0.0, {"n1": 4}, pending=(dep,), finished={"x"})
        assert list(allocated(decide(done, FCFS, EASY))) == ["d"]

    def test_dependency_on_a_pending_or_unknown_job_blocks(self):
        a = cpu_job("a", 1, 10.0, 1.0)
        b = cpu_job("b", 1, 10.0, 2.0, depends_on=("a", "ghost"))
        d = decide(cluster(0.0, {"n1": 4}, pending=(a, b)), FCFS, EASY)
        assert list(allocated(d)) == ["a"]
        assert d.explain["not_started"]["b"] == "dependencies unfinished: a, ghost"

    def test_down_and_drain_nodes_get_nothing(self):
        states = {"n1": NodeState.DOWN, "n2": NodeState.DRAIN}
        jobs = tuple(cpu_job(f"j{i}", 2, 10.0, float(i)) for i in range(4))
        state = cluster(0.0, {"n1": 4, "n2": 4, "n3": 4}, pending=jobs, states=states)
        d = decide(state, FCFS, EASY)
        assert allocated(d) == {"j0": [("n3", 2)], "j1": [("n3", 2)]}
        view = DecisionRun(state).view()
        assert view.free["n1"] == {}
        assert view.free["n2"] == {}
        assert view.schedulable_capacity == {"cpu": 4.0}

    def test_unschedulable_jobs_are_skipped_not_reserved(self):
        huge = cpu_job("huge", 9, 10.0, 1.0)
        fat = Job("fat", {"cpu": 5.0}, 10.0, 2.0)
        gpu = Job("gpu", {"gpu": 1.0}, 10.0, 3.0)
        ok = cpu_job("ok", 2, 10.0, 4.0)
        state = cluster(0.0, {"n1": 4, "n2": 4}, pending=(huge, fat, gpu, ok))
        d = decide(state, FCFS, NONE)
        assert list(allocated(d)) == ["ok"]
        assert d.reservations == ()
        reasons = d.explain["not_started"]
        assert reasons["huge"] == "unschedulable: needs cpu=9 in total > schedulable capacity (8)"
        assert reasons["fat"] == "unschedulable: needs cpu=5 per task > largest node (4)"
        assert reasons["gpu"] == "unschedulable: needs gpu=1 per task > largest node (0)"
        assert d.explain["unschedulable"] == ["huge", "fat", "gpu"]

    def test_single_node_label(self):
        single = cpu_job("s", 6, 10.0, 1.0, labels={SINGLE_NODE_LABEL: "true"})
        spread = cpu_job("p", 6, 10.0, 2.0)
        state = cluster(0.0, {"n1": 4, "n2": 4}, pending=(single, spread))
        d = decide(state, FCFS, EASY)
        assert allocated(d) == {"p": [("n1", 4), ("n2", 2)]}
        assert d.explain["not_started"]["s"] == (
            "unschedulable: needs all 6 tasks on one node; no node can hold them"
        )
        fits = cpu_job("f", 3, 10.0, 1.0, labels={SINGLE_NODE_LABEL: "true"})
        state = cluster(0.0, {"n1": 4, "n2": 4}, pending=(cpu_job("x", 2, 1.0, 0.0), fits))
        assert allocated(decide(state, FCFS, EASY)) == {"x": [("n1", 2)], "f": [("n2", 3)]}

    def test_invalid_pending_jobs_are_unschedulable(self):
        bad = (
            Job("t0", {"cpu": 1.0}, 10.0, 0.0, tasks=0),
            Job("neg", {"cpu": -1.0}, 10.0, 0.0),
            Job("nan", {"cpu": math.nan}, 10.0, 0.0),
            Job("inf", {"cpu": 1.0, "mem": math.inf}, 10.0, 0.0),
            Job("wall", {"cpu": 1.0}, math.nan, 0.0),
            Job("negwall", {"cpu": 1.0}, -1.0, 0.0),
        )
        d = decide(cluster(0.0, {"n1": 4}, pending=bad), FCFS, EASY)
        assert d.allocations == ()
        assert all(
            r.startswith("unschedulable: invalid") for r in d.explain["not_started"].values()
        )
        assert len(d.explain["not_started"]) == len(bad)

    def test_resources_held_with_no_known_end(self):
        # allocated says 4 cpu in use but no running job explains it: nothing can be reserved
        node = Node("n1", {"cpu": 4.0}, allocated={"cpu": 4.0})
        state = ClusterState(0.0, (node,), pending=(cpu_job("j", 1, 1.0, 0.0),))
        d = decide(state, FCFS, EASY)
        assert d.allocations == ()
        assert d.reservations == ()
        assert d.explain["not_started"]["j"].startswith("blocked: resources held with no known end")


class TestSnapshotValidation:
    def test_over_allocated_node(self):
        state = ClusterState(0.0, (Node("n1", {"cpu": 4.0}, allocated={"cpu": 5.0}),))
        with pytest.raises(SnapshotError) as info:
            decide(state, FCFS)
        assert info.value.field == "nodes[0].allocated"

    def test_allocated_on_a_missing_resource(self):
        state = ClusterState(0.0, (Node("n1", {"cpu": 4.0}, allocated={"gpu": 1.0}),))
        with pytest.raises(SnapshotError):
            validate_snapshot(state)

    def test_running_on_unknown_node(self):
        state = cluster(0.0, {"n1": 4}, runs=(running("r", {"n9": 1}, 0.0, 10.0),))
        with pytest.raises(SnapshotError) as info:
            validate_snapshot(state)
        assert info.value.field == "running[0].placements"
        assert "unknown node 'n9'" in str(info.value)

    def test_running_jobs_over_capacity(self):
        runs = (running("a", {"n1": 3}, 0.0, 10.0), running("b", {"n1": 3}, 0.0, 10.0))
        state = ClusterState(0.0, (Node("n1", {"cpu": 4.0}),), runs)
        with pytest.raises(SnapshotError, match="exceeds capacity"):
            validate_snapshot(state)

    @pytest.mark.parametrize(
        "state",
        [
            ClusterState(math.nan, ()),
            ClusterState(0.0, (Node("a", {"cpu": 1.0}), Node("a", {"cpu": 1.0}))),
            ClusterState(0.0, (Node("a", {"cpu": -1.0}),)),
            ClusterState(0.0, (Node("a", {"cpu": math.inf}),)),
            ClusterState(
                0.0,
                (Node("a", {"cpu": 1.0}),),
                pending=(cpu_job("x", 1, 1.0, 0.0), cpu_job("x", 1, 1.0, 0.0)),
            ),
            ClusterState(
                0.0,
                (Node("a", {"cpu": 4.0}, allocated={"cpu": 1.0}),),
                running=(RunningJob(cpu_job("r", 2, 1.0, 0.0), (Placement("a", 1),), 0.0),),
            ),
        ],
    )
    def test_refused(self, state):
        with pytest.raises(SnapshotError):
            validate_snapshot(state)

    def test_allocated_below_running_usage_is_taken_as_running_usage(self):
        # node.allocated omitted: the running job's usage still counts (never over-allocate)
        runs = (running("r", {"n1": 3}, 0.0, 10.0),)
        state = ClusterState(0.0, (Node("n1", {"cpu": 4.0}),), runs, (cpu_job("j", 2, 1.0, 0.0),))
        d = decide(state, FCFS, EASY)
        assert d.allocations == ()
        assert d.reservations == (Reservation("j", 10.0),)


class TestSteppingInterface:
    STATE = TestEasyBackfilling().state()

    def test_views_phases_and_masks(self):
        run = DecisionRun(self.STATE, EASY)
        view = run.view()
        assert view.phase is Phase.HEAD
        assert [j.id for j in view.candidates] == ["big", "long", "long2", "short"]
        assert view.mask == (True, True, True, True)  # HEAD: anything eligible may be picked
        assert view.fits_now == (False, True, True, True)
        assert view.free["n3"] == {"cpu": 4.0}
        assert view.resource_names == ("cpu",)
        run.apply(0)  # big does not fit -> reserved
        view = run.view()
        assert view.phase is Phase.BACKFILL
        assert view.reservation == Reservation("big", 100.0)
        # each alone would be fine: long/long2 use spare cpu, short ends before t=100
        assert view.mask == (False, True, True, True)
        run.apply(3)
        view = run.view()
        assert [j.id for j in view.candidates] == ["big", "long", "long2"]
        assert view.mask == (False, True, True)
        run.apply(1)  # long takes the 2 spare cpu: long2 would now delay big
        assert run.done
        d = run.result(PolicyRef("p", "1", "onnx"))
        assert list(allocated(d)) == ["short", "long"]
        with pytest.raises(DecisionFinishedError):
            run.view()
        with pytest.raises(DecisionFinishedError):
            run.apply(0)

    @pytest.mark.parametrize("index", [-1, 4, 99])
    def test_out_of_range_pick(self, index):
        run = DecisionRun(self.STATE, EASY)
        with pytest.raises(InvalidPickError):
            run.apply(index)

    def test_masked_pick(self):
        run = DecisionRun(self.STATE, EASY)
        run.apply(0)
        with pytest.raises(InvalidPickError, match="masked out"):
            run.apply(0)  # the reserved job itself

    def test_first_masked_equals_fcfs(self):
        policy = FirstMasked()
        stepped = decide(self.STATE, policy, EASY)
        ordered = decide(self.STATE, FCFS, EASY)
        assert stepped.allocations == ordered.allocations
        assert stepped.reservations == ordered.reservations
        assert stepped.policy == policy.ref
        assert stepped.explain["order"] == ["big", "long", "short"]  # the picks
        assert ordered.explain["order"] == ["big", "long", "long2", "short"]  # the walk
        assert [j.id for j in policy.views[0].candidates] == ["big", "long", "long2", "short"]

    def test_no_backfilling_stops_after_the_reservation(self):
        run = DecisionRun(self.STATE, NONE)
        run.apply(0)
        assert run.done
        assert run.reservation == Reservation("big", 100.0)

    def test_max_allocations(self):
        jobs = tuple(cpu_job(f"j{i}", 1, 10.0, float(i)) for i in range(5))
        state = cluster(0.0, {"n1": 8}, pending=jobs)
        d = decide(state, FCFS, DecisionConfig(max_allocations=2, explain=True))
        assert list(allocated(d)) == ["j0", "j1"]
        assert d.explain["not_started"]["j2"] == "max_allocations reached"
        assert decide(state, FirstMasked(), DecisionConfig(max_allocations=2)).allocations == (
            d.allocations
        )
        assert decide(state, FCFS, DecisionConfig(max_allocations=0)).allocations == ()

    def test_empty_queue(self):
        state = cluster(0.0, {"n1": 8})
        run = DecisionRun(state)
        assert run.done
        d = decide(state, FirstMasked())
        assert d.allocations == ()
        assert d.reservations == ()
        assert d.queue_length == 0

    def test_explain_is_off_by_default(self):
        assert decide(self.STATE, FCFS).explain == {}


class TestHelpers:
    def test_apply_decision(self):
        state = TestEasyBackfilling().state()
        d = decide(state, FCFS, EASY)
        after = apply_decision(state, d)
        assert {j.id for j in after.pending} == {"big", "long2"}
        assert {r.job.id for r in after.running} == {"r1", "r2", "long", "short"}
        alloc = {n.id: n.allocated["cpu"] for n in after.nodes}
        assert alloc == {"n1": 4.0, "n2": 4.0, "n3": 1.0}
        validate_snapshot(after)

    def test_earliest_start(self):
        state = TestEasyBackfilling().state()
        assert earliest_start(state, cpu_job("q", 8, 1.0, 0.0)) == 100.0
        assert earliest_start(state, cpu_job("q", 10, 1.0, 0.0)) == 100.0
        assert earliest_start(state, cpu_job("q", 11, 1.0, 0.0)) == 200.0
        assert earliest_start(state, cpu_job("q", 6, 1.0, 0.0)) == 10.0
        assert earliest_start(state, cpu_job("q", 13, 1.0, 0.0)) is None


class TestLockStep:
    def test_interleaved_runs_equal_separate_decisions(self):
        """The batched pipeline drives many runs one step at a time; runs share no state."""
        states = [
            TestEasyBackfilling().state(),
            cluster(0.0, {"n1": 8}, pending=tuple(cpu_job(f"j{i}", 3, 10.0, i) for i in range(4))),
            cluster(5.0, {"n1": 2, "n2": 2}, pending=(cpu_job("a", 4, 1.0, 0.0),)),
        ]
        runs = [DecisionRun(s, EASY) for s in states]
        while not all(r.done for r in runs):
            live = [r for r in runs if not r.done]
            views = [r.view() for r in live]  # one "batch"
            for run, view in zip(live, views, strict=True):
                run.apply(view.mask.index(True))
        policy = FirstMasked()
        for run, state in zip(runs, states, strict=True):
            alone = decide(state, policy, EASY)
            together = run.result(policy.ref)
            assert together.allocations == alone.allocations
            assert together.reservations == alone.reservations


class TestRobustness:
    def test_ordering_policy_returning_unknown_or_repeated_jobs(self):
        class Sloppy:
            ref = PolicyRef("sloppy", "1", "heuristic")

            def order(self, jobs, now):
                ghost = cpu_job("ghost", 1, 1.0, 0.0)
                return [ghost, *jobs, *jobs]

        state = cluster(
            0.0, {"n1": 4}, pending=(cpu_job("a", 2, 1.0, 0.0), cpu_job("b", 2, 1.0, 1.0))
        )
        d = decide(state, Sloppy(), EASY)
        assert list(allocated(d)) == ["a", "b"]
        assert d.explain["order"] == ["a", "b"]

    def test_no_node_up(self):
        state = cluster(0.0, {"n1": 4}, pending=(cpu_job("a", 1, 1.0, 0.0),), states={"n1": "down"})
        d = decide(state, FCFS, EASY)
        assert d.allocations == ()
        assert d.reservations == ()
        assert d.explain["not_started"] == {"a": "unschedulable: no node is up"}
        assert DecisionRun(state).done
