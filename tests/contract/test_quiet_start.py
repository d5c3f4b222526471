"""What ``make run`` prints and what the API says about itself (issue 24, item 10): the build
raises no setuptools deprecation, ``kairos migrate`` does not announce alembic's plugins, and
the OpenAPI document's version is the installed package's, under a title that does not repeat."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

from app.main import DISTRIBUTION, create_app

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_api_version_is_the_installed_packages() -> None:
    assert PYPROJECT["project"]["name"] == DISTRIBUTION
    info = create_app().openapi()["info"]
    assert info["version"] == version(DISTRIBUTION) == PYPROJECT["project"]["version"]


def test_the_openapi_title_says_each_thing_once() -> None:
    info = create_app().openapi()["info"]
    text = " ".join(str(info.get(k, "")) for k in ("title", "summary", "description")).lower()
    assert text.count("scheduling as a service") == 1, info


def test_the_license_is_an_spdx_expression_with_its_file() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    for name in project["license-files"]:
        assert (ROOT / name).is_file(), name
    # SPDX strings and license-files need setuptools 77
    assert "setuptools>=77" in PYPROJECT["build-system"]["requires"]


def test_building_the_package_prints_no_deprecation(tmp_path: Path) -> None:
    # the metadata step `pip install -e .` runs, without installing anything
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    log = out.stdout + out.stderr
    assert "deprecated" not in log.lower(), log[-4000:]


def test_migrate_on_a_fresh_sqlite_file_does_not_announce_alembic_plugins(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")},
        "KAIROS_DATABASE_URL": f"sqlite:///{tmp_path / 'kairos.db'}",
        "KAIROS_LOG_LEVEL": "info",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(
        [sys.executable, "-m", "kairos", "migrate"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "alembic.runtime.plugins" not in log, log
    assert "Running upgrade  -> 0001" in log, log  # the migration lines stay
