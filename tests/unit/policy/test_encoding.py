"""The feature encoder: shapes, ranges, the candidate window and the row -> candidate mapping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domains.hpc.decision import DecisionConfig, DecisionRun
from app.domains.hpc.encoding import (
    FEATURE_NAMES,
    NUM_FEATURES,
    encode,
    encode_batch,
    encode_view,
    masked_argmax,
    select_window,
)
from app.domains.hpc.policy import Phase
from app.domains.hpc.types import Backfill, ClusterState, Job, Node, Placement, RunningJob

NOW = 100_000.0


def _state(pending: list[Job], *, running: tuple[RunningJob, ...] = (), cpus: float = 64.0):
    nodes = (Node("n1", {"cpu": cpus / 2}), Node("n2", {"cpu": cpus / 2}))
    used: dict[str, float] = {}
    for rj in running:
        for p in rj.placements:
            used[p.node_id] = used.get(p.node_id, 0.0) + p.tasks * rj.job.per_task["cpu"]
    nodes = tuple(Node(n.id, n.capacity, {"cpu": used.get(n.id, 0.0)}) for n in nodes)
    return ClusterState(now=NOW, nodes=nodes, running=running, pending=tuple(pending))


def _job(i: int, cpu: float = 1.0, walltime: float = 600.0, submit: float | None = None) -> Job:
    return Job(
        id=f"j{i:04d}",
        per_task={"cpu": cpu},
        walltime_s=walltime,
        submit_time=NOW - 1000.0 + i if submit is None else submit,
    )


def test_shapes_ranges_and_names() -> None:
    run = DecisionRun(_state([_job(i, cpu=1 + i % 5) for i in range(10)]))
    obs, mask = encode(run.view())
    assert obs.shape == (10, NUM_FEATURES) == (10, len(FEATURE_NAMES))
    assert obs.dtype == np.float32
    assert mask.dtype == np.bool_
    assert mask.all()
    assert np.isfinite(obs).all()
    assert (obs >= 0).all()
    assert (obs <= 1).all()


def test_feature_values_follow_the_documented_formulas() -> None:
    job = _job(0, cpu=16.0, walltime=3600.0, submit=NOW - 7200.0)
    view = DecisionRun(_state([job])).view()
    row = dict(zip(FEATURE_NAMES, encode(view)[0][0].tolist(), strict=True))
    assert row["wait"] == pytest.approx(7200 / 43200)
    assert row["walltime"] == pytest.approx(math.log1p(3600) / math.log1p(604800))
    assert row["size"] == pytest.approx(16 / 64)
    assert row["can_start_now"] == pytest.approx(1 - 1e-5)
    assert row["demand_vs_free"] == pytest.approx(16 / 64)
    assert row["no_delay_reservation"] == 1.0
    assert row["is_reserved"] == 0.0
    assert row["slowdown_so_far"] == pytest.approx(math.log1p(2.0) / math.log1p(1000), rel=1e-5)
    assert row["priority"] == pytest.approx(0.5)
    assert row["phase_backfill"] == 0.0
    assert row["queue_length"] == pytest.approx(math.log1p(1) / math.log1p(1024))
    assert row["free_fraction"] == pytest.approx(1.0)
    assert row["reservation_horizon"] == 0.0


def test_backfill_phase_features_see_the_reservation() -> None:
    # 48 of 64 cpus busy until NOW + 1000; the head job needs 32 -> reserved at NOW + 1000
    running = (
        RunningJob(
            Job("r", {"cpu": 24.0}, 2000.0, NOW - 2000, tasks=2),
            (Placement("n1", 1), Placement("n2", 1)),
            NOW - 1000.0,
        ),
    )
    head = _job(0, cpu=32.0, walltime=100.0)
    short = _job(1, cpu=8.0, walltime=500.0)  # ends before the reservation: backfills
    long = _job(2, cpu=8.0, walltime=5000.0)  # would not end before it
    state = _state([head, short, long], running=running)
    run = DecisionRun(state, DecisionConfig(backfill=Backfill.EASY))
    run.apply(0)  # head does not fit -> reserved
    view = run.view()
    assert view.phase is Phase.BACKFILL
    encoded = encode_view(view)
    rows = {view.candidates[int(i)].id: encoded.obs[r] for r, i in enumerate(encoded.index)}
    col = {name: k for k, name in enumerate(FEATURE_NAMES)}
    assert rows[head.id][col["is_reserved"]] == 1.0
    assert rows[short.id][col["no_delay_reservation"]] == 1.0
    assert rows[long.id][col["no_delay_reservation"]] == 0.0
    assert rows[short.id][col["phase_backfill"]] == 1.0
    assert rows[short.id][col["reservation_horizon"]] == pytest.approx(1000 / 43200)
    assert rows[short.id][col["free_fraction"]] == pytest.approx(16 / 64)
    assert rows[head.id][col["can_start_now"]] == pytest.approx(1e-5)
    assert rows[head.id][col["demand_vs_free"]] == 1.0  # 32 > 16 free: clipped
    assert encoded.mask.tolist() == [view.mask[int(i)] for i in encoded.index]


def test_window_interleaves_sjf_and_smallest_and_prefers_pickable() -> None:
    jobs = [_job(i, cpu=1 + (i * 7) % 13, walltime=100.0 + (i * 37) % 1000) for i in range(300)]
    view = DecisionRun(_state(jobs, cpus=2048.0)).view()
    window = select_window(view, 128)
    assert len(window) == 128
    assert window == sorted(window)
    assert window == select_window(view, 128)  # deterministic
    by_sjf = sorted(range(300), key=lambda i: (jobs[i].walltime_s, jobs[i].submit_time, jobs[i].id))
    by_small = sorted(range(300), key=lambda i: (jobs[i].per_task["cpu"], jobs[i].submit_time))
    assert by_sjf[0] in window
    assert by_small[0] in window
    assert set(by_sjf[:40]) <= set(window)
    encoded = encode_view(view, 128)
    assert encoded.obs.shape == (128, NUM_FEATURES)
    assert [view.candidates[encoded.candidate(r)].id for r in range(128)] == [
        view.candidates[i].id for i in window
    ]


def test_padding_and_batches() -> None:
    a = DecisionRun(_state([_job(i) for i in range(3)])).view()
    b = DecisionRun(_state([_job(i) for i in range(7)])).view()
    batch = encode_batch([a, b])
    assert batch.obs.shape == (2, 7, NUM_FEATURES)
    assert batch.mask[0].tolist() == [True] * 3 + [False] * 4
    assert (batch.obs[0, 3:] == 0).all()
    assert batch.index[0, 3:].tolist() == [-1] * 4
    with pytest.raises(ValueError, match="padding"):
        batch.candidate(0, 5)
    assert batch.candidate(1, 6) == 6
    np.testing.assert_array_equal(batch.obs[1], encode(b)[0])
    padded, pmask = encode(a, pad_to=128)
    assert padded.shape == (128, NUM_FEATURES)
    assert int(pmask.sum()) == 3
    assert encode_batch([]).obs.shape == (0, 1, NUM_FEATURES)


def test_masked_argmax() -> None:
    logits = np.array([5.0, 1.0, 3.0, 3.0], dtype=np.float32)
    assert masked_argmax(logits, np.array([False, True, True, True])) == 2  # tie: lowest row
    assert masked_argmax(logits, np.zeros(4, dtype=np.bool_)) is None
    nan = np.array([np.nan, 1.0], dtype=np.float32)
    assert masked_argmax(nan, np.array([True, True])) is None
    assert masked_argmax(nan, np.array([False, True])) == 1  # NaN only where masked: fine


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 128).map(lambda x: x / 2),  # cpu per task
            st.floats(0, 1e9, allow_subnormal=False),  # walltime
            st.floats(-1e9, 1e9, allow_subnormal=False),  # submit offset
            st.integers(-(10**6), 10**6),  # priority
            st.integers(1, 4),  # tasks
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 50),
)
def test_features_always_finite_and_clipped(
    raw: list[tuple[float, float, float, int, int]], k: int
) -> None:
    jobs = [
        Job(f"j{i}", {"cpu": c}, w, NOW + s, tasks=t, priority=p)
        for i, (c, w, s, p, t) in enumerate(raw)
    ]
    run = DecisionRun(_state(jobs))
    if run.done:
        return
    encoded = encode_view(run.view(), k)
    assert encoded.obs.shape == (min(len(jobs), k), NUM_FEATURES)
    assert np.isfinite(encoded.obs).all()
    assert (encoded.obs >= 0).all()
    assert (encoded.obs <= 1).all()
    assert len(set(encoded.index.tolist())) == len(encoded.index)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 9),
    st.integers(0, 2**32 - 1),
)
def test_batched_argmax_equals_masked_argmax(items: int, rows: int, seed: int) -> None:
    """The selector's one-pass pick over a batch equals ``masked_argmax`` item by item,
    including ties, NaN/inf logits on pickable or masked rows and fully masked items."""
    from app.policy.selector import _batch_argmax

    rng = np.random.default_rng(seed)
    pool = np.array([0.0, 1.0, 1.0, -2.5, np.nan, np.inf, -np.inf, 3.0], dtype=np.float32)
    logits = rng.choice(pool, size=(items, rows)).astype(np.float32)
    mask = rng.random((items, rows)) < 0.6
    got = _batch_argmax(logits, mask)
    assert got == [masked_argmax(logits[b], mask[b]) for b in range(items)]
