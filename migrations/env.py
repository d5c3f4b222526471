"""Alembic environment: async engine + ``run_sync``, batch mode on SQLite.

Two entry points: ``app.db.migrate`` passes an open connection in ``config.attributes``; the plain
``alembic`` command builds an engine from ``KAIROS_DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

from app.db import orm  # registers the tables on Base.metadata
from app.db.base import Base
from app.db.engine import make_engine
from app.settings import get_settings

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = make_engine(get_settings().DATABASE_URL)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection: Any = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_async())


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
