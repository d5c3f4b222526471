"""The ``kairos-gpu-v1`` features (spec section 8.1) on a hand-made snapshot."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.domains.gpu.encoding import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    NUM_FEATURES,
    EncodingConstants,
    encode,
)
from app.domains.gpu.types import ClusterSnapshot, GpuJob, NodeState, Placement, gpu_node


def _snapshot() -> ClusterSnapshot:
    running = GpuJob(
        id="r1",
        arrival=0.0,
        min_gpus=2,
        max_gpus=2,
        tenant="a",
        estimate_s=7200.0,
        allocation=(Placement("n0", 2),),
        attained_gpu_s=7200.0,
        executed_s=3600.0,
        starts=2,
        preemptions=1,
        restart_left_s=10.0,
    )
    big = GpuJob(id="p3", arrival=10.0, min_gpus=16, max_gpus=16, tenant="b")
    elastic = GpuJob(id="p2", arrival=50.0, min_gpus=1, max_gpus=3, tenant="a")
    four = GpuJob(id="p1", arrival=100.0, min_gpus=4, max_gpus=4, tenant="b")
    nodes = (gpu_node("n0", 4), gpu_node("n1", 4), gpu_node("n2", 8, NodeState.DOWN))
    return ClusterSnapshot(now=3700.0, nodes=nodes, jobs=(four, big, running, elastic))


def _lr(x: float, scale: float) -> float:
    return math.log1p(x) / math.log1p(scale)


def test_schema_names_twenty_features() -> None:
    assert FEATURE_SCHEMA_VERSION == "kairos-gpu-v1"
    assert len(FEATURE_NAMES) == NUM_FEATURES == 20


def test_rows_running_first_then_pending_by_arrival_with_exact_values() -> None:
    c = EncodingConstants()
    enc = encode(_snapshot(), c)
    assert [j.id for j in enc.jobs] == ["r1", "p3", "p2", "p1"]
    assert enc.obs.dtype == np.float32
    assert enc.mask.tolist() == [True, False, True, True]  # 16 GPUs > the 8 of the up nodes
    # cluster: free 2 + 4 of 8 up GPUs, one of two up nodes fully free, largest free block 4
    # of 4, pending demand 16 + 1 + 4 of 8
    cluster = [6 / 8, 1 / 2, 4 / 4, 21 / 8]
    r1 = [
        2 / 4,
        2 / 8,
        _lr(3700, c.wait_scale_s),
        _lr(7200, c.attained_scale_gpu_s),
        _lr(3600, c.executed_scale_s),
        1.0,  # running
        1.0,  # 7200 GPU-s >= the 3250 threshold
        0.0,  # estimates off (information-agnostic)
        0.0,
        0.5,  # one preemption
        2 / 8,  # tenant a holds 2 of 8 GPUs
        1 / 21,  # tenant a asks for 1 of the 21 pending GPUs
        1.0,
        1.0,  # on one node
        0.0,
        1.0,  # restart delay left
    ]
    p3 = [16 / 4, 16 / 8, _lr(3690, c.wait_scale_s), 0, 0, 0, 0, 0, 0, 0, 0, 20 / 21, 0, 0, 0, 0]
    p2 = [1 / 4, 1 / 8, _lr(3650, c.wait_scale_s), 0, 0, 0, 0, 0, 0, 0, 2 / 8, 1 / 21, 1, 1, 1, 0]
    p1 = [4 / 4, 4 / 8, _lr(3600, c.wait_scale_s), 0, 0, 0, 0, 0, 0, 0, 0, 20 / 21, 1, 1, 0, 0]
    expected = np.array([row + cluster for row in (r1, p3, p2, p1)], dtype=np.float32)
    np.testing.assert_allclose(enc.obs, expected, rtol=1e-6, atol=1e-7)


def test_estimate_features_only_when_enabled() -> None:
    c = EncodingConstants(use_estimates=True)
    enc = encode(_snapshot(), c)
    has, rem = FEATURE_NAMES.index("has_estimate"), FEATURE_NAMES.index("estimate_remaining")
    assert enc.obs[0, has] == 1.0
    assert enc.obs[0, rem] == pytest.approx(_lr(3600, c.estimate_scale_s))
    assert enc.obs[1:, has].tolist() == [0.0, 0.0, 0.0]  # no estimate given


def test_window_cuts_candidates_and_keeps_the_rest_as_overflow() -> None:
    enc = encode(_snapshot(), EncodingConstants(), window=2)
    assert [j.id for j in enc.jobs] == ["r1", "p3"]
    assert [j.id for j in enc.overflow] == ["p2", "p1"]
    assert enc.obs.shape == (2, NUM_FEATURES)


def test_constants_round_trip_and_refuse_bad_values() -> None:
    c = EncodingConstants(wait_scale_s=10.0, use_estimates=True)
    assert EncodingConstants.from_dict(c.as_dict()) == c
    with pytest.raises(ValueError, match="unknown keys"):
        EncodingConstants.from_dict({"speed": 1.0})
    with pytest.raises(ValueError, match="wait_scale_s"):
        EncodingConstants(wait_scale_s=0.0)
    with pytest.raises(ValueError, match="use_estimates"):
        EncodingConstants.from_dict({"use_estimates": 1})
