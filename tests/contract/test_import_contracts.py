"""The import-linter contracts of pyproject.toml hold on the code, and each one breaks when the
boundary it guards is crossed: a copy of the packages gets one forbidden import, and
``lint-imports`` run on that copy must report the contract BROKEN."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "sim", "kairos", "training")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _contract_names() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [c["name"] for c in config["tool"]["importlinter"]["contracts"]]


KERNEL_PURE = "the kernel is pure and knows no domain"
DOMAIN_PURE = "a domain package is pure: no framework, no service layer"
DOMAINS_INDEPENDENT = "domains are independent of each other"
NO_SIMULATOR_IN_SERVING = "serving code never imports a domain's simulator or Gymnasium env"
BATCHING_NO_POLICY = "batching is transport: it never imports a policy"
LAYERS = "the service's layers"
DISPATCH_NO_DOMAIN = "the API and the round dispatch name no domain"


def _lint(root: Path) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def _copy(tmp_path: Path) -> Path:
    """The packages' Python sources and pyproject.toml, nothing else."""
    root = tmp_path / "repo"
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package,
            root / package,
            ignore=lambda _d, names: (
                [n for n in names if not n.endswith(".py") and not (Path(_d) / n).is_dir()]
                + [n for n in names if n == "__pycache__"]
            ),
        )
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _inject(path: Path, line: str) -> None:
    """Add ``line`` after the module's ``from __future__`` import."""
    text = path.read_text()
    anchor = "from __future__ import annotations\n"
    assert anchor in text, path
    path.write_text(text.replace(anchor, anchor + line + "\n", 1))


def _status(output: str, name: str) -> str:
    for row in output.splitlines():
        if row.startswith(name + " "):
            return row[len(name) + 1 :].strip()
    raise AssertionError(f"contract {name!r} is not in the output:\n{output}")


def test_the_named_contracts_are_the_configured_ones() -> None:
    names = _contract_names()
    for name in (
        KERNEL_PURE,
        DOMAIN_PURE,
        DOMAINS_INDEPENDENT,
        NO_SIMULATOR_IN_SERVING,
        BATCHING_NO_POLICY,
        LAYERS,
        DISPATCH_NO_DOMAIN,
    ):
        assert name in names


def test_the_real_code_keeps_every_contract() -> None:
    code, output = _lint(ROOT)
    assert code == 0, output
    for name in _contract_names():
        assert _status(output, name) == "KEPT", output


def _fake_domain(root: Path) -> None:
    zz = root / "app" / "domains" / "zz"
    zz.mkdir()
    (zz / "__init__.py").write_text('"""A second domain, for the independence contract."""\n')
    _inject(root / "app" / "domains" / "hpc" / "types.py", "import app.domains.zz")


BREAKS: dict[str, tuple[Callable[[Path], None], set[str]]] = {
    "kernel-imports-db": (
        lambda r: _inject(r / "app" / "kernel" / "types.py", "import app.db"),
        {KERNEL_PURE, LAYERS},
    ),
    "service-imports-gym-env": (
        lambda r: _inject(r / "app" / "services" / "jobs.py", "import app.domains.hpc.env"),
        {NO_SIMULATOR_IN_SERVING},
    ),
    "batching-imports-policy": (
        lambda r: _inject(r / "app" / "batching" / "wire.py", "import app.policy.registry"),
        {BATCHING_NO_POLICY, LAYERS},
    ),
    "domain-imports-another-domain": (_fake_domain, {DOMAINS_INDEPENDENT}),
    "domain-imports-the-service": (
        lambda r: _inject(r / "app" / "domains" / "hpc" / "codec.py", "import app.services.jobs"),
        {DOMAIN_PURE, LAYERS},
    ),
    "api-imports-a-domain": (
        lambda r: _inject(
            r / "app" / "api" / "v1" / "decisions.py", "import app.domains.hpc.types"
        ),
        {DISPATCH_NO_DOMAIN},
    ),
    "dispatch-imports-a-round-module": (
        lambda r: _inject(
            r / "app" / "services" / "scheduling.py", "import app.services.hpc_rounds"
        ),
        {DISPATCH_NO_DOMAIN},
    ),
    "db-imports-services": (
        lambda r: _inject(r / "app" / "db" / "orm.py", "import app.services.errors"),
        {LAYERS},
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_a_forbidden_import_breaks_its_contract(tmp_path: Path, case: str) -> None:
    """The copy keeps every contract until the one import is added (so it is the copy that is
    analysed); then each contract that guards that boundary is BROKEN (others that the import
    also crosses, indirectly, may break too)."""
    inject, broken = BREAKS[case]
    root = _copy(tmp_path)
    code, output = _lint(root)
    assert code == 0, output
    inject(root)
    code, output = _lint(root)
    assert code != 0, output
    for name in broken:
        assert _status(output, name) == "BROKEN", (name, output)
