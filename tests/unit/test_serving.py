"""The ``kairos serve --workers N`` supervisor (ADR 0084): sockets and restarts, without
starting workers (``tests/integration/api/test_api_worker_processes.py`` runs real ones)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
from uvicorn import Config
from uvicorn.config import STARTUP_FAILURE

from app.heartbeat import beat_path, beating, stale_for
from app.serving import Supervisor, claim_port, reuse_port_socket


def test_workers_join_one_port_and_nothing_else_can_claim_it() -> None:
    port = claim_port("127.0.0.1", 0)
    assert port > 0
    first = reuse_port_socket("127.0.0.1", port)
    second = reuse_port_socket("127.0.0.1", port)  # another worker joins the group
    try:
        first.listen()
        second.listen()
        with pytest.raises(OSError, match="in use"):  # a second server would join the group
            claim_port("127.0.0.1", port)
    finally:
        first.close()
        second.close()
    assert claim_port("127.0.0.1", port) == port  # free again


class _Ended:
    """A worker process that has ended with ``exitcode`` (or is alive)."""

    def __init__(self, exitcode: int | None, alive: bool = False, pid: int = 4242) -> None:
        self.exitcode = exitcode
        self.alive = alive
        self.pid = pid
        self.joined = False
        self.killed = False

    def is_alive(self) -> bool:
        return self.alive

    def join(self) -> None:
        self.joined = True

    def kill(self) -> None:
        self.killed = True
        self.alive = False


def _supervisor(
    processes: list[_Ended], heartbeat_dir: Path | None = None
) -> tuple[Supervisor, list[_Ended]]:
    supervisor = Supervisor(
        Config("app.main:create_app", factory=True),
        workers=len(processes),
        hang_timeout_s=10.0,
        heartbeat_dir=heartbeat_dir,
    )
    started: list[_Ended] = []

    def start() -> _Ended:
        started.append(_Ended(None, alive=True))
        return started[-1]

    supervisor._start = start  # type: ignore[method-assign,assignment]
    supervisor.processes = processes  # type: ignore[assignment]
    return supervisor, started


def test_a_worker_that_dies_is_replaced_and_the_others_are_left_alone() -> None:
    alive, killed = _Ended(None, alive=True), _Ended(-9)
    supervisor, started = _supervisor([alive, killed])
    assert supervisor.replace_dead() is False
    assert killed.joined
    assert supervisor.processes == [alive, *started]
    assert len(started) == 1


def test_a_worker_that_failed_to_start_stops_the_supervisor_without_restarts() -> None:
    supervisor, started = _supervisor([_Ended(None, alive=True), _Ended(STARTUP_FAILURE)])
    assert supervisor.replace_dead() is True
    assert started == []


def test_a_worker_whose_loop_stopped_beating_is_killed_and_replaced(tmp_path: Path) -> None:
    beating, silent, starting = (_Ended(None, alive=True, pid=p) for p in (101, 102, 103))
    now = time.time()
    for process, age in ((beating, 1.0), (silent, 11.0)):  # 103 has not beaten yet
        beat = beat_path(tmp_path, process.pid)
        beat.touch()
        os.utime(beat, (now - age, now - age))
    supervisor, started = _supervisor([beating, silent, starting], heartbeat_dir=tmp_path)
    assert supervisor.replace_dead() is False
    assert silent.killed
    assert silent.joined
    assert not beating.killed
    assert not starting.killed
    assert supervisor.processes == [beating, started[0], starting]
    assert not beat_path(tmp_path, silent.pid).exists()  # its pid may be reused


async def test_a_worker_beats_from_its_loop_while_it_serves(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        beat_path(tmp_path, os.getpid()).stat()
    async with beating(str(tmp_path)):
        await asyncio.sleep(0)
        silent = stale_for(tmp_path, os.getpid())
        assert silent is not None
        assert silent < 1.0
    assert stale_for(tmp_path, os.getpid()) is None  # gone at exit: stopped is not hung
    async with beating(None):  # one process, no supervisor: nothing to beat for
        pass
    assert not any(os.scandir(tmp_path))


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="workers"):
        Supervisor(Config("app.main:create_app"), workers=0)


def test_without_a_kernel_that_shares_reuse_port_uvicorn_supervises_one_socket(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import uvicorn

    import app.serving
    from app.cli import _serve

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(app.serving, "kernel_shares_reuse_port", lambda: False)
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: calls.append(kwargs))
    # kairos serve points the workers' metrics here; monkeypatch takes it out again after
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert _serve(["--workers", "2", "--no-migrate", "--port", "0"]) == 0
    assert len(calls) == 1
    assert calls[0]["workers"] == 2


def test_a_worker_that_ignores_sigterm_is_killed_when_the_supervisor_stops() -> None:
    """A worker whose loop is blocked never runs its SIGTERM handler: stopping must not wait
    for it forever."""
    supervisor = Supervisor(Config("app.main:create_app", factory=True), workers=1)
    stubborn = multiprocessing.get_context("spawn").Process(
        target=os.execvp, args=("sh", ["sh", "-c", "trap '' TERM; sleep 60"])
    )
    stubborn.start()
    time.sleep(0.5)  # past Python's start-up, into the shell that ignores SIGTERM
    supervisor.processes = [stubborn]
    started = time.monotonic()
    supervisor.stop(timeout_s=1.0)
    assert not stubborn.is_alive()
    assert stubborn.exitcode == -signal.SIGKILL
    assert time.monotonic() - started < 30
