"""The decision core on clusters larger than the property generator's.

* First-fit on more than ``SCAN_MAX_ROWS`` nodes walks each job shape's live rows and unlinks the
  dead ones (one by one, for other shapes too, then in blocks): the decisions equal the frozen
  oracle's, with the block unlinking forced early, with no or unbounded unlinking for other
  shapes, and with the defaults.
* The first view (what a ranking policy scores) is computed per job shape: its memory does not
  grow with jobs x nodes x resources.
"""

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from app.domains.hpc import decision as new_decision
from app.domains.hpc.heuristics import HEURISTICS
from app.domains.hpc.types import (
    SINGLE_NODE_LABEL,
    ClusterState,
    Job,
    Node,
    Placement,
    PolicyRef,
    RunningJob,
)
from app.kernel.errors import SnapshotError
from tests.unit.domain.reference import decision as ref_decision

REF = PolicyRef("scale", "test", "onnx")


def _cluster(seed: int, nodes: int, jobs: int) -> ClusterState:
    """Nodes of a few kinds (some half busy with running jobs), gangs of 1-16 tasks over a few
    demand shapes, some single-node; enough jobs to fill the cluster and reserve."""
    rng = np.random.default_rng(seed)
    node_list: list[Node] = []
    running: list[RunningJob] = []
    for i in range(nodes):
        node_id = f"n{i:04d}"
        capacity = {"cpu": 64.0, "mem": 256.0, "gpu": float(rng.choice([0.0, 0.0, 4.0, 8.0]))}
        allocated: dict[str, float] = {}
        if rng.random() < 0.2:
            job = Job(f"r{i:04d}", {"cpu": 32.0, "mem": 100.0}, float(rng.choice([50, 500])), 0.0)
            running.append(RunningJob(job, (Placement(node_id, 1),), -10.0))
            allocated = {"cpu": 32.0, "mem": 100.0}
        node_list.append(Node(node_id, capacity, allocated))
    pending = tuple(
        Job(
            f"j{k:05d}",
            {"cpu": float(rng.choice([1, 4, 16, 24])), "mem": float(rng.choice([4, 16, 64]))}
            | ({"gpu": 1.0} if rng.random() < 0.15 else {}),
            float(rng.choice([30, 60, 600, 3600])),
            float(rng.integers(0, 40)),
            tasks=int(rng.choice([1, 1, 2, 4, 16])),
            labels={SINGLE_NODE_LABEL: "true"} if rng.random() < 0.1 else {},
        )
        for k in range(jobs)
    )
    return ClusterState(now=1.0, nodes=tuple(node_list), running=tuple(running), pending=pending)


@contextmanager
def _unlink(after: int, block: int, push: int) -> Iterator[None]:
    saved = new_decision.UNLINK_AFTER, new_decision.UNLINK_BLOCK, new_decision.UNLINK_PUSH
    new_decision.UNLINK_AFTER, new_decision.UNLINK_BLOCK, new_decision.UNLINK_PUSH = (
        after,
        block,
        push,
    )
    try:
        yield
    finally:
        new_decision.UNLINK_AFTER, new_decision.UNLINK_BLOCK, new_decision.UNLINK_PUSH = saved


def _ranked(module: object, state: ClusterState) -> object:
    """A ranking walk: the first view's candidates by descending size x walltime."""
    run = module.DecisionRun(state)  # type: ignore[attr-defined]
    if run.done:
        return run.result(REF)
    view = run.view()
    score = [-(j.tasks * j.per_task.get("cpu", 0.0)) * j.walltime_s for j in view.candidates]
    rows = sorted(range(len(score)), key=lambda i: (score[i], i))
    run.run_order([view.candidates[i] for i in rows if view.mask[i]])
    return run.result(REF)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("unlink", [(1, 5, 0), (2, 64, 1), (1000, 1024, 1000), None])
