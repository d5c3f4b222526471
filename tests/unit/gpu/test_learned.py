"""A learned scorer (``ScoredPolicy``) through decide(): the same admission walk as the
heuristics, the decision invariants, its window and its refusal of unusable scores."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.domains.gpu.decide import decide
from app.domains.gpu.encoding import FEATURE_NAMES, BoolArray, FloatArray
from app.domains.gpu.heuristics import get_heuristic
from app.domains.gpu.learned import PolicyOutputError, ScoredPolicy
from app.domains.gpu.types import ClusterSnapshot, GpuJob, Placement, gpu_node
from app.domains.gpu.validation import validate_decision

SIZE = FEATURE_NAMES.index("gpus_per_cluster")


def _smallest(obs: FloatArray, mask: BoolArray) -> FloatArray:
    del mask
    out: FloatArray = -obs[:, SIZE]
    return out


def _random_snapshot(rng: random.Random) -> ClusterSnapshot:
    nodes = tuple(gpu_node(f"n{i}", rng.choice([2, 4, 8])) for i in range(rng.randint(1, 4)))
    free = {n.id: int(n.capacity["gpu"]) for n in nodes}
    jobs: list[GpuJob] = []
    for i in range(rng.randint(1, 14)):
        g = rng.choice([1, 1, 2, 4, 8, 16])
        host = next((nid for nid, f in free.items() if f >= g), None)
        alloc: tuple[Placement, ...] = ()
        if host is not None and rng.random() < 0.5:
            free[host] -= g
            alloc = (Placement(host, g),)
        hi = g + (rng.randint(1, 3) if not alloc and rng.random() < 0.3 else 0)
        jobs.append(
            GpuJob(
                id=f"j{i}",
                arrival=float(rng.randint(0, 50)),
                min_gpus=g,
                max_gpus=hi,
                tenant=rng.choice("AB"),
                allocation=alloc,
                attained_gpu_s=rng.uniform(0, 9000) if alloc else 0.0,
            )
        )
    return ClusterSnapshot(100.0, nodes, tuple(jobs))


def test_random_scores_keep_every_invariant() -> None:
    rng = random.Random(11)
    gen = np.random.default_rng(11)
    for _ in range(150):
        s = _random_snapshot(rng)
        pol = ScoredPolicy(
            "rand", "1", lambda o, _m: gen.normal(size=len(o)), window=rng.choice([2, 5, 64])
        )
        d = decide(s, pol)
        validate_decision(s, d)
        assert d.policy.name == "rand"
        assert d.policy.kind == "onnx"
        assert set(d.reasons) == {j.id for j in s.jobs}


def test_a_size_scorer_decides_as_smallest_first() -> None:
    rng = random.Random(3)
    h = get_heuristic("smallest-first")
    for _ in range(100):
        s = _random_snapshot(rng)
        assert decide(s, ScoredPolicy("small", "1", _smallest)).placements(s) == decide(
            s, h
        ).placements(s)


def test_scores_order_the_walk_and_running_rows_lose_their_gpus() -> None:
    nodes = (gpu_node("n0", 4),)
    old = GpuJob("old", 0.0, 4, 4, allocation=(Placement("n0", 4),), attained_gpu_s=1e4)
    new = GpuJob("new", 5.0, 2, 2)
    other = GpuJob("other", 6.0, 2, 2)
    s = ClusterSnapshot(10.0, nodes, (old, new, other))
    # rows: old, new, other; the scorer prefers the pending ones
    d = decide(s, ScoredPolicy("p", "1", lambda o, _m: np.array([0.0, 2.0, 1.0])))
    assert d.preemptions == ("old",)
    assert sorted(a.job_id for a in d.allocations) == ["new", "other"]
    d = decide(s, ScoredPolicy("p", "1", lambda o, _m: np.array([3.0, 2.0, 1.0])))
    assert d.preemptions == ()
    assert d.allocations == ()
    assert d.reasons["new"].startswith("waiting")


def test_running_jobs_beyond_the_window_keep_their_gpus() -> None:
    nodes = (gpu_node("n0", 4),)
    jobs = (
        GpuJob("a", 0.0, 2, 2, allocation=(Placement("n0", 2),)),
        GpuJob("b", 1.0, 2, 2, allocation=(Placement("n0", 2),)),
        GpuJob("c", 2.0, 2, 2),
    )
    s = ClusterSnapshot(10.0, nodes, jobs)
    # window 1: only "a" is a row; a low score preempts it, "b" is pinned, "c" is invisible
    d = decide(s, ScoredPolicy("p", "1", lambda o, _m: np.array([-1.0]), window=1))
    validate_decision(s, d)
    assert d.preemptions == ()
    assert d.allocations == ()
    assert "beyond the 1 candidates" in d.reasons["b"]
    assert "beyond the 1 candidates" in d.reasons["c"]


def test_a_job_larger_than_the_cluster_is_masked_and_waits() -> None:
    s = ClusterSnapshot(0.0, (gpu_node("n0", 4),), (GpuJob("huge", 0.0, 8, 8),))
    d = decide(s, ScoredPolicy("p", "1", lambda o, _m: np.array([np.nan])))
    assert d.allocations == ()
    assert "more than the up nodes have" in d.reasons["huge"]


@pytest.mark.parametrize(
    "scores",
    [np.array([np.nan, 0.0]), np.array([np.inf, 0.0]), np.array([1.0]), np.zeros((2, 1))],
)
def test_unusable_scores_raise_policy_output_error(scores: FloatArray) -> None:
    s = ClusterSnapshot(0.0, (gpu_node("n0", 4),), (GpuJob("a", 0, 1, 1), GpuJob("b", 1, 1, 1)))
    with pytest.raises(PolicyOutputError):
        decide(s, ScoredPolicy("p", "1", lambda o, _m: scores))
