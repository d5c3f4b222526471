"""The optimised core gives exactly the pre-optimisation results (ADR 0015).

``tests/unit/domain/reference`` is a frozen copy of the decision loop, the placement functions and
the encoder before they were vectorised.  On random clusters (the property-test generator) every
step's view, its encoding (bit for bit, with and without the precomputed arrays, for several
window sizes) and the final decision must be identical, for the stepping and the ordering paths.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domains.hpc import decision as new_decision
from app.domains.hpc import encoding as new_encoding
from app.domains.hpc.heuristics import HEURISTICS
from app.domains.hpc.types import (
    SINGLE_NODE_LABEL,
    ClusterState,
    Job,
    Node,
    Placement,
    PlacementStrategy,
    PolicyRef,
    RunningJob,
)
from app.kernel.placement import place
from tests.unit.domain.reference import decision as ref_decision
from tests.unit.domain.reference import encoding as ref_encoding
from tests.unit.domain.test_decision_properties import configs, states

SETTINGS = settings(max_examples=150, deadline=None)
REF = PolicyRef("equivalence", "test", "onnx")


def _same_view(new, old) -> None:
    assert [j.id for j in new.candidates] == [j.id for j in old.candidates]
    assert new.mask == old.mask
    assert new.fits_now == old.fits_now
    assert new.phase == old.phase
    assert new.reservation == old.reservation
    assert new.resource_names == old.resource_names
    assert dict(new.free) == dict(old.free)
    assert list(new.free) == list(old.free)
    assert dict(new.schedulable_capacity) == dict(old.schedulable_capacity)
    assert new == old  # equality ignores the precomputed arrays


def _same_encoding(new_views, old_views, width: int) -> None:
    """``views[0]`` alone, and all of them as one batch (mixed phases, widths, clusters)."""
    expected = ref_encoding.encode_view(old_views[0], width)
    first = new_views[0]
    no_static = replace(first, arrays=replace(first.arrays, static=None))
    for view in (first, replace(first, arrays=None), no_static):
        got = new_encoding.encode_view(view, width)
        assert got.obs.tobytes() == expected.obs.tobytes()
        assert np.array_equal(got.mask, expected.mask)
        assert np.array_equal(got.index, expected.index)
    old_batch = ref_encoding.encode_batch(old_views, width, pad_to=width + 2)
    for views in (
        new_views,
        [replace(v, arrays=None) for v in new_views],
        [no_static, *new_views[1:]],
    ):
        batch = new_encoding.encode_batch(views, width, pad_to=width + 2)
        assert batch.obs.tobytes() == old_batch.obs.tobytes()
        assert np.array_equal(batch.mask, old_batch.mask)
        assert np.array_equal(batch.index, old_batch.index)


def _step_both(state: ClusterState, config, seed: int, width: int) -> None:
    weights = np.random.default_rng(seed).normal(size=new_encoding.NUM_FEATURES)
    new = new_decision.DecisionRun(state, new_decision.DecisionConfig(**_fields(config)))
    old = ref_decision.DecisionRun(state, ref_decision.DecisionConfig(**_fields(config)))
    first: tuple[object, object] | None = None
    while not old.done:
        assert not new.done
        new_view, old_view = new.view(), old.view()
        _same_view(new_view, old_view)
        if first is None:
            first = (new_view, old_view)
        for w in {1, 2, width}:
            _same_encoding([new_view, first[0]], [old_view, first[1]], w)
        enc = ref_encoding.encode_view(old_view, width)
        logits = (enc.obs.astype(np.float64) @ weights).astype(np.float32)
        row = ref_encoding.masked_argmax(logits, enc.mask)
        assert row is not None
        pick = enc.candidate(row)
        old.apply(pick)
        new.apply(pick)
    assert new.done
    assert new.result(REF) == old.result(REF)


def _fields(config) -> dict[str, object]:
    return {
        "backfill": config.backfill,
        "placement": config.placement,
        "max_allocations": config.max_allocations,
        "explain": config.explain,
    }


@contextmanager
def _scan_rows(limit: int) -> Iterator[None]:
    """First-fit placement by the Python row scan up to ``limit`` up nodes (0: never)."""
    saved = new_decision.SCAN_MAX_ROWS
    new_decision.SCAN_MAX_ROWS = limit
    try:
        yield
    finally:
        new_decision.SCAN_MAX_ROWS = saved


# both first-fit paths: the row scan (the default on these small clusters) and the vectorised k
SCAN_LIMITS = st.sampled_from((new_decision.SCAN_MAX_ROWS, 0))


@SETTINGS
@given(states(), configs, st.integers(0, 2**16), st.sampled_from((3, 128)), SCAN_LIMITS)
def test_stepping_views_encodings_and_decisions_are_identical(
    state, config, seed, width, scan
) -> None:
    with _scan_rows(scan):
        _step_both(state, config, seed, width)


@SETTINGS
@given(states(), configs, st.sampled_from(sorted(HEURISTICS)), SCAN_LIMITS)
def test_ordering_path_is_identical(state, config, name, scan) -> None:
    with _scan_rows(scan):
        new = new_decision.decide(
            state, HEURISTICS[name], new_decision.DecisionConfig(**_fields(config))
        )
    old = ref_decision.decide(
        state, HEURISTICS[name], ref_decision.DecisionConfig(**_fields(config))
    )
    assert new == old


@settings(max_examples=400, deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=0.0, exclude_min=True, allow_infinity=False, allow_subnormal=True),
)
def test_a_task_fits_iff_free_covers_the_demand(free: float, demand: float) -> None:
    """The scan's one-task shortcut: ``fl(a / d) >= 1`` exactly when ``a >= d`` (d > 0)."""
    assert (free / demand >= 1.0) == (free >= demand)


