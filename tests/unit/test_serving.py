"""The ``kairos serve --workers N`` supervisor (ADR 0084): sockets and restarts, without
starting workers (``tests/integration/api/test_api_worker_processes.py`` runs real ones)."""

from __future__ import annotations

import pytest
from uvicorn import Config
from uvicorn.config import STARTUP_FAILURE

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
    """A worker process that has ended with ``exitcode``."""

    def __init__(self, exitcode: int | None, alive: bool = False) -> None:
        self.exitcode = exitcode
        self.alive = alive
        self.pid = 4242
        self.joined = False

    def is_alive(self) -> bool:
        return self.alive

    def join(self) -> None:
        self.joined = True


def _supervisor(processes: list[_Ended]) -> tuple[Supervisor, list[_Ended]]:
    supervisor = Supervisor(Config("app.main:create_app", factory=True), workers=len(processes))
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


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="workers"):
        Supervisor(Config("app.main:create_app"), workers=0)
