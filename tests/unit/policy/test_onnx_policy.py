"""OnnxPolicy validation (each refusal reason), scoring, and the model registry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.domains.hpc.decision import DecisionRun, decide
from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION, NUM_FEATURES
from app.domains.hpc.types import ClusterState, Job, Node
from app.policy.onnx_policy import (
    OnnxPolicy,
    PolicyInferenceError,
    PolicyRefusedError,
    RefusalReason,
    RuntimeOptions,
    describe_signature,
)
from app.policy.registry import ModelExistsError, PolicyRegistry, version_key
from tests.fixtures import onnx_models as m

CARD = json.dumps(m.card()).encode()


def _refusal(model: bytes, card: bytes = CARD, **kw: object) -> RefusalReason:
    with pytest.raises(PolicyRefusedError) as info:
        OnnxPolicy.from_bytes(model, card, **kw)  # type: ignore[arg-type]
    return info.value.reason


def test_a_good_model_loads_and_scores() -> None:
    policy = OnnxPolicy.from_bytes(m.kernel_model(seed=3), CARD)
    assert policy.ref.kind == "onnx"
    assert (policy.ref.name, policy.ref.version) == ("test-kernel", "1")
    obs = np.random.default_rng(1).random((4, 9, NUM_FEATURES), dtype=np.float32)
    mask = np.ones((4, 9), dtype=np.bool_)
    mask[2, 4] = False
    logits = policy.score(obs, mask)
    assert logits.shape == (4, 9)
    assert logits.dtype == np.float32
    assert logits[2, 4] == pytest.approx(-1e9)
    single = policy.score(obs[1:2], mask[1:2])
    np.testing.assert_allclose(single[0], logits[1], rtol=1e-6)  # batching changes nothing


@pytest.mark.parametrize(
    ("model", "card", "reason"),
    [
        (b"\x08\x01garbage that is not protobuf", CARD, RefusalReason.CORRUPT_MODEL),
        (b"", CARD, RefusalReason.CORRUPT_MODEL),
        (m.kernel_model(features=8), CARD, RefusalReason.SIGNATURE_MISMATCH),
        (m.kernel_model(batch_dim=1), CARD, RefusalReason.SIGNATURE_MISMATCH),
        (m.kernel_model(queue_dim=128), CARD, RefusalReason.SIGNATURE_MISMATCH),
        (m.kernel_model(mask_dtype=1), CARD, RefusalReason.SIGNATURE_MISMATCH),
        (m.kernel_model(output_name="scores"), CARD, RefusalReason.SIGNATURE_MISMATCH),
        (
            m.kernel_model(metadata={"feature_schema_version": "kairos-hpc-v0"}),
            CARD,
            RefusalReason.SCHEMA_VERSION_MISMATCH,
        ),
        (
            m.kernel_model(),
            json.dumps(m.card(feature_schema_version="rlscheduler-8")).encode(),
            RefusalReason.SCHEMA_VERSION_MISMATCH,
        ),
        (m.nan_model(), CARD, RefusalReason.NON_FINITE_PROBE),
        (m.kernel_model(), b"{not json", RefusalReason.INVALID_CARD),
        (
            m.kernel_model(),
            json.dumps({k: v for k, v in m.card().items() if k != "seeds"}).encode(),
            RefusalReason.INVALID_CARD,
        ),
        (
            m.kernel_model(),
            json.dumps(
                m.card(inputs=[{"name": "obs", "dtype": "float32", "shape": ["B", "N", 8]}])
            ).encode(),
            RefusalReason.SIGNATURE_MISMATCH,
        ),
    ],
    ids=[
        "corrupt",
        "empty",
        "wrong-feature-count",
        "fixed-batch",
        "fixed-queue",
        "float-mask",
        "no-logits",
        "metadata-schema",
        "card-schema",
        "nan-output",
        "card-not-json",
        "card-incomplete",
        "card-signature",
    ],
)
def test_refusals_carry_a_machine_readable_reason(
    model: bytes, card: bytes, reason: RefusalReason
) -> None:
    assert _refusal(model, card) is reason


def test_a_model_without_schema_metadata_is_accepted_on_its_card() -> None:
    OnnxPolicy.from_bytes(m.kernel_model(metadata={}), CARD)


def test_providers_are_explicit_and_verified() -> None:
    options = RuntimeOptions(providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
    assert _refusal(m.kernel_model(), options=options) is RefusalReason.PROVIDER_UNAVAILABLE
    policy = OnnxPolicy.from_bytes(m.kernel_model(), CARD, options=RuntimeOptions(2, 1))
    assert policy.options.intra_op_threads == 2


def test_runtime_failures_are_typed() -> None:
    raises = OnnxPolicy.from_bytes(m.raises_when_long_model(limit=6), CARD)
    obs = np.zeros((1, 10, NUM_FEATURES), dtype=np.float32)
    with pytest.raises(PolicyInferenceError) as info:
        raises.score(obs, np.ones((1, 10), dtype=np.bool_))
    assert info.value.reason == "inference_error"
    nan = OnnxPolicy.from_bytes(m.nan_when_fresh_model(), CARD)
    obs[0, 3:, 0] = 0.5
    logits = nan.score(obs, np.ones((1, 10), dtype=np.bool_))
    assert np.isnan(logits[0, :3]).all()
    assert np.isfinite(logits[0, 3:]).all()


def test_pick_is_a_stepping_policy_that_respects_the_mask() -> None:
    policy = OnnxPolicy.from_bytes(m.kernel_model(seed=5), CARD)
    nodes = (Node("n1", {"cpu": 8.0}),)
    jobs = tuple(
        Job(f"j{i}", {"cpu": float(1 + i % 4)}, 60.0 * (i + 1), float(i)) for i in range(12)
    )
    state = ClusterState(now=100.0, nodes=nodes, pending=jobs)
    decision = decide(state, policy)
    assert decision.policy == policy.ref
    used = sum(
        next(j for j in jobs if j.id == a.job_id).per_task["cpu"] for a in decision.allocations
    )
    assert 0 < used <= 8.0
    run = DecisionRun(state)
    view = run.view()
    assert view.mask[policy.pick(view)]


def test_card_signature_helper_matches_the_validator() -> None:
    card = m.card(**describe_signature())
    OnnxPolicy.from_bytes(m.kernel_model(), json.dumps(card).encode())
    assert card["feature_schema_version"] == FEATURE_SCHEMA_VERSION


def test_registry_discovers_loaded_and_refused_models(tmp_path: Path) -> None:
    m.write_model(tmp_path, "hpc-good", "1", m.kernel_model(seed=1))
    m.write_model(tmp_path, "hpc-good", "10", m.kernel_model(seed=2))
    m.write_model(tmp_path, "hpc-good", "2", m.kernel_model(seed=3))
    m.write_model(tmp_path, "hpc-nan", "1", m.nan_model())
    m.write_model(tmp_path, "hpc-corrupt", "1", b"not onnx")
    (tmp_path / "hpc-empty" / "1").mkdir(parents=True)
    registry = PolicyRegistry(tmp_path)
    entries = {(e.name, e.version): e for e in registry.discover()}
    assert len(entries) == 6
    assert entries[("hpc-nan", "1")].reason is RefusalReason.NON_FINITE_PROBE
    assert entries[("hpc-corrupt", "1")].reason is RefusalReason.CORRUPT_MODEL
    assert entries[("hpc-empty", "1")].reason is RefusalReason.MODEL_MISSING
    good = registry.find("hpc-good")
    assert good is not None
    assert good.version == "10"  # natural version order
    assert good.policy is not None
    assert good.policy.ref.name == "hpc-good"
    assert registry.find("hpc-good@2") is entries[("hpc-good", "2")]
    assert registry.find("nope") is None
    listed = entries[("hpc-nan", "1")].as_dict()
    assert listed["loaded"] is False
    assert listed["kind"] == "onnx"
    assert listed["refused"]["reason"] == "non_finite_probe"
    assert len(str(entries[("hpc-good", "1")].as_dict()["sha256"])) == 64
    assert version_key("1.2") < version_key("1.10")


def test_registry_install_is_atomic_and_refuses_bad_uploads(tmp_path: Path) -> None:
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    card = json.dumps(m.card(name="hpc-up", version="3")).encode()
    entry = registry.install(m.kernel_model(), card)
    assert entry.loaded
    assert (tmp_path / "hpc-up" / "3" / "policy.onnx").is_file()
    with pytest.raises(ModelExistsError):
        registry.install(m.kernel_model(), card)
    bad = json.dumps(m.card(name="hpc-bad", version="1")).encode()
    with pytest.raises(PolicyRefusedError) as info:
        registry.install(m.nan_model(), bad)
    assert info.value.reason is RefusalReason.NON_FINITE_PROBE
    assert not (tmp_path / "hpc-bad").exists()
    assert [p.name for p in (tmp_path / "hpc-up").iterdir()] == ["3"]  # no staging left behind
    fresh = PolicyRegistry(tmp_path)
    assert [e.loaded for e in fresh.discover()] == [True]


def test_registry_finds_models_installed_after_startup(tmp_path: Path) -> None:
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    assert registry.find_or_load("hpc-late") is None
    m.write_model(tmp_path, "hpc-late", "1", m.kernel_model())
    assert registry.find_or_load("hpc-late") is None  # a recent miss is not re-checked yet
    entry = registry.find_or_load("hpc-late", retry_after_s=0.0)
    assert entry is not None
    assert entry.loaded
    assert registry.find("hpc-late@1") is entry


def test_registry_refresh_loads_what_another_process_installed(tmp_path: Path) -> None:
    """Processes sharing ``MODELS_DIR``: a version or a name installed by one is loaded by the
    others' refresh, and a name without a version then means the same newest one (ADR 0086)."""
    m.write_model(tmp_path, "hpc-up", "1", m.kernel_model())
    registry, other = PolicyRegistry(tmp_path), PolicyRegistry(tmp_path)
    registry.discover()
    other.discover()
    assert registry.refresh() == []
    other.install(m.kernel_model(seed=2), json.dumps(m.card(name="hpc-up", version="2")).encode())
    other.install(m.kernel_model(seed=3), json.dumps(m.card(name="hpc-new", version="1")).encode())
    before = registry.find("hpc-up")
    assert before is not None
    assert before.version == "1"
    added = registry.refresh()
    assert sorted((e.name, e.version, e.loaded) for e in added) == [
        ("hpc-new", "1", True),
        ("hpc-up", "2", True),
    ]
    newest = registry.find("hpc-up")
    assert newest is not None
    assert newest.version == "2"
    assert registry.find("hpc-up@1") is before  # known entries are not loaded again
    assert registry.refresh() == []