@pytest.mark.parametrize("seed", range(40))
def test_row_scan_places_as_the_vectorised_first_fit(seed: int) -> None:
    """Larger clusters than the property generator's, fractional amounts, gangs of 1-6 tasks,
    single-node jobs: the scan and the vectorised path give the same decision, for each
    heuristic and for a stepping walk."""
    rng = np.random.default_rng(seed)
    names = ("cpu", "mem")
    nodes = tuple(
        Node(
            f"n{k:02d}",
            {"cpu": float(rng.choice([0.7, 2.3, 8.0, 32.0])), "mem": float(rng.choice([1.1, 64]))},
            {"cpu": float(rng.choice([0.0, 0.1, 0.3]))},
        )
        for k in range(int(rng.integers(1, 48)))
    )
    pending = tuple(
        Job(
            f"j{i:03d}",
            {n: float(rng.choice([0.0, 0.1, 0.3, 0.7, 1.0, 4.0, 16.0])) for n in names},
            walltime_s=float(rng.integers(60, 3_600)),
            submit_time=float(rng.integers(0, 20)),
            tasks=int(rng.integers(1, 7)),
            labels={SINGLE_NODE_LABEL: "true"} if rng.random() < 0.2 else {},
        )
        for i in range(int(rng.integers(1, 80)))
    )
    state = ClusterState(100.0, nodes, (), pending)
    for name in ("fcfs", "sjf", "f1"):
        with _scan_rows(0):
            vectorised = new_decision.decide(state, HEURISTICS[name])
        assert new_decision.decide(state, HEURISTICS[name]) == vectorised
    with _scan_rows(0):
        vectorised = _first_candidate_walk(state)
    assert _first_candidate_walk(state) == vectorised


def _first_candidate_walk(state: ClusterState) -> object:
    run = new_decision.DecisionRun(state)
    while not run.done:
        enc = new_encoding.encode_view(run.view())
        run.apply(enc.candidate(int(np.flatnonzero(enc.mask)[-1])))
    return run.result(REF)


def _bench_like(seed: int, jobs: int, nodes: int) -> ClusterState:
    rng = np.random.default_rng(seed)
    pending = tuple(
        Job(
            f"j{i:03d}",
            {"cpu": float(rng.integers(1, 33)), "mem": float(rng.integers(0, 64))},
            walltime_s=float(rng.integers(60, 36_000)),
            submit_time=float(rng.integers(0, 50)),  # many equal submit times: id tie-breaks
            tasks=int(rng.integers(1, 4)),
            priority=int(rng.integers(-3, 3)),
            labels={SINGLE_NODE_LABEL: "true"} if i % 5 == 0 else {},
        )
        for i in range(jobs)
    )
    caps = ({"cpu": 32.0, "mem": 128.0}, {"cpu": 0.1 * 3, "mem": 0.3})
    node_t = tuple(Node(f"n{k:02d}", caps[k % 7 == 3]) for k in range(nodes))
    return ClusterState(60.0, node_t, (), pending)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("placement", list(PlacementStrategy))
