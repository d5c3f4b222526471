"""Property tests of the decision loop on random clusters (1-3 resources).

Invariants (issue 2): no node over capacity on any resource, a job allocated at most once with all
of its tasks, down/drain nodes get nothing, unfinished dependencies block, EASY never delays the
reserved job; the stepping path equals the ordering path for FCFS; backfilling is maximal.
"""

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from app.domains.hpc.decision import (
    DecisionConfig,
    DecisionRun,
    apply_decision,
    decide,
    earliest_start,
    validate_snapshot,
)
from app.domains.hpc.heuristics import HEURISTICS
from app.domains.hpc.types import (
    SINGLE_NODE_LABEL,
    Allocation,
    Backfill,
    ClusterState,
    Decision,
    Job,
    Node,
    NodeState,
    Placement,
    PlacementStrategy,
    PolicyRef,
    RunningJob,
)
from app.kernel.placement import place
from app.kernel.resources import FIT_EPS

RESOURCES = ("cpu", "mem", "gpu")
AMOUNTS = (0.0, 0.1, 0.5, 1.0, 1.0, 2.0, 2.0, 3.0)
CAPACITIES = (1.0, 2.0, 4.0, 4.0, 8.0, 8.0, 0.3, 0.0)
SETTINGS = settings(max_examples=200, deadline=None)


@st.composite
def demands(draw, names):
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True))
    return {r: draw(st.sampled_from(AMOUNTS)) for r in chosen}


def _first_fit(per_task, tasks, order, used, caps, names):
    """Place a running gang on the generated nodes (first fit in ``order``), updating ``used``."""
    placements: list[tuple[int, int]] = []
    left = tasks
    for i in order:
        take = 0
        while left and all(
            used[i][r] + (take + 1) * per_task.get(r, 0.0) <= caps[i][r] + 1e-12 for r in names
        ):
            take += 1
            left -= 1
        if take:
            placements.append((i, take))
        if not left:
            break
    if left:
        return None
    for i, t in placements:
        for r, v in per_task.items():
            used[i][r] += v * t
    return placements


@st.composite
def running_jobs(draw, names, caps, ids, now):
    used = [dict.fromkeys(names, 0.0) for _ in caps]
    running = []
    for k in range(draw(st.integers(0, 8))):
        per_task = draw(demands(names))
        tasks = draw(st.integers(1, 4))
        order = draw(st.permutations(range(len(caps))))
        placements = _first_fit(per_task, tasks, order, used, caps, names)
        if placements is None:
            continue
        start = now - draw(st.sampled_from((0.0, 5.0, 50.0)))
        walltime = draw(st.sampled_from((1.0, 20.0, 60.0, 200.0)))
        job = Job(f"r{k}", per_task, walltime, start - 1.0, tasks=tasks)
        running.append(RunningJob(job, tuple(Placement(ids[i], t) for i, t in placements), start))
    return running, used


@st.composite
def pending_jobs(draw, names):
    pending = []
    n_pending = draw(st.integers(0, 10))
    pending_ids = [f"j{k}" for k in range(n_pending)]
    for k in range(n_pending):
        deps: list[str] = []
        if draw(st.integers(0, 3)) == 0:
            deps = draw(st.lists(st.sampled_from([*pending_ids, "done", "ghost"]), max_size=2))
        labels = {SINGLE_NODE_LABEL: "true"} if draw(st.integers(0, 4)) == 0 else {}
        pending.append(
            Job(
                pending_ids[k],
                draw(demands(names)),
                walltime_s=draw(st.sampled_from((1.0, 10.0, 50.0, 100.0, 500.0))),
                submit_time=draw(st.sampled_from((0.0, 1.0, 2.0, 5.0))),
                tasks=draw(st.integers(1, 4)),
                priority=draw(st.integers(0, 2)),
                depends_on=tuple(dict.fromkeys(d for d in deps if d != pending_ids[k])),
                labels=labels,
            )
        )
    draw(st.randoms(use_true_random=False)).shuffle(pending)
    return pending


