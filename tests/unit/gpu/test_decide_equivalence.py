"""The indexed ``decide`` (and the vectorised encoding) decide exactly as the frozen oracle
(``tests/unit/gpu/oracle``: the implementation before the rewrite) on random snapshots: the same
allocations, resizes, preemptions and reasons for every heuristic, both placements and a learned
scorer, and the same feature rows bit for bit."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import numpy.typing as npt
import pytest

from app.domains.gpu.decide import FreeGpus, consolidate, decide, most_free, place_on
from app.domains.gpu.encoding import BoolArray, EncodingConstants, FloatArray, encode
from app.domains.gpu.heuristics import (
    GittinsTable,
    GpuConfig,
    Placement,
    get_heuristic,
    heuristic_names,
)
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.types import ClusterSnapshot, GpuDecision, GpuJob, NodeState, gpu_node
from app.domains.gpu.types import Placement as NodePlacement
from app.domains.gpu.validation import validate_decision
from tests.unit.gpu.oracle import decide_v1, encoding_v1

SEEDS = range(60)
#: the reasons' note on a missing estimate came after the oracle was frozen
ESTIMATE_NOTE = "; it has no run-time estimate, so "


def as_oracle(d: GpuDecision) -> GpuDecision:
    """``d`` with the missing-estimate notes taken out of its reasons (what the oracle says)."""
    return dataclasses.replace(
        d, reasons={k: v.split(ESTIMATE_NOTE)[0] for k, v in d.reasons.items()}
    )


def random_snapshot(rng: random.Random, nodes: int, jobs: int) -> ClusterSnapshot:
    """Nodes of mixed sizes (some down or without GPUs), jobs rigid or elastic, about half
    running (spanning nodes when they must), tenants and counters at random, arrival ties."""
    caps = [rng.choice([0, 1, 2, 4, 4, 8, 8, 8, 16]) for _ in range(nodes)]
    states = [
        rng.choice([NodeState.UP] * 8 + [NodeState.DOWN, NodeState.DRAIN]) for _ in range(nodes)
    ]
    ns = tuple(
        gpu_node(f"n{i:03d}", c, s) for i, (c, s) in enumerate(zip(caps, states, strict=True))
    )
    free = list(caps)
    out: list[GpuJob] = []
    for i in range(jobs):
        g = rng.choice([1, 1, 2, 3, 4, 8, 12, 16, 32])
        mx = g + rng.choice([0, 0, 0, 1, 4, g])
        size = rng.randint(g, mx)
        alloc: tuple[NodePlacement, ...] = ()
        if rng.random() < 0.5 and sum(free) >= size:
            need, placed = size, []
            for ix in rng.sample(range(nodes), nodes):
                if need and free[ix]:
                    t = min(free[ix], need, rng.randint(1, 16))
                    placed.append(NodePlacement(ns[ix].id, t))
                    free[ix] -= t
                    need -= t
            if need == 0:
                alloc = tuple(placed)
            else:
                for p in placed:
                    free[int(p.node_id[1:])] += p.tasks
        out.append(
            GpuJob(
                id=f"j{rng.randrange(10**6):06d}-{i}",
                arrival=float(rng.randrange(max(1, jobs // 2))),
                min_gpus=g,
                max_gpus=mx,
                tenant=rng.choice(["a", "b", "c", "d"]),
                estimate_s=rng.choice([None, rng.uniform(10, 50_000)]),
                allocation=alloc,
                attained_gpu_s=rng.choice([0.0, rng.uniform(0, 20_000)]),
                executed_s=rng.uniform(0, 5_000),
                starts=1 if alloc else rng.randrange(2),
                preemptions=rng.randrange(3),
                restart_left_s=rng.choice([0.0, 0.0, 30.0]),
            )
        )
    rng.shuffle(out)
    return ClusterSnapshot(60_000.0, ns, tuple(out))


def _scorer(seed: int, ties: bool) -> ScoredPolicy:
    w = np.random.default_rng(seed).normal(size=20)

    def score(obs: FloatArray, mask: BoolArray) -> npt.NDArray[np.float64]:
        raw = obs.astype(np.float64) @ w
        return np.round(raw, 1) if ties else raw

    return ScoredPolicy("rand", "1", score=score, window=64)


def _configs(rng: random.Random) -> list[GpuConfig]:
    table = GittinsTable.of([rng.uniform(100, 40_000) for _ in range(30)])
    return [
        GpuConfig(placement=Placement.CONSOLIDATE),
        GpuConfig(placement=Placement.MOST_FREE, gittins=table, speedup_alpha=0.6),
    ]


@pytest.mark.parametrize("seed", SEEDS)
def test_heuristics_decide_as_the_oracle(seed: int) -> None:
    rng = random.Random(seed)
    state = random_snapshot(rng, rng.randint(1, 40), rng.randint(0, 120))
    for cfg in _configs(rng):
        for name in heuristic_names():
            h = get_heuristic(name)
            got = decide(state, h, cfg)
            assert as_oracle(got) == decide_v1.decide(state, h, cfg), (name, cfg.placement)
            validate_decision(state, got)


@pytest.mark.parametrize("seed", SEEDS)
def test_learned_decides_as_the_oracle(seed: int) -> None:
    rng = random.Random(seed)
    state = random_snapshot(rng, rng.randint(1, 40), rng.randint(0, 120))
    running = sum(1 for j in state.jobs if j.running)
    for window in (1, 64, running + 64, running + rng.randint(1, 5)):
        for ties in (False, True):
            pol = ScoredPolicy(
                "rand",
                "1",
                score=_scorer(seed, ties).score,
                window=window,
                constants=EncodingConstants(use_estimates=bool(seed % 2)),
            )
            for cfg in _configs(rng):
                got = decide(state, pol, cfg)
                assert got == decide_v1.decide(state, pol, cfg), (window, ties)
                validate_decision(state, got)


@pytest.mark.parametrize("seed", SEEDS)
def test_encoding_is_the_oracle_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    state = random_snapshot(rng, rng.randint(0, 30), rng.randint(0, 100))
    for use in (False, True):
        for window in (1, 7, 64, 500):
            c = EncodingConstants(use_estimates=use, las_threshold_gpu_s=rng.uniform(10, 9000))
            old = encoding_v1.encode(state, c, window)
            new = encode(state, c, window)
            assert new.jobs == old.jobs
            assert new.overflow == old.overflow
            assert new.obs.dtype == old.obs.dtype
            assert new.obs.shape == old.obs.shape
            assert new.obs.tobytes() == old.obs.tobytes()
            assert new.mask.tobytes() == old.mask.tobytes()


@pytest.mark.parametrize("seed", SEEDS)
def test_indexed_placement_is_the_scan(seed: int) -> None:
    """A sequence of gangs placed through one :class:`FreeGpus` gives the rows and the free
    counts that :func:`most_free` and :func:`consolidate` give on the plain list."""
    rng = random.Random(seed)
    capacity = [rng.choice([0, 1, 2, 4, 8, 8, 16]) for _ in range(rng.randint(1, 50))]
    start = [rng.randint(0, c) for c in capacity]
    for how in Placement:
        plain = list(start)
        free = list(start)
        index = FreeGpus(free, capacity)
        for _ in range(rng.randint(1, 80)):
            g = rng.choice([0, 1, 1, 2, 3, 4, 5, 8, 9, 16, 17, 24, 40])
            want = (
                most_free(plain, g)
                if how is Placement.MOST_FREE
                else consolidate(plain, g, capacity)
            )
            assert place_on(index, g, how) == want
            assert free == plain
            assert index.total() == sum(plain)


def test_decide_at_scale_is_the_oracle() -> None:
    """One large round (400 nodes, 2,000 jobs) per placement, 2D-LAS, DRF and a learned
    scorer whose window is the running jobs + 64 (as the service passes it)."""
    rng = random.Random(7)
    state = random_snapshot(rng, 400, 2_000)
    running = sum(1 for j in state.jobs if j.running)
    pol = ScoredPolicy("rand", "1", score=_scorer(7, True).score, window=running + 64)
    for cfg in _configs(rng):
        for p in (get_heuristic("tiresias-2dlas"), get_heuristic("drf"), pol):
            assert as_oracle(decide(state, p, cfg)) == decide_v1.decide(state, p, cfg)