def test_long_queues_step_identically(seed: int, placement: PlacementStrategy) -> None:
    """More candidates than the window: the array-based window selection is exercised."""
    state = _bench_like(seed, 150, 12)
    _step_both(state, new_decision.DecisionConfig(placement=placement), seed, 128)


@pytest.mark.parametrize("placement", list(PlacementStrategy))
def test_subnormal_resources_do_not_warn(placement: PlacementStrategy) -> None:
    """A cpu of 5e-324 (subnormal) overflows ``free / demand``: no RuntimeWarning, same result."""
    tiny = 5e-324
    nodes = (Node("a", {"cpu": tiny, "mem": 4.0}), Node("b", {"cpu": 4.0, "mem": tiny}))
    pending = (
        Job("j0", {"cpu": tiny}, 10.0, 0.0, tasks=3),
        Job("j1", {"mem": tiny, "cpu": 1.0}, 10.0, 1.0, tasks=2),
        Job("j2", {"cpu": 2.0}, 10.0, 2.0, tasks=2),
    )
    state = ClusterState(5.0, nodes, (), pending)
    config = new_decision.DecisionConfig(placement=placement)
    run = new_decision.DecisionRun(state, config)  # filterwarnings=error: a warning fails
    while not run.done:
        enc = new_encoding.encode_view(run.view())
        run.apply(enc.candidate(int(np.flatnonzero(enc.mask)[0])))
    assert run.allocations
    for name in ("fcfs", "f1"):
        assert new_decision.decide(state, HEURISTICS[name], config).allocations
    assert place(pending[0], nodes, strategy=placement) is not None
    with np.errstate(all="ignore"):  # the reference warns
        _step_both(state, config, 0, 128)


def _fractional_state(rng: np.random.Generator) -> ClusterState:
    """Fractional resources (0.1, 0.7...) whose sums are not exact, with running jobs to reserve
    behind: EASY rule (b) checks then leave float noise in the shadow-time matrix."""
    n_nodes = int(rng.integers(1, 5))
    caps = [{"cpu": float(rng.choice([0.7, 1.1, 2.3, 3.0]))} for _ in range(n_nodes)]
    nodes = []
    running = []
    for i, cap in enumerate(caps):
        used = float(rng.choice([0.0, 0.1, 0.3, 0.6])) if cap["cpu"] > 0.6 else 0.0
        nodes.append(Node(f"n{i}", cap, {"cpu": used} if used else {}))
        if used:
            job = Job(f"r{i}", {"cpu": used}, float(rng.choice([5.0, 40.0])), 0.0)
            running.append(RunningJob(job, (Placement(f"n{i}", 1),), 1.0))
    pending = tuple(
        Job(
            f"j{k}",
            {"cpu": float(rng.choice([0.1, 0.2, 0.3, 0.7, 1.1]))},
            walltime_s=float(rng.choice([1.0, 20.0, 100.0])),
            submit_time=float(rng.integers(0, 3)),
            tasks=int(rng.integers(1, 5)),
        )
        for k in range(int(rng.integers(2, 12)))
    )
    return ClusterState(2.0, tuple(nodes), tuple(running), pending)


def test_rule_b_float_noise_is_reproduced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row-wise rule (b) test keeps the noise ``(x - y) + y`` leaves, as the per-job one."""
    drifts = []
    original = new_decision.DecisionRun._reservation_holds

    def counting(self, info, rows, shadow_free):
        before = shadow_free.copy()
        ok = original(self, info, rows, shadow_free)
        drifts.append(not np.array_equal(before, shadow_free))
        return ok

    monkeypatch.setattr(new_decision.DecisionRun, "_reservation_holds", counting)
    rng = np.random.default_rng(2026)
    for seed in range(120):
        state = _fractional_state(rng)
        for placement in PlacementStrategy:
            config = new_decision.DecisionConfig(placement=placement, explain=True)
            _step_both(state, config, seed, 128)
            for name in ("fcfs", "sjf"):
                assert new_decision.decide(state, HEURISTICS[name], config) == ref_decision.decide(
                    state,
                    HEURISTICS[name],
                    ref_decision.DecisionConfig(placement=placement, explain=True),
                )
    assert any(drifts)  # the noise case is exercised
    assert not all(drifts)
