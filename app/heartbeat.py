"""Worker liveness for ``kairos serve --workers N`` (ADR 0084).

Each worker's event loop touches a file of its own once a second while it serves; the
supervisor replaces a worker whose file has not been touched for ``KAIROS_WORKER_HANG_TIMEOUT_S``.
A process that is alive but whose loop is blocked (a handler that blocks, a deadlock) answers
nobody, yet the kernel keeps giving it its share of new connections: the heartbeat comes from
the loop itself, so it stops exactly then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from app.background import running

logger = logging.getLogger(__name__)

#: seconds between a worker's beats
INTERVAL_S = 1.0


def beat_path(directory: Path, pid: int) -> Path:
    return directory / f"{pid}.beat"


@contextlib.asynccontextmanager
async def beating(directory: str | None) -> AsyncIterator[None]:
    """While the block runs, touch this process's file in ``directory`` once a second from the
    running loop (nothing when ``directory`` is None: one process, no supervisor)."""
    if directory is None:
        yield
        return
    path = beat_path(Path(directory), os.getpid())

    async def beat() -> None:
        while True:
            try:
                path.touch()
            except OSError:  # the supervisor sees the beat go stale: this says why
                logger.warning("cannot beat in %s", directory, exc_info=True)
            await asyncio.sleep(INTERVAL_S)

    try:
        async with running(beat(), "kairos-heartbeat"):
            yield
    finally:
        path.unlink(missing_ok=True)


def stale_for(directory: Path, pid: int, now: float | None = None) -> float | None:
    """Seconds since ``pid`` last beat, or None before its first beat (starting) and after its
    last (stopped)."""
    try:
        touched = beat_path(directory, pid).stat().st_mtime
    except FileNotFoundError:
        return None
    return (time.time() if now is None else now) - touched
