"""``kairos serve | migrate | worker``, dispatched from :mod:`kairos.cli` (``argv[0]``: command)."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.settings import Settings, get_settings

logger = logging.getLogger(__name__)


#: what ``kairos serve`` serves
APP_FACTORY = "app.main:create_app"


def _serve(args: Sequence[str]) -> int:
    import uvicorn

    settings = get_settings()
    parser = argparse.ArgumentParser(prog="kairos serve", description="Run the HTTP API.")
    parser.add_argument("--host", default=settings.HOST, help="default: KAIROS_HOST")
    parser.add_argument("--port", type=int, default=settings.PORT, help="default: KAIROS_PORT")
    parser.add_argument(
        "--workers",
        type=int,
        default=settings.WORKERS,
        help="worker processes, each on its own SO_REUSEPORT socket (default: KAIROS_WORKERS)",
    )
    parser.add_argument(
        "--no-migrate", action="store_true", help="do not upgrade the schema before serving"
    )
    parser.add_argument(
        "--app",
        default=APP_FACTORY,
        help=f"import string of the ASGI app factory (default {APP_FACTORY}; benchmarks serve "
        "an instrumented one)",
    )
    opts = parser.parse_args(args)
    from app.serving import claim_port, kernel_shares_reuse_port

    try:  # before the start-up, which takes seconds, so that a busy port is said at once
        claim_port(opts.host, opts.port)
    except OSError as exc:
        print(_cannot_listen(opts.host, opts.port, exc), file=sys.stderr)  # noqa: T201
        return 1
    if not opts.no_migrate:
        _migrate_now(settings)  # once, before workers fork, so they never race to migrate

    made = _share_metrics(settings) if opts.workers > 1 else None
    try:
        if opts.workers > 1 and kernel_shares_reuse_port():
            return _supervise(opts, settings)
        if opts.workers > 1:  # no socket per worker here: uvicorn's supervisor, one socket
            logger.warning("SO_REUSEPORT does not share connections here; one shared socket")
        uvicorn.run(
            opts.app,
            factory=True,
            host=opts.host,
            port=opts.port,
            workers=opts.workers,
            log_level=settings.LOG_LEVEL,
            log_config=_log_config(settings),
            proxy_headers=False,
        )
        return 0
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


def _supervise(opts: argparse.Namespace, settings: Settings) -> int:
    """The workers, each on its own SO_REUSEPORT socket, so that the kernel shares connections
    out (uvicorn's supervisor shares one socket, and one worker may take a burst; ADR 0084)."""
    import uvicorn

    from app.serving import Supervisor, claim_port

    try:
        port = claim_port(opts.host, opts.port)
    except OSError as exc:
        print(_cannot_listen(opts.host, opts.port, exc), file=sys.stderr)  # noqa: T201
        return 1
    config = uvicorn.Config(
        opts.app,
        factory=True,
        host=opts.host,
        port=port,
        workers=opts.workers,
        log_level=settings.LOG_LEVEL,
        log_config=_log_config(settings),
        proxy_headers=False,
    )
    heartbeats = Path(settings.HEARTBEAT_DIR) if settings.HEARTBEAT_DIR else None
    supervisor = Supervisor(
        config,
        opts.workers,
        hang_timeout_s=settings.WORKER_HANG_TIMEOUT_S,
        heartbeat_dir=heartbeats,
    )
    return supervisor.run()


def _cannot_listen(host: str, port: int, exc: OSError) -> str:
    """One line: why ``kairos serve`` cannot listen on ``host:port``, and the settings to
    change."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"kairos serve: port {port} on {host} is already in use; stop what listens there, "
            "or choose another port with --port or KAIROS_PORT"
        )
    return (
        f"kairos serve: cannot listen on {host}:{port} ({exc.strerror or exc}); choose another "
        "port with --port or KAIROS_PORT, or another address with --host or KAIROS_HOST"
    )


def _log_config(settings: Settings) -> dict[str, Any]:
    """uvicorn's logging configuration, with secrets redacted from every line (the access log
    included) in each serving process."""
    from app.observability import uvicorn_log_config

    return uvicorn_log_config(settings.LOG_LEVEL)


#: prometheus_client's multiprocess switch (``app.observability.MULTIPROC_ENV``; not imported
#: here, so that this process loads no metrics code before the workers start)
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _share_metrics(settings: Settings) -> str | None:
    """Point every worker process's metrics at one directory, so that a scrape of any of them
    speaks for all (ADR 0080); returns the directory if this call made it (to remove at exit).

    The directory is ``PROMETHEUS_MULTIPROC_DIR`` if set, else ``KAIROS_METRICS_DIR``, else a
    new temporary one. Values an earlier run left there are removed: they would be summed in."""
    given = os.environ.get(_MULTIPROC_ENV) or settings.METRICS_DIR
    path = Path(given) if given else Path(tempfile.mkdtemp(prefix="kairos-metrics-"))
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    os.environ[_MULTIPROC_ENV] = str(path)  # the workers inherit it
    return None if given else str(path)


def _migrate_now(settings: Settings) -> None:
    from app.db.engine import make_engine
    from app.db.migrate import upgrade_to_head

    async def run() -> None:
        engine = make_engine(settings.DATABASE_URL)
        try:
            await upgrade_to_head(engine)
        finally:
            await engine.dispose()

    asyncio.run(run())


def _migrate(args: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="kairos migrate", description="Upgrade the database schema to the newest migration."
    )
    parser.parse_args(args)
    settings = get_settings()
    _migrate_now(settings)
    print("database schema is at head", file=sys.stderr)  # noqa: T201
    return 0


def _worker(args: Sequence[str]) -> int:
    """A decision worker reading the Redis request stream (:mod:`app.policy.worker`)."""
    from app.policy.worker import main as worker_main

    return worker_main(args, get_settings())


#: command name -> handler; the pipeline registers ``worker`` here.
COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "serve": _serve,
    "migrate": _migrate,
    "worker": _worker,
}


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: kairos {{{','.join(COMMANDS)}}} [options]", file=sys.stderr)  # noqa: T201
        return 2
    from app.observability import configure_logging

    configure_logging(get_settings().LOG_LEVEL)
    return COMMANDS[argv[0]](list(argv[1:]))
