"""``kairos serve --workers N``: N uvicorn worker processes, each on its own listening socket
(ADR 0084).

uvicorn's own supervisor binds one socket and shares it with every worker. A connection that
arrives wakes them all, and the first to run accepts every connection waiting. A few keep-alive
connections opened together (an orchestrator's connection pool, a load generator) then all land
on one process while the others idle. Here each worker binds its own socket to the address with
``SO_REUSEPORT``, and the kernel gives each new connection to one of them by a hash of the
connection's addresses and ports.

The supervisor starts the workers and restarts one that dies. A worker that exits with uvicorn's
start-up failure code stops them all, since the next one would fail the same way. On SIGINT or
SIGTERM it sends SIGTERM to the workers, which shut down gracefully, and waits for them.
Unlike uvicorn's supervisor it does not ping workers, so a hung worker is not replaced.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
from multiprocessing.context import SpawnProcess
from types import FrameType

from uvicorn import Config, Server
from uvicorn.config import STARTUP_FAILURE

logger = logging.getLogger("uvicorn.error")

#: seconds between the supervisor's checks of its workers
CHECK_INTERVAL_S = 0.5


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``(host, port)`` with ``SO_REUSEPORT``: every worker binds one, and the
    kernel shares incoming connections out among them."""
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def claim_port(host: str, port: int) -> int:
    """The port the workers will share: ``port``, or a free one for 0. Raises ``OSError`` when
    anything holds it, including another server's ``SO_REUSEPORT`` group, which a plain bind
    cannot join (the workers alone would join it and split its traffic)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
        probe.bind((host, port))
        bound: int = probe.getsockname()[1]
        return bound


def _worker(config: Config) -> None:
    """One worker process: its own socket, then uvicorn's server on it."""
    config.configure_logging()
    try:
        sock = reuse_port_socket(config.host, config.port)
    except OSError as exc:
        logger.error(
            "worker %d could not bind %s:%d: %s", os.getpid(), config.host, config.port, exc
        )
        sys.exit(STARTUP_FAILURE)
    server = Server(config)
    with contextlib.suppress(KeyboardInterrupt):  # a terminal's Ctrl+C reaches the workers too
        server.run(sockets=[sock])
    if not server.started:
        sys.exit(STARTUP_FAILURE)


class Supervisor:
    """Keeps ``workers`` worker processes serving ``config`` until SIGINT or SIGTERM."""

    def __init__(self, config: Config, workers: int) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.config = config
        self.workers = workers
        self.processes: list[SpawnProcess] = []
        self._stop = threading.Event()
        self._spawn = multiprocessing.get_context("spawn")

    def _start(self) -> SpawnProcess:
        process = self._spawn.Process(target=_worker, args=(self.config,), name="kairos-worker")
        process.start()
        return process

    def _on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        self._stop.set()

    def run(self) -> int:
        """Serve until stopped; 0, or uvicorn's start-up failure code if a worker failed to
        start."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        logger.info("Started supervisor process [%d]", os.getpid())
        self.processes = [self._start() for _ in range(self.workers)]
        failed = False
        while not self._stop.wait(CHECK_INTERVAL_S):
            failed = self.replace_dead()
            if failed:
                break
        self.stop()
        return STARTUP_FAILURE if failed else 0

    def replace_dead(self) -> bool:
        """Start a new worker for each that ended; True (and nothing restarted) once one ended
        with the start-up failure code."""
        for index, process in enumerate(self.processes):
            if process.is_alive():
                continue
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                logger.error("worker [%s] failed to start; stopping", process.pid)
                return True
            logger.warning(
                "worker [%s] ended (exit %s); starting another", process.pid, process.exitcode
            )
            self.processes[index] = self._start()
        return False

    def stop(self) -> None:
        """SIGTERM every live worker (uvicorn's graceful shutdown), then wait for them."""
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        for process in self.processes:
            process.join()
        logger.info("Stopped supervisor process [%d]", os.getpid())
