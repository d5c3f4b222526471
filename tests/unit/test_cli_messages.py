"""Command-line messages a person can act on (issue 24, item 6): a busy port is one line naming
the port and ``KAIROS_PORT``, said before the start-up; ``python -m benchmarks --help`` is help."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main as app_main
from app.settings import get_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    db = tmp_path / "kairos.db"
    for name in list(os.environ):
        if name.startswith("KAIROS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KAIROS_DATABASE_URL", f"sqlite:///{db}")
    get_settings.cache_clear()
    yield db
    get_settings.cache_clear()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_busy_port_is_one_line_before_the_start_up(
    busy_port: int, database: Path, workers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--host", "127.0.0.1", "--port", str(busy_port), "--workers", workers]
    code = app_main(argv)
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"kairos serve: port {busy_port} on 127.0.0.1 is already in use; stop what listens "
        "there, or choose another port with --port or KAIROS_PORT"
    )
    assert not database.exists()  # refused before the migration, the slow part of start-up


def test_benchmarks_help_is_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("usage: python -m benchmarks")
    assert "decide" in done.stdout
    assert "simulate" in done.stdout


def test_an_unknown_benchmark_names_the_known_ones() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    known = "batching, core, core_scale, dag_round, decide"
    assert f"no benchmark nope; choose from {known}" in done.stderr


def test_options_after_one_benchmark_are_its_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "simulate", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout


def test_options_need_exactly_one_benchmark() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "simulate", "core", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "need exactly one benchmark" in done.stderr
