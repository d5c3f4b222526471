"""``kairos serve | migrate | worker``, dispatched from :mod:`kairos.cli` (``argv[0]``: command)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence

from app.settings import Settings, get_settings

logger = logging.getLogger(__name__)


def _serve(args: Sequence[str]) -> int:
    import uvicorn

    settings = get_settings()
    parser = argparse.ArgumentParser(prog="kairos serve", description="Run the HTTP API.")
    parser.add_argument("--host", default=settings.HOST, help="default: KAIROS_HOST")
    parser.add_argument("--port", type=int, default=settings.PORT, help="default: KAIROS_PORT")
    parser.add_argument(
        "--workers", type=int, default=settings.WORKERS, help="uvicorn worker processes"
    )
    parser.add_argument(
        "--no-migrate", action="store_true", help="do not upgrade the schema before serving"
    )
    opts = parser.parse_args(args)
    if not opts.no_migrate:
        _migrate_now(settings)  # once, before workers fork, so they never race to migrate
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=opts.host,
        port=opts.port,
        workers=opts.workers,
        log_level=settings.LOG_LEVEL,
        proxy_headers=False,
    )
    return 0


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
    """A decision worker reading the Redis request stream (:mod:`app.batching.worker`)."""
    from app.batching.worker import main as worker_main

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
