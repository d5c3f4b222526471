"""GPU decide(): the heuristics' orders and modes, and the decision invariants."""

from __future__ import annotations

import random

import pytest

from app.domains import get_domain
from app.domains.gpu.decide import consolidate, decide, most_free
from app.domains.gpu.heuristics import GittinsTable, GpuConfig, get_heuristic, heuristic_names
from app.domains.gpu.metrics import nearest_rank
from app.domains.gpu.types import (
    Allocation,
    ClusterSnapshot,
    GpuDecision,
    GpuJob,
    Placement,
    PolicyRef,
    gpu_node,
)
from app.domains.gpu.validation import InvalidDecisionError, validate_decision, validate_snapshot
from app.kernel.errors import SnapshotError


def _nodes(n: int = 2, g: int = 4) -> tuple:  # type: ignore[type-arg]
    return tuple(gpu_node(f"n{i}", g) for i in range(n))


def _job(jid: str, t: float, g: int, **kw: object) -> GpuJob:
    return GpuJob(id=jid, arrival=t, min_gpus=g, max_gpus=kw.pop("max_gpus", g), **kw)  # type: ignore[arg-type]


def _run(jid: str, t: float, node: str, g: int, **kw: object) -> GpuJob:
    return _job(jid, t, g, allocation=(Placement(node, g),), **kw)


def test_fifo_blocks_and_fifo_skip_does_not() -> None:
    s = ClusterSnapshot(0.0, _nodes(1, 4), (_job("a", 0, 8), _job("b", 1, 2)))
    # a can never fit on 4 GPUs: fifo waits behind it, fifo-skip starts b
    assert decide(s, get_heuristic("fifo")).allocations == ()
    assert [a.job_id for a in decide(s, get_heuristic("fifo-skip")).allocations] == ["b"]


def test_preemptive_2dlas_preempts_the_job_in_the_lower_queue() -> None:
    old = _run("old", 0, "n0", 4, attained_gpu_s=10_000.0)  # queue 2 of (3250, 7200)
    new = _job("new", 5, 4)
    s = ClusterSnapshot(10.0, _nodes(1, 4), (old, new))
    d = decide(s, get_heuristic("tiresias-2dlas"))
    assert d.preemptions == ("old",)
    assert [a.job_id for a in d.allocations] == ["new"]
    assert d.reasons["old"].startswith("preempted")
    validate_decision(s, d)
    # non-preemptive fifo keeps it
    assert decide(s, get_heuristic("fifo")).preemptions == ()


def test_srsf_orders_by_remaining_gpu_time() -> None:
    s = ClusterSnapshot(
        0.0,
        _nodes(1, 4),
        (_job("long", 0, 4, estimate_s=1000.0), _job("short", 1, 4, estimate_s=100.0)),
    )
    assert [a.job_id for a in decide(s, get_heuristic("srsf")).allocations] == ["short"]
    assert [a.job_id for a in decide(s, get_heuristic("fifo")).allocations] == ["long"]


@pytest.mark.parametrize("name", ["sjf", "srtf", "srsf"])
def test_a_job_left_out_for_lack_of_an_estimate_is_told_so(name: str) -> None:
    unknown = _job("unknown", 0, 4)
    s = ClusterSnapshot(
        0.0,
        _nodes(1, 4),
        (unknown, _job("late", 1, 4, estimate_s=500.0), _job("later", 2, 4, estimate_s=900.0)),
    )
    d = decide(s, get_heuristic(name))
    assert "unknown" not in {a.job_id for a in d.allocations}
    assert d.reasons["unknown"].startswith("waiting")
    assert "no run-time estimate" in d.reasons["unknown"]
    assert "estimate" not in d.reasons["later"]
    # an information-agnostic policy never blames the estimate
    for other in ("fifo-skip", "smallest-first", "tiresias-2dlas"):
        assert all("estimate" not in r for r in decide(s, get_heuristic(other)).reasons.values())


def test_optimus_says_when_it_sizes_an_elastic_job_without_an_estimate() -> None:
    s = ClusterSnapshot(
        0.0,
        _nodes(1, 8),
        (_job("e", 0, 1, max_gpus=4), _job("k", 1, 1, max_gpus=4, estimate_s=100.0)),
    )
    d = decide(s, get_heuristic("optimus"))
    assert d.reasons["e"].startswith("admitted")
    assert d.reasons["e"].endswith("no run-time estimate, so optimus sizes it on one unit of work")
    assert "estimate" not in d.reasons["k"]


def test_drf_alternates_tenants() -> None:
    jobs = (*(_job(f"a{i}", i, 1, tenant="A") for i in range(4)), _job("b0", 10, 1, tenant="B"))
    s = ClusterSnapshot(0.0, _nodes(1, 2), jobs)
    got = [a.job_id for a in decide(s, get_heuristic("drf")).allocations]
    assert got == ["a0", "b0"]  # fifo would give a0, a1