def test_first_fit_on_large_clusters_equals_the_oracle(seed: int, unlink) -> None:
    state = _cluster(seed, 150, 700)
    assert len(state.nodes) > new_decision.SCAN_MAX_ROWS  # the shape walk, not the row scan
    expected = {
        name: ref_decision.decide(state, HEURISTICS[name]) for name in ("fcfs", "f1", "sjf")
    }
    expected_ranked = _ranked(ref_decision, state)
    defaults = new_decision.UNLINK_AFTER, new_decision.UNLINK_BLOCK, new_decision.UNLINK_PUSH
    with _unlink(*(unlink or defaults)):
        for name, decision in expected.items():
            got = new_decision.decide(state, HEURISTICS[name])
            assert got == decision, name
            assert got.reservations  # the cluster fills: a reservation and backfilling
        assert _ranked(new_decision, state) == expected_ranked


def test_the_first_view_does_not_grow_with_jobs_x_nodes() -> None:
    """1,500 nodes x 3,000 jobs: a jobs x nodes x resources array of float64 would be 108 MB,
    jobs x nodes 36 MB; the per-shape view stays far below either."""
    state = _cluster(7, 1500, 3000)
    run = new_decision.DecisionRun(state)
    tracemalloc.start()
    try:
        view = run.view()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(view.candidates) == 3000
    assert view.arrays is not None
    assert view.arrays.fits.shape == (3000,)
    assert peak < 16 * 2**20, f"first view peaked at {peak / 2**20:.1f} MiB"


_ODD_NODES = [
    ("capacity", {"cpu": float("nan")}),
    ("capacity", {"cpu": -1.0}),
    ("capacity", {"mem": float("inf")}),
    ("capacity", {"cpu": "64"}),
    ("capacity", {"cpu": 2**60}),
    ("allocated", {"cpu": -0.5}),
    ("allocated", {"cpu": 65.0}),
    ("allocated", {"gpu": 1.0}),
    ("allocated", {"cpu": None}),
    ("id", "n0003"),
]


def _outcome(check: object, state: ClusterState) -> object:
    try:
        return check(state)  # type: ignore[operator]
    except SnapshotError as exc:
        return (exc.field, str(exc))


@pytest.mark.parametrize(("field", "value"), _ODD_NODES)
@pytest.mark.parametrize("at", [0, 57, 119])
def test_node_checks_refuse_as_the_per_node_checks(field: str, value: object, at: int) -> None:
    """The vectorised node checks of a 120-node snapshot raise the per-node checks' first error
    (same field, same message) wherever the odd node is, and accept what they accept (then the
    decision is the oracle's)."""
    state = _cluster(3, 120, 10)
    nodes = list(state.nodes)
    n = nodes[at]
    if field == "id":
        nodes[at] = Node(str(value), n.capacity, n.allocated)
    elif field == "capacity":
        nodes[at] = Node(n.id, {**n.capacity, **value}, n.allocated)  # type: ignore[dict-item]
    else:
        nodes[at] = Node(n.id, n.capacity, {**n.allocated, **value})  # type: ignore[dict-item]
    odd = ClusterState(state.now, tuple(nodes), state.running, state.pending)
    expected = _outcome(ref_decision.validate_snapshot, odd)
    assert _outcome(new_decision.validate_snapshot, odd) == expected
    fcfs = HEURISTICS["fcfs"]
    got = _outcome(lambda s: new_decision.decide(s, fcfs), odd)
    assert got == (expected if expected is not None else ref_decision.decide(odd, fcfs))


def test_integer_and_boolean_amounts_decide_as_the_oracle() -> None:
    """Amounts given as ints or bools are the floats they convert to."""
    state = _cluster(4, 100, 300)
    nodes = tuple(
        Node(n.id, {k: int(v) for k, v in n.capacity.items()} | {"flag": True}, n.allocated)
        for n in state.nodes
    )
    state = ClusterState(state.now, nodes, state.running, state.pending)
    for name in ("fcfs", "f1"):
        assert new_decision.decide(state, HEURISTICS[name]) == ref_decision.decide(
            state, HEURISTICS[name]
        )
