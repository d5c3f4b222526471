"""Contract: the ONNX I/O signature the runtime accepts == what the encoder produces == what the
training exporter writes into the card (house-style §9)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.domains.hpc.decision import DecisionRun
from app.domains.hpc.encoding import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    NUM_FEATURES,
    encode_batch,
)
from app.domains.hpc.types import ClusterState, Job, Node
from app.policy.onnx_policy import (
    LOGITS_OUTPUT,
    MASK_INPUT,
    OBS_INPUT,
    OnnxPolicy,
    describe_signature,
)
from tests.fixtures import onnx_models as m


def test_the_card_signature_names_the_encoder_tensors() -> None:
    sig = describe_signature()
    assert [i["name"] for i in sig["inputs"]] == [OBS_INPUT, MASK_INPUT] == ["obs", "action_mask"]
    assert [o["name"] for o in sig["outputs"]] == [LOGITS_OUTPUT] == ["logits"]
    assert sig["inputs"][0]["shape"] == ["B", "N", NUM_FEATURES]
    assert sig["inputs"][0]["dtype"] == "float32"
    assert sig["inputs"][1]["dtype"] == "bool"
    assert len(FEATURE_NAMES) == NUM_FEATURES == 13
    assert FEATURE_SCHEMA_VERSION == "kairos-hpc-v1"


def test_encoder_output_feeds_a_validated_model() -> None:
    card = json.dumps(m.card(**describe_signature())).encode()
    policy = OnnxPolicy.from_bytes(m.kernel_model(), card)
    inputs = {arg.name: arg for arg in policy._session.get_inputs()}
    assert set(inputs) == {OBS_INPUT, MASK_INPUT}
    state = ClusterState(
        now=10.0,
        nodes=(Node("n", {"cpu": 4.0}),),
        pending=tuple(Job(f"j{i}", {"cpu": 1.0}, 5.0, float(i)) for i in range(3)),
    )
    batch = encode_batch([DecisionRun(state).view()])
    assert batch.obs.dtype == np.float32
    assert batch.mask.dtype == np.bool_
    logits = policy.score(batch.obs, batch.mask)
    assert logits.shape == batch.mask.shape


def test_the_training_exporter_writes_a_card_the_runtime_accepts() -> None:
    pytest.importorskip("torch")  # the exporter lives in the optional `train` extra
    from training.export_onnx import io_signature

    sig = io_signature()
    assert sig["inputs"] == describe_signature()["inputs"]
    assert sig["outputs"] == describe_signature()["outputs"]