@st.composite
def states(draw):
    names = tuple(draw(st.lists(st.sampled_from(RESOURCES), min_size=1, max_size=3, unique=True)))
    now = draw(st.sampled_from((0.0, 10.0, 100.0, 1000.0)))
    n_nodes = draw(st.integers(1, 6))
    caps = [{r: draw(st.sampled_from(CAPACITIES)) for r in names} for _ in range(n_nodes)]
    ids = [f"n{i}" for i in draw(st.permutations(range(n_nodes)))]
    running, used = draw(running_jobs(names, caps, ids, now))
    nodes = []
    for i in range(n_nodes):
        allocated = dict(used[i])
        if draw(st.integers(0, 14)) == 0:  # sometimes resources held by nobody we know of
            r = draw(st.sampled_from(names))
            allocated[r] = max(allocated[r], caps[i][r])
        state = draw(st.sampled_from((NodeState.UP,) * 4 + (NodeState.DOWN, NodeState.DRAIN)))
        nodes.append(Node(ids[i], caps[i], allocated, state))
    pending = draw(pending_jobs(names))
    return ClusterState(now, tuple(nodes), tuple(running), tuple(pending), frozenset({"done"}))


configs = st.builds(
    DecisionConfig,
    backfill=st.sampled_from(list(Backfill)),
    placement=st.sampled_from(list(PlacementStrategy)),
    explain=st.booleans(),
)


class FirstMasked:
    ref = PolicyRef("first-masked", "test", "onnx")

    def pick(self, view):
        return view.mask.index(True)


class OrderedStepper:
    """Steps like the ordering path: the allowed candidate that comes first in the heuristic."""

    def __init__(self, name: str) -> None:
        self.heuristic = HEURISTICS[name]
        self.ref = PolicyRef(f"stepped-{name}", "test", "onnx")

    def pick(self, view):
        rank = {j.id: i for i, j in enumerate(self.heuristic.order(view.candidates, view.now))}
        allowed = [i for i, ok in enumerate(view.mask) if ok]
        return min(allowed, key=lambda i: rank[view.candidates[i].id])


class RandomMasked:
    ref = PolicyRef("random-masked", "test", "onnx")

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def pick(self, view):
        return self.rng.choice([i for i, ok in enumerate(view.mask) if ok])


def check_invariants(state: ClusterState, decision: Decision, config: DecisionConfig) -> None:
    nodes = {n.id: n for n in state.nodes}
    pending = {j.id: j for j in state.pending}
    seen: set[str] = set()
    for alloc in decision.allocations:
        assert alloc.job_id in pending
        assert alloc.job_id not in seen  # at most once
        seen.add(alloc.job_id)
        job = pending[alloc.job_id]
        assert all(d in state.finished for d in job.depends_on)  # deps block
        assert sum(p.tasks for p in alloc.placements) == job.tasks  # all tasks or none
        assert all(p.tasks >= 1 for p in alloc.placements)
        assert len({p.node_id for p in alloc.placements}) == len(alloc.placements)
        if job.single_node:
            assert len(alloc.placements) == 1
        for p in alloc.placements:
            assert nodes[p.node_id].state == NodeState.UP  # down/drain get nothing
    after = apply_decision(state, decision)
    for node in after.nodes:
        for r, a in node.allocated.items():
            cap = node.capacity.get(r, 0.0)
            assert a <= cap + FIT_EPS * max(1.0, cap) * 10, (node.id, r, a, cap)
    validate_snapshot(after)
    assert len(decision.reservations) <= 1
    for res in decision.reservations:
        assert res.job_id in pending
        assert res.job_id not in seen
        assert res.start_at >= state.now
        reserved = pending[res.job_id]
        # the reserved job can start at the promised time given everything this round started
        start = earliest_start(after, reserved)
        assert start is not None
        assert start <= res.start_at, (start, res.start_at)
        # backfilling never pushes the reserved job past the start it had before this round's
        # backfills: its earliest start after the whole round is the promised one, exactly
        assert start == res.start_at, (start, res.start_at)
        if config.backfill == Backfill.NONE:
            assert start == res.start_at
            assert earliest_start(state, reserved) == res.start_at or decision.allocations


