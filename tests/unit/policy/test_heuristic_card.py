"""A heuristic card (``kairos tune``'s output when a heuristic won) is served as its heuristic."""

from __future__ import annotations

import json
from pathlib import Path

from app.domains.hpc.heuristics import get_heuristic
from app.policy.onnx_policy import RefusalReason
from app.policy.registry import PolicyRegistry, owner_of, qualified
from app.policy.selector import resolve


def _card_dir(base: Path, name: str, version: str, **card: object) -> Path:
    directory = base / name / version
    directory.mkdir(parents=True)
    body = {"name": name, "version": version, "domain": "hpc", "kind": "heuristic", **card}
    (directory / "card.json").write_text(json.dumps(body))
    return directory


def test_a_tenants_heuristic_card_resolves_to_its_heuristic(tmp_path: Path) -> None:
    owner = owner_of("acme")
    _card_dir(tmp_path / "_tenants" / owner, "site-tuned", "1", recommendation="f1")
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    entry = registry.find(qualified(owner, "site-tuned"))
    assert entry is not None
    assert (entry.heuristic, entry.loaded, entry.policy) == ("f1", True, None)
    assert entry.as_dict()["kind"] == "heuristic"
    resolved = resolve(qualified(owner, "site-tuned@1"), registry)
    assert resolved.reason is None
    assert resolved.heuristic is not None
    assert resolved.heuristic.ref == get_heuristic("f1").ref


def test_a_heuristic_card_naming_no_heuristic_is_refused(tmp_path: Path) -> None:
    _card_dir(tmp_path, "bad-card", "1", recommendation="nope")
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    entry = registry.find("bad-card@1")
    assert entry is not None
    assert not entry.loaded
    assert entry.reason == RefusalReason.INVALID_CARD
    assert "nope" in (entry.message or "")
    assert resolve("bad-card@1", registry).heuristic is None


def test_a_heuristic_card_installed_later_is_found_on_disk(tmp_path: Path) -> None:
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    _card_dir(tmp_path, "late", "2", recommendation="sjf")
    entry = registry.find_or_load("late", retry_after_s=0.0)
    assert entry is not None
    assert entry.heuristic == "sjf"
