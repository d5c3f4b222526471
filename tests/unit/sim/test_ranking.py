"""The simulators' encoder for ranking policies equals the service's encoder, bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domains.hpc.decision import DecisionConfig, DecisionRun
from app.domains.hpc.encoding import encode_view
from app.domains.hpc.ranking import HeadEncoder, head_features
from app.domains.hpc.types import ClusterState, Job, Node


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    q=st.integers(1, 60),
    free=st.sampled_from([0.0, 1.0, 3.0, 17.0, 64.0]),
    now=st.floats(0.0, 1e7),
)
def test_head_encoder_equals_head_features(seed: int, q: int, free: float, now: float) -> None:
    rng = np.random.default_rng(seed)
    n = q + 5
    submit = np.sort(rng.uniform(0.0, now + 1.0, n)).round()
    walltime = rng.choice([0.0, 1.0, 9.0, 60.0, 3600.0, 86_400.0, 1e6], n)
    demand = rng.integers(0, 65, n).astype(np.float64)
    encoder = HeadEncoder(submit, walltime, demand, 64.0)
    at = np.sort(rng.choice(n, q, replace=False)).astype(np.intp)
    fits = demand[at] <= free
    fast = encoder.encode(at, now, fits, free)
    slow = head_features(now, submit[at], walltime[at], demand[at], fits, 64.0, free)
    assert fast.dtype == slow.dtype
    assert fast.tobytes() == slow.tobytes()


def test_head_features_equal_the_service_encoder_on_a_snapshot() -> None:
    jobs = tuple(
        Job(f"j{i:02d}", {"cpu": float(1 + i % 4)}, 60.0 * (1 + i), float(100 * i), tasks=1 + i % 3)
        for i in range(12)
    )
    state = ClusterState(
        now=2000.0,
        nodes=(Node("pool", {"cpu": 32.0}, {"cpu": 20.0}),),
        pending=jobs,
    )
    view = DecisionRun(state, DecisionConfig()).view()
    encoded = encode_view(view, len(view.candidates))
    demand = np.array([j.tasks * j.per_task["cpu"] for j in view.candidates])
    ours = head_features(
        2000.0,
        np.array([j.submit_time for j in view.candidates]),
        np.array([j.walltime_s for j in view.candidates]),
        demand,
        np.array(view.fits_now),
        32.0,
        12.0,
    )
    assert ours.tobytes() == encoded.obs.tobytes()