def check_maximal(state: ClusterState, decision: Decision, config: DecisionConfig) -> None:
    """Nothing more could have started: each remaining eligible job fits no longer, or (EASY)
    would delay the reserved job; without a reservation every fitting job was started."""
    if config.max_allocations is not None:
        return
    after = apply_decision(state, decision)
    started = {a.job_id for a in decision.allocations}
    reserved = {r.job_id: r for r in decision.reservations}
    if reserved and config.backfill == Backfill.NONE:
        return
    for job in state.pending:
        if job.id in started or job.id in reserved:
            continue
        if not all(d in state.finished for d in job.depends_on):
            continue
        rows = place(job, after.nodes, strategy=config.placement)
        if rows is None:
            continue
        assert reserved, f"{job.id} fits now but was not started"
        (res,) = reserved.values()
        assert state.now + job.walltime_s > res.start_at
        extra = Decision((Allocation(job.id, rows),), (), 0, decision.policy)
        start = earliest_start(apply_decision(after, extra), _job(state, res.job_id))
        assert start is None or start > res.start_at, job.id


def _job(state: ClusterState, job_id: str) -> Job:
    return next(j for j in state.pending if j.id == job_id)


class TestDecisionProperties:
    @SETTINGS
    @given(state=states(), config=configs, name=st.sampled_from(sorted(HEURISTICS)))
    def test_ordering_path(self, state, config, name):
        decision = decide(state, HEURISTICS[name], config)
        check_invariants(state, decision, config)
        check_maximal(state, decision, config)

    @SETTINGS
    @given(state=states(), config=configs)
    def test_stepping_first_masked_equals_fcfs(self, state, config):
        stepped = decide(state, FirstMasked(), config)
        ordered = decide(state, HEURISTICS["fcfs"], config)
        assert stepped.allocations == ordered.allocations
        assert stepped.reservations == ordered.reservations
        check_invariants(state, stepped, config)

    @settings(max_examples=100, deadline=None)
    @given(state=states(), config=configs, name=st.sampled_from(sorted(HEURISTICS)))
    def test_stepping_in_heuristic_order_equals_the_ordering_path(self, state, config, name):
        stepped = decide(state, OrderedStepper(name), config)
        ordered = decide(state, HEURISTICS[name], config)
        assert stepped.allocations == ordered.allocations
        assert stepped.reservations == ordered.reservations

    @SETTINGS
    @given(state=states(), config=configs, seed=st.integers(0, 2**32 - 1))
    def test_stepping_random_picks(self, state, config, seed):
        run = DecisionRun(state, config)
        policy = RandomMasked(seed)
        while not run.done:
            view = run.view()
            assert len(view.mask) == len(view.candidates) == len(view.fits_now)
            for job, ok, fits in zip(view.candidates, view.mask, view.fits_now, strict=True):
                if ok and view.phase == "backfill":
                    assert fits
                for n in view.nodes:
                    if n.state != NodeState.UP:
                        assert not any(view.free[n.id].values())
                assert job.id not in {a.job_id for a in run.allocations}
            run.apply(policy.pick(view))
        decision = run.result(policy.ref)
        check_invariants(state, decision, config)
        check_maximal(state, decision, config)

    @SETTINGS
    @given(state=states(), config=configs, cap=st.integers(1, 3))
    def test_max_allocations(self, state, config, cap):
        decision = decide(state, HEURISTICS["sjf"], replace(config, max_allocations=cap))
        assert len(decision.allocations) <= cap
        check_invariants(state, decision, config)