def test_optimus_grows_elastic_jobs_and_keeps_the_gang_bounds() -> None:
    s = ClusterSnapshot(
        0.0, _nodes(2, 4), (_job("e", 0, 1, max_gpus=6, estimate_s=1000.0), _job("r", 1, 2))
    )
    d = decide(s, get_heuristic("optimus"))
    sizes = {a.job_id: sum(p.tasks for p in a.placements) for a in d.allocations}
    assert sizes == {"e": 6, "r": 2}
    validate_decision(s, d)


def test_consolidate_best_fit_and_most_free() -> None:
    assert consolidate([3, 1, 2], 2, [4, 4, 4]) == [(2, 2)]
    free = [4, 4, 1]
    assert consolidate(free, 6, [4, 4, 4]) == [(0, 4), (1, 2)]
    assert most_free([1, 3, 3], 4) == [(1, 3), (2, 1)]


@pytest.mark.parametrize(
    ("job", "field"),
    [
        (_job("x", 0, 3, max_gpus=2), "jobs[0].max_gpus"),
        (_job("x", 0, 0), "jobs[0].min_gpus"),
        (_job("x", 0, 2, attained_gpu_s=-1.0), "jobs[0].attained_gpu_s"),
        (_job("x", 0, 2, allocation=(Placement("n0", 3),)), "jobs[0].allocation"),
        (_job("x", 0, 2, allocation=(Placement("nope", 2),)), "jobs.allocation"),
    ],
)
def test_bad_snapshots_name_the_field(job: GpuJob, field: str) -> None:
    with pytest.raises(SnapshotError) as e:
        validate_snapshot(ClusterSnapshot(0.0, _nodes(1, 4), (job,)))
    assert e.value.field == field


def test_decision_invariants_are_enforced() -> None:
    s = ClusterSnapshot(0.0, _nodes(1, 4), (_run("r", 0, "n0", 2), _job("p", 1, 2)))
    ref = PolicyRef("t", "1", "heuristic")
    bad = [
        GpuDecision(ref, preemptions=("p",)),  # preempting a pending job
        GpuDecision(ref, allocations=(Allocation("p", (Placement("n0", 3),)),)),  # not its gang
        GpuDecision(ref, allocations=(Allocation("r", (Placement("n0", 2),)),)),  # running
        GpuDecision(ref, resizes=(Allocation("r", (Placement("n0", 1),)),)),  # rigid resize
    ]
    for d in bad:
        with pytest.raises(InvalidDecisionError):
            validate_decision(s, d)
    over = ClusterSnapshot(0.0, _nodes(1, 4), (_run("r", 0, "n0", 3), _job("p", 1, 2)))
    with pytest.raises(InvalidDecisionError, match="allocated"):
        validate_decision(
            over, GpuDecision(ref, allocations=(Allocation("p", (Placement("n0", 2),)),))
        )


def test_every_heuristic_keeps_the_invariants_on_random_snapshots() -> None:
    rng = random.Random(7)
    for _ in range(60):
        nodes = _nodes(rng.randint(1, 4), rng.choice([2, 4, 8]))
        free = {n.id: int(n.capacity["gpu"]) for n in nodes}
        jobs: list[GpuJob] = []
        for i in range(rng.randint(1, 12)):
            g = rng.choice([1, 1, 2, 4, 8])
            elastic = rng.random() < 0.3
            hi = g + rng.randint(1, 4) if elastic else g
            host = next((nid for nid, f in free.items() if f >= g), None)
            if host is not None and rng.random() < 0.5:
                free[host] -= g
                jobs.append(
                    _run(f"j{i}", i, host, g, max_gpus=hi, attained_gpu_s=rng.uniform(0, 9000))
                )
            else:
                est = rng.choice([None, rng.uniform(10, 1e4)])
                jobs.append(
                    _job(f"j{i}", i, g, max_gpus=hi, estimate_s=est, tenant=rng.choice("AB"))
                )
        s = ClusterSnapshot(100.0, nodes, tuple(jobs))
        cfg = GpuConfig(gittins=GittinsTable.of([rng.uniform(1, 1e5) for _ in range(50)]))
        for name in heuristic_names():
            validate_decision(s, decide(s, get_heuristic(name), cfg))


def test_domain_round_trips_state_and_decision() -> None:
    dom = get_domain("gpu")
    s = ClusterSnapshot(5.0, _nodes(2, 4), (_run("r", 0, "n0", 2, tenant="A"), _job("p", 1, 4)))
    assert dom.state_from_json(dom.state_to_json(s)) == s
    d = dom.decide(s, dom.heuristic(dom.default_fallback))
    assert dom.decision_from_json(dom.decision_to_json(d)) == d


def test_gittins_index_and_nearest_rank() -> None:
    g = GittinsTable.of([100.0, 200.0, 10_000.0, 20_000.0], delta=500.0)
    assert g.index(0.0) > g.index(300.0)  # likely to finish soon -> higher index
    assert g.index(30_000.0) == 0.0
    assert nearest_rank([5.0, 1.0, 3.0, 2.0], 50) == 2.0
    assert nearest_rank(list(range(1, 101)), 99) == 99
