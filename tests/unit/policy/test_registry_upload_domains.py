"""``PolicyRegistry.prepare``/``commit`` of gpu and dag models: the committed entry is the one
discovery makes of the directory it wrote (the model in ``entry.gpu`` / ``entry.dag``, no hpc
policy), and a refused upload writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.policy.onnx_policy import PolicyRefusedError, RefusalReason
from app.policy.registry import PolicyRegistry

MODELS = Path(__file__).resolve().parents[3] / "models"


def _upload(source: Path, name: str) -> tuple[bytes, bytes]:
    card = json.loads((source / "card.json").read_text())
    card["name"] = name
    return (source / "policy.onnx").read_bytes(), json.dumps(card).encode()


@pytest.mark.parametrize(("source", "domain"), [("gpu-v1/2", "gpu"), ("dag-v1/1", "dag")])
def test_a_committed_upload_is_what_discovery_loads(
    tmp_path: Path, source: str, domain: str
) -> None:
    registry = PolicyRegistry(tmp_path)
    model, card = _upload(MODELS / source, "mine")
    prepared = registry.prepare(model, card, tenant="acme")
    assert prepared.domain == domain
    entry = registry.commit(prepared)
    assert entry.policy is None
    assert entry.loaded
    assert entry.domain == domain
    loaded = entry.gpu if domain == "gpu" else entry.dag
    assert loaded is not None
    assert loaded.path == entry.path
    again = PolicyRegistry(tmp_path).discover()
    (found,) = [e for e in again if e.owner and e.name == "mine"]
    assert (found.version, found.sha256, found.domain) == (entry.version, entry.sha256, domain)
    assert (found.gpu is None, found.dag is None) == (entry.gpu is None, entry.dag is None)
    assert registry.find(entry.spec) is entry


def test_a_refused_gpu_upload_writes_nothing(tmp_path: Path) -> None:
    registry = PolicyRegistry(tmp_path)
    _, card = _upload(MODELS / "gpu-v1/2", "mine")
    with pytest.raises(PolicyRefusedError) as refused:
        registry.prepare(b"\x00not onnx", card, tenant="acme")
    assert refused.value.reason is RefusalReason.CORRUPT_MODEL
    assert list(tmp_path.iterdir()) == []
    assert registry.entries() == []
