"""Model and version names are checked whole: ``re.match``'s ``$`` would accept a final ``\\n``
(issue 23, finding 3), and a name with a newline would become a directory under MODELS_DIR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.policy.onnx_policy import PolicyRefusedError, RefusalReason
from app.policy.registry import PolicyRegistry
from tests.fixtures import onnx_models as m


@pytest.mark.parametrize(("name", "version"), [("hpc-nl\n", "1"), ("hpc-nl", "1\n")])
def test_an_upload_named_with_a_trailing_newline_is_refused(
    tmp_path: Path, name: str, version: str
) -> None:
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    card = json.dumps(m.card(name=name, version=version)).encode()
    with pytest.raises(PolicyRefusedError) as info:
        registry.install(m.kernel_model(), card, tenant="t1")
    assert info.value.reason is RefusalReason.INVALID_CARD
    assert not any("\n" in p.name for p in tmp_path.rglob("*"))


def test_a_lookup_with_a_trailing_newline_finds_nothing(tmp_path: Path) -> None:
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    registry.install(m.kernel_model(), json.dumps(m.card(name="hpc-up", version="1")).encode())
    assert registry.find_or_load("hpc-up") is not None
    assert registry.find_or_load("hpc-up\n") is None
    assert registry.find_or_load("hpc-up@1\n") is None
