"""Run Alembic from inside the service: ``kairos migrate`` and the on-start upgrade."""

from __future__ import annotations

import logging
from pathlib import Path

# alembic announces each built-in plugin at INFO when its modules are imported, so the level is
# set before the first alembic import; alembic.runtime.migration's "Running upgrade" lines stay
logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)

from alembic import command  # noqa: E402
from alembic.config import Config  # noqa: E402
from alembic.runtime.migration import MigrationContext  # noqa: E402
from alembic.script import ScriptDirectory  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.engine import Connection  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402

from app.db.engine import SQLITE_BEGIN_IMMEDIATE  # noqa: E402

#: migrations/ beside the ``app`` package (the repository root, or the image's /app).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
#: pg_advisory_xact_lock key: several processes starting at once migrate one at a time.
_MIGRATION_LOCK_KEY = 0x4B41_4952  # "KAIR"


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The one head of the script directory (alembic raises when branches are left unmerged)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations under {MIGRATIONS_DIR}")
    return head


def _current(connection: Connection) -> set[str]:
    return set(MigrationContext.configure(connection).get_current_heads())


async def current_revisions(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return await conn.run_sync(_current)


async def is_behind(engine: AsyncEngine) -> bool:
    return await current_revisions(engine) != {head_revision()}


def _upgrade(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
    if _current(connection) != {head_revision()}:
        command.upgrade(alembic_config(connection), "head")


async def upgrade_to_head(engine: AsyncEngine) -> None:
    """Upgrade to the newest migration in one transaction (a no-op when already there)."""
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            await conn.execution_options(**{SQLITE_BEGIN_IMMEDIATE: True})
        async with conn.begin():
            await conn.run_sync(_upgrade)
