"""The decision core on clusters larger than the property generator's.

* First-fit on more than ``SCAN_MAX_ROWS`` nodes walks each job shape's live rows and unlinks the
  dead ones (one by one, then in blocks): the decisions equal the frozen oracle's, with the block
  unlinking forced early and with the defaults.
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
def _unlink(after: int, block: int) -> Iterator[None]:
    saved = new_decision.UNLINK_AFTER, new_decision.UNLINK_BLOCK
    new_decision.UNLINK_AFTER, new_decision.UNLINK_BLOCK = after, block
    try:
        yield
    finally:
        new_decision.UNLINK_AFTER, new_decision.UNLINK_BLOCK = saved


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
@pytest.mark.parametrize("unlink", [(1, 5), (2, 64), None])
def test_first_fit_on_large_clusters_equals_the_oracle(seed: int, unlink) -> None:
    state = _cluster(seed, 150, 700)
    assert len(state.nodes) > new_decision.SCAN_MAX_ROWS  # the shape walk, not the row scan
    expected = {
        name: ref_decision.decide(state, HEURISTICS[name]) for name in ("fcfs", "f1", "sjf")
    }
    expected_ranked = _ranked(ref_decision, state)
    with _unlink(*unlink) if unlink else _unlink(new_decision.UNLINK_AFTER, 1024):
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
