"""The loading rules the three ONNX loaders share (app/policy/onnx_policy.py): a model directory
lacking a file, a graph whose metadata names another feature schema and a card of another domain
or schema are refused the same way by the hpc, gpu and dag loaders."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest

from app.domains.dag.domain import FEATURE_SCHEMA_VERSION as DAG_SCHEMA
from app.domains.gpu.encoding import FEATURE_SCHEMA_VERSION as GPU_SCHEMA
from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION as HPC_SCHEMA
from app.policy.dag_onnx import load_dag_model, read_dag_model
from app.policy.gpu_onnx import load_gpu_model, load_gpu_policy
from app.policy.onnx_policy import (
    CARD_FILE,
    MODEL_FILE,
    OnnxPolicy,
    PolicyRefusedError,
    RefusalReason,
    parse_domain_card,
    read_model_dir,
)

ROOT = Path(__file__).resolve().parents[3]
FromBytes = Callable[[bytes, bytes], object]
#: domain -> (a shipped model directory, its encoder's schema, load from bytes, load a directory)
LOADERS: dict[str, tuple[Path, str, FromBytes, Callable[[Path], object]]] = {
    "hpc": (ROOT / "models/hpc-kernel/3", HPC_SCHEMA, OnnxPolicy.from_bytes, OnnxPolicy.load),
    "gpu": (ROOT / "models/gpu-v1/1", GPU_SCHEMA, load_gpu_model, load_gpu_policy),
    "dag": (ROOT / "models/dag-v1/1", DAG_SCHEMA, load_dag_model, read_dag_model),
}


@pytest.mark.parametrize("domain", sorted(LOADERS))
def test_a_directory_without_its_model_is_refused_alike(domain: str, tmp_path: Path) -> None:
    shipped, _, _, load_dir = LOADERS[domain]
    (tmp_path / CARD_FILE).write_bytes((shipped / CARD_FILE).read_bytes())
    with pytest.raises(PolicyRefusedError) as err:
        load_dir(tmp_path)
    assert err.value.reason == RefusalReason.MODEL_MISSING
    assert err.value.message == f"{tmp_path} lacks {MODEL_FILE} or {CARD_FILE}"


@pytest.mark.parametrize("domain", sorted(LOADERS))
def test_onnx_metadata_of_another_schema_is_refused_alike(domain: str) -> None:
    shipped, schema, from_bytes, _ = LOADERS[domain]
    model, card = read_model_dir(shipped)
    graph = onnx.load_from_string(model)
    (entry,) = [p for p in graph.metadata_props if p.key == "feature_schema_version"]
    entry.value = "other-v9"
    with pytest.raises(PolicyRefusedError) as err:
        from_bytes(graph.SerializeToString(), card)
    assert err.value.reason == RefusalReason.SCHEMA_VERSION_MISMATCH
    assert err.value.message == (
        f"ONNX metadata names feature schema 'other-v9', the encoder is {schema!r}"
    )
    from_bytes(model, card)  # the unchanged graph loads


def _card(**over: Any) -> bytes:
    card: dict[str, Any] = {"name": "m", "version": "1", "domain": "gpu"}
    card["feature_schema_version"] = GPU_SCHEMA
    return json.dumps({**card, **over}).encode()


@pytest.mark.parametrize(
    ("raw", "reason", "message"),
    [
        (b"{", RefusalReason.INVALID_CARD, "card.json: "),
        (b"[1]", RefusalReason.INVALID_CARD, "card.json must be a JSON object"),
        (_card(name=""), RefusalReason.INVALID_CARD, "card.json needs a string name"),
        (_card(version=3), RefusalReason.INVALID_CARD, "card.json needs a string version"),
        (_card(domain="dag"), RefusalReason.INVALID_CARD, "card domain is 'dag', expected 'gpu'"),
        (
            _card(feature_schema_version="v0"),
            RefusalReason.SCHEMA_VERSION_MISMATCH,
            f"card names feature schema 'v0', the encoder is {GPU_SCHEMA!r}",
        ),
    ],
)
def test_a_domain_card_is_refused_with_its_reason(
    raw: bytes, reason: RefusalReason, message: str
) -> None:
    with pytest.raises(PolicyRefusedError) as err:
        parse_domain_card(raw, domain="gpu", schema_version=GPU_SCHEMA)
    assert err.value.reason == reason
    assert err.value.message.startswith(message)


def test_a_domain_card_keeps_its_own_keys() -> None:
    raw = parse_domain_card(_card(window=8), domain="gpu", schema_version=GPU_SCHEMA)
    assert raw["window"] == 8
