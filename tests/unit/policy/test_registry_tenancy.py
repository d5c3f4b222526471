"""The registry's two kinds of model (ADR 0088): shipped ones in ``MODELS_DIR/<name>/`` and each
tenant's uploads in ``MODELS_DIR/_tenants/<owner>/<name>/``, named by a qualified spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.policy.onnx_policy import PolicyRefusedError, RefusalReason
from app.policy.registry import (
    TENANTS_DIR,
    PolicyRegistry,
    ReservedNameError,
    check_card_depth,
    owner_of,
    qualified,
)
from tests.fixtures import onnx_models as m


def _card(name: str, version: str = "1") -> bytes:
    return json.dumps(m.card(name=name, version=version)).encode()


@pytest.mark.parametrize(
    "tenant",
    ["acme", "Acme", "a/../b", "..", ".hidden", "x:y@z", "tenant with spaces", "ü", "", "~7e"],
)
def test_owner_is_a_safe_directory_name(tenant: str) -> None:
    owner = owner_of(tenant)
    assert owner not in ("", ".", "..")
    assert not owner.startswith(".")
    assert all(ch.isascii() and (ch.isalnum() or ch in "_-~") for ch in owner)
    assert owner == owner.lower()  # a case-insensitive file system keeps tenants apart


def test_distinct_tenants_get_distinct_owners() -> None:
    tenants = ["acme", "Acme", "ACME", "a~41", "~", "~7e", "a b", "a_b", "", "x" * 64, "y" * 64]
    owners = [owner_of(t) for t in tenants]
    assert len(set(owners)) == len(owners)
    assert all(len(o) <= 128 for o in owners)


def test_an_upload_lives_under_its_tenant_and_resolves_only_qualified(tmp_path: Path) -> None:
    m.write_model(tmp_path, "shipped", "1", m.kernel_model(seed=1))
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    entry = registry.install(m.kernel_model(seed=2), _card("mine"), tenant="globex")
    assert entry.path == tmp_path / TENANTS_DIR / "globex" / "mine" / "1"
    assert entry.owner == "globex"
    assert entry.policy is not None
    assert entry.policy.ref.name == "mine"  # decisions carry the name the tenant gave it
    assert registry.find("mine") is None
    assert registry.find_or_load("mine", retry_after_s=0.0) is None
    assert registry.find(qualified("globex", "mine")) is entry
    assert registry.find(qualified("globex", "mine@1")) is entry
    assert registry.find(qualified("acme", "mine")) is None
    assert registry.find_or_load(qualified("../x", "mine"), retry_after_s=0.0) is None
    shipped = registry.find("shipped")
    assert shipped is not None
    assert shipped.owner == ""


def test_two_tenants_may_upload_the_same_name_at_the_same_version(tmp_path: Path) -> None:
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    one = registry.install(m.kernel_model(seed=1), _card("same"), tenant="acme")
    two = registry.install(m.kernel_model(seed=2), _card("same"), tenant="globex")
    assert one.sha256 != two.sha256
    assert registry.find(qualified(owner_of("acme"), "same")) is one
    assert registry.find(qualified(owner_of("globex"), "same")) is two


@pytest.mark.parametrize("name", ["shipped", "SHIPPED", "sjf", "SJF"])
def test_an_upload_may_not_take_a_shipped_or_reserved_name(tmp_path: Path, name: str) -> None:
    m.write_model(tmp_path, "shipped", "1", m.kernel_model())
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    with pytest.raises(ReservedNameError):
        registry.install(m.kernel_model(), _card(name, "2"), tenant="acme", reserved={"sjf"})
    assert not (tmp_path / TENANTS_DIR).exists()


def test_another_process_loads_a_tenants_upload_by_its_qualified_spec(tmp_path: Path) -> None:
    """A ``kairos worker`` sharing ``MODELS_DIR``: it resolves the spec the API sends, and its
    rescan (ADR 0086) covers the tenants' directories."""
    api, worker, watcher = (PolicyRegistry(tmp_path) for _ in range(3))
    for registry in (api, worker, watcher):
        registry.discover()
    assert watcher.refresh() == []
    api.install(m.kernel_model(seed=3), _card("late"), tenant="acme")
    spec = qualified(owner_of("acme"), "late")
    found = worker.find_or_load(spec, retry_after_s=0.0)
    assert found is not None
    assert found.loaded
    assert (found.owner, found.name, found.version) == ("acme", "late", "1")
    added = watcher.refresh()
    assert [(e.owner, e.name, e.version) for e in added] == [("acme", "late", "1")]
    api.install(m.kernel_model(seed=4), _card("late", "2"), tenant="acme")
    assert [(e.name, e.version) for e in watcher.refresh()] == [("late", "2")]
    newest = watcher.find(spec)
    assert newest is not None
    assert newest.version == "2"
    fresh = PolicyRegistry(tmp_path)
    assert {(e.owner, e.name, e.version) for e in fresh.discover()} == {
        ("acme", "late", "1"),
        ("acme", "late", "2"),
    }


@pytest.mark.parametrize(
    "card",
    [b"[" * 100_000 + b"]" * 100_000, json.dumps({"a": json.loads("[" * 33 + "]" * 33)}).encode()],
    ids=["100k-brackets", "33-levels"],
)
def test_a_deeply_nested_card_is_refused_without_recursing(tmp_path: Path, card: bytes) -> None:
    with pytest.raises(PolicyRefusedError) as info:
        check_card_depth(card)
    assert info.value.reason is RefusalReason.INVALID_CARD
    registry = PolicyRegistry(tmp_path)
    with pytest.raises(PolicyRefusedError):
        registry.install(m.kernel_model(), card, tenant="acme")
    check_card_depth(json.dumps({"a": json.loads("[" * 31 + "]" * 31)}).encode())
    check_card_depth(b"not json")  # left for parse_card to refuse
