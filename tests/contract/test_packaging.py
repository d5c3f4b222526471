"""The wheel carries the shipped models (issue 24, item 1; ADR 0089): every
``models/<name>/<version>/`` of the checkout is ``app/shipped_models/<name>/<version>/`` in it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from app.policy.registry import PACKAGED_MODELS

ROOT = Path(__file__).resolve().parents[2]


def _tracked() -> list[str]:
    """The checkout's files as git lists them: a wheel is built from these, so a model being
    written into ``models/`` (not yet added) is neither expected in it nor copied into it."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    return [f.decode() for f in files if f]


def _shipped(tracked: list[str]) -> set[str]:
    shipped = {
        f"app/shipped_models/{name.removeprefix('models/')}"
        for name in tracked
        if name.startswith("models/")
        and name.count("/") == 3
        and name.rsplit("/", 1)[1] in {"policy.onnx", "card.json"}
    }
    assert shipped, "git lists no shipped model under models/"
    return shipped


def test_the_editable_install_reads_the_checkouts_models() -> None:
    assert PACKAGED_MODELS.resolve() == (ROOT / "models").resolve()


def test_the_wheel_carries_every_shipped_model(tmp_path: Path) -> None:
    source = tmp_path / "src"
    tracked = _tracked()
    wanted = [f for f in tracked if not f.startswith(("tests/", "clients/"))]
    for name in wanted:  # a copy: building writes build/ and *.egg-info beside the sources
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        origin = ROOT / name
        if origin.is_symlink():
            target.symlink_to(origin.readlink())
        elif origin.is_file():
            target.write_bytes(origin.read_bytes())
    out = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            str(source),
            "-w",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("kairos-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert _shipped(tracked) <= names
    assert not any("_tenants" in n for n in names)  # uploads never travel
