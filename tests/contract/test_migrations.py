"""The Alembic head and the ORM metadata describe the same schema, on Postgres and SQLite."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from app.db import orm  # noqa: F401  (registers the tables)
from app.db.base import Base
from app.db.engine import make_engine
from app.db.migrate import current_revisions, head_revisions, upgrade_to_head


def _diff(connection: Connection) -> list[object]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "compare_server_default": True}
    )
    return list(compare_metadata(context, Base.metadata))


async def test_autogenerate_finds_no_difference(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        await upgrade_to_head(engine)
        assert await current_revisions(engine) == head_revisions()
        async with engine.connect() as conn:
            diff = await conn.run_sync(_diff)
        assert diff == [], f"migrations and ORM disagree: {diff}"
    finally:
        await engine.dispose()


async def test_upgrade_is_idempotent(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        await upgrade_to_head(engine)
        await upgrade_to_head(engine)
        assert await current_revisions(engine) == head_revisions()
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u@h:5432/db", "postgresql+asyncpg"),
        ("sqlite:///./x.db", "sqlite+aiosqlite"),
        ("sqlite+aiosqlite:///./x.db", "sqlite+aiosqlite"),
    ],
)
def test_plain_urls_pick_async_drivers(url: str, driver: str) -> None:
    from app.db.engine import async_url

    assert async_url(url).drivername == driver


def test_unsupported_url_is_refused() -> None:
    from app.db.engine import UnsupportedDatabaseError, async_url

    with pytest.raises(UnsupportedDatabaseError):
        async_url("mysql://u@h/db")
