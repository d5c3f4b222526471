"""``kairos serve --workers N``: N uvicorn worker processes, each on its own listening socket
(ADR 0084).

uvicorn's own supervisor binds one socket and shares it with every worker. A connection that
arrives wakes them all, and the first to run accepts every connection waiting. A few keep-alive
connections opened together (an orchestrator's connection pool, a load generator) then all land
on one process while the others idle. Here each worker binds its own socket to the address with
``SO_REUSEPORT``, and the kernel gives each new connection to one of them by a hash of the
connection's addresses and ports.

The supervisor starts the workers and restarts one that dies. It also replaces (SIGKILL, then a
new one) a worker whose event loop has stopped beating (:mod:`app.heartbeat`): alive but
blocked, such a worker would still get its share of new connections. A worker that exits with
uvicorn's start-up failure code stops them all, since the next one would fail the same way. On
SIGINT or SIGTERM it sends SIGTERM to the workers, which shut down gracefully, and waits for them.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from multiprocessing.context import SpawnProcess
from pathlib import Path
from types import FrameType

from uvicorn import Config, Server
from uvicorn.config import STARTUP_FAILURE

from app.heartbeat import beat_path, stale_for

logger = logging.getLogger("uvicorn.error")

#: seconds between the supervisor's checks of its workers
CHECK_INTERVAL_S = 0.5
#: the variable that tells the workers where to beat (``KAIROS_HEARTBEAT_DIR``)
HEARTBEAT_ENV = "KAIROS_HEARTBEAT_DIR"
#: seconds a stopping worker has to shut down gracefully before it is killed (a worker whose
#: loop is blocked never runs its SIGTERM handler)
STOP_TIMEOUT_S = 15.0


def kernel_shares_reuse_port() -> bool:
    """Whether sockets bound with ``SO_REUSEPORT`` share incoming connections out: Linux does
    (since 3.9); elsewhere the option is missing or lets one socket take them all."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


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
    """Keeps ``workers`` worker processes serving ``config`` until SIGINT or SIGTERM.

    The workers beat in ``heartbeat_dir`` (a temporary directory when None); one silent for
    ``hang_timeout_s`` is replaced."""

    def __init__(
        self,
        config: Config,
        workers: int,
        *,
        hang_timeout_s: float = 10.0,
        heartbeat_dir: Path | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if hang_timeout_s <= 0:
            raise ValueError("hang_timeout_s must be > 0")
        self.config = config
        self.workers = workers
        self.hang_timeout_s = hang_timeout_s
        self.heartbeat_dir = heartbeat_dir
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
        made = None
        if self.heartbeat_dir is None:
            made = self.heartbeat_dir = Path(tempfile.mkdtemp(prefix="kairos-heartbeat-"))
        self.heartbeat_dir.mkdir(parents=True, exist_ok=True)
        os.environ[HEARTBEAT_ENV] = str(self.heartbeat_dir)  # the workers inherit it
        logger.info("Started supervisor process [%d]", os.getpid())
        try:
            self.processes = [self._start() for _ in range(self.workers)]
            failed = False
            while not self._stop.wait(CHECK_INTERVAL_S):
                failed = self.replace_dead()
                if failed:
                    break
            self.stop()
        finally:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
        return STARTUP_FAILURE if failed else 0

    def _hung(self, process: SpawnProcess) -> bool:
        """Alive, but its loop has not beaten for ``hang_timeout_s``: killed (SIGKILL)."""
        if self.heartbeat_dir is None or process.pid is None:
            return False
        silent = stale_for(self.heartbeat_dir, process.pid)
        if silent is None or silent <= self.hang_timeout_s:
            return False
        logger.error(
            "worker [%d] has not beaten for %.1f s (KAIROS_WORKER_HANG_TIMEOUT_S %.1f); killing it",
            process.pid,
            silent,
            self.hang_timeout_s,
        )
        process.kill()
        return True

    def replace_dead(self) -> bool:
        """Start a new worker for each that ended or hung; True (and nothing restarted) once one
        ended with the start-up failure code."""
        for index, process in enumerate(self.processes):
            if process.is_alive() and not self._hung(process):
                continue
            process.join()
            if self.heartbeat_dir is not None and process.pid is not None:
                beat_path(self.heartbeat_dir, process.pid).unlink(missing_ok=True)
            if process.exitcode == STARTUP_FAILURE:
                logger.error("worker [%s] failed to start; stopping", process.pid)
                return True
            logger.warning(
                "worker [%s] ended (exit %s); starting another", process.pid, process.exitcode
            )
            self.processes[index] = self._start()
        return False

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every live worker (uvicorn's graceful shutdown), wait for them, and kill the
        ones still alive after ``timeout_s``."""
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                logger.error(
                    "worker [%s] did not stop in %.0f s; killing it", process.pid, timeout_s
                )
                process.kill()
                process.join()
        logger.info("Stopped supervisor process [%d]", os.getpid())
