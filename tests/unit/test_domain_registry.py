"""The domain registry and the Domain protocol every registered domain binds to (ADR 0094)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.domains import UnknownDomainError, domain_names, get_domain
from app.kernel.errors import UnknownHeuristicError

ROOT = Path(__file__).resolve().parents[2]


def test_the_registry_lists_every_domain_package() -> None:
    packages = sorted(
        p.name for p in (ROOT / "app" / "domains").iterdir() if (p / "domain.py").is_file()
    )
    assert list(domain_names()) == packages == ["dag", "gpu", "hpc"]


@pytest.mark.parametrize("name", domain_names())
def test_each_domain_binds_the_protocol(name: str) -> None:
    domain = get_domain(name)
    assert domain.name == name
    assert domain.feature_schema_version
    names = domain.heuristic_names()
    assert list(names) == sorted(names)
    assert domain.default_fallback in names
    for heuristic in names:
        assert domain.heuristic(heuristic) is not None
    with pytest.raises((UnknownHeuristicError, LookupError, ValueError)):
        domain.heuristic("no-such-heuristic")


def test_an_unknown_domain_names_the_known_ones() -> None:
    with pytest.raises(UnknownDomainError, match="known: dag, gpu, hpc"):
        get_domain("vm")


def test_importing_the_registry_imports_no_domain() -> None:
    code = (
        "import sys, app.domains; "
        "print(sorted(m for m in sys.modules if m.startswith('app.domains.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
